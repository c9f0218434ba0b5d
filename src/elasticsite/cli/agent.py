"""``elasticsite agent``: the recontextualization agent a worker runs to follow its
context."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from elasticsite import logs
from elasticsite.cli.common import LogFormatOpt, NonNegativeFloat, error_line, finite, tell

__all__ = ["agent"]


def agent(
    userdata: Annotated[
        Path | None, typer.Option(help="User data JSON (default: $ELASTICSITE_USERDATA).")
    ] = None,
    uri: Annotated[str | None, typer.Option(help="Context URI (overrides user data).")] = None,
    key: Annotated[str | None, typer.Option(help="Context key.")] = None,
    secret: Annotated[str | None, typer.Option(help="Context secret.")] = None,
    ca: Annotated[
        Path | None, typer.Option(help="PEM the broker's certificate is checked against.")
    ] = None,
    scripts: Annotated[
        Path | None, typer.Option(help="Scripts root (default: the shipped ones).")
    ] = None,
    state: Annotated[
        Path | None, typer.Option(help="State file (default: ROOT/var/lib/elasticsite/agent.json).")
    ] = None,
    root: Annotated[Path, typer.Option(help="Root the scripts write under.")] = Path("/"),
    period: Annotated[NonNegativeFloat, typer.Option(help="Poll every N s; 0 = long poll.")] = 0.0,
    wait: Annotated[float, typer.Option(min=0, max=60, help="Long-poll timeout, s.")] = 30.0,
    short_hostname: Annotated[
        str | None, typer.Option(help="Override the short host name.")
    ] = None,
    hostname: Annotated[str | None, typer.Option(help="Override the FQDN.")] = None,
    address: Annotated[str | None, typer.Option(help="Override the address peers reach.")] = None,
    ssh_host_key: Annotated[str | None, typer.Option(help="Host key line, or a .pub file.")] = None,
    data: Annotated[str, typer.Option(help="Free-form data shared with the context.")] = "",
    no_leave: Annotated[bool, typer.Option("--no-leave", help="Stay a member on exit.")] = False,
    strict: Annotated[bool, typer.Option(help="Stop when a script fails.")] = False,
    once: Annotated[bool, typer.Option(help="Apply what is there, then exit.")] = False,
    script_timeout: Annotated[
        float, typer.Option(min=0.1, callback=finite, help="Per-script limit, s.")
    ] = 120.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Log warnings only.")] = False,
    log_format: LogFormatOpt = "human",
) -> None:
    """Keep this node in step with its context: join, then run scripts as nodes come and go."""
    from elasticsite.context.agent import DEFAULT_SCRIPTS, AgentError, configure, run_agent

    logs.setup(
        logging.WARNING if quiet else logging.INFO,
        fmt="%(asctime)s %(levelname)s %(name)s: %(message)s",
        log_format=log_format,
    )
    try:
        settings = configure(
            userdata=userdata,
            uri=uri,
            key=key,
            secret=secret,
            ca=ca,
            root=root,
            state=state,
            scripts=scripts or DEFAULT_SCRIPTS,
            short_hostname=short_hostname,
            hostname=hostname,
            address=address,
            ssh_host_key=ssh_host_key,
            data=data,
            period=period,
            wait=wait,
            leave=not no_leave,
            strict=strict,
            once=once,
            script_timeout=script_timeout,
        )
        code = run_agent(settings)
    except AgentError as exc:
        tell(error_line(str(exc)))
        raise typer.Exit(1) from None
    raise typer.Exit(code)
