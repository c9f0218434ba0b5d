"""``elasticsite urgent key add|list|remove``: the principals of the urgent services;
``elasticsite urgent submit``: an urgent job on this site, as the one who runs it;
``elasticsite urgent gate``: the local socket that submits for users as who they are.

The keys live with the server's state (``urgent.db`` in its ``--state-dir``, 0600); a
key is printed once, when made, and only its digest is kept. Serve the services with
``elasticsite broker --urgent``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from elasticsite.cli.common import (
    ConfigOpt,
    PositiveInt,
    console,
    err,
    fail,
    finite,
    open_configured_site,
    say,
    tell,
    urgent_section,
)
from elasticsite.cli.urgent_drill import drill as _drill
from elasticsite.cli.urgent_sim import simulate as _simulate

if TYPE_CHECKING:
    from elasticsite.urgent.principals import Principals

__all__ = ["urgent_app"]

urgent_app = typer.Typer(
    help="Urgent computing: urgent jobs, and the keys of the urgent services.",
    no_args_is_help=True,
)
key_app = typer.Typer(help="API keys of administrators, users and resources.", no_args_is_help=True)
urgent_app.add_typer(key_app, name="key")
urgent_app.command("simulate")(_simulate)
urgent_app.command("drill")(_drill)

StateDir = Annotated[
    Path, typer.Option("--state-dir", help="The server's state directory (holds urgent.db).")
]


def _principals(state_dir: Path) -> Principals:
    from elasticsite.files import StateFileError, private_dir
    from elasticsite.urgent.principals import Principals
    from elasticsite.urgent.store import UrgentStore

    try:
        store = UrgentStore(private_dir(state_dir) / "urgent.db")
    except (StateFileError, OSError) as exc:
        raise fail(str(exc)) from None
    return Principals(store.db)


@key_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Who: a person, an administrator or a resource.")],
    state_dir: StateDir,
    role: Annotated[str, typer.Option(help="admin, user or resource.")] = "user",
    resource: Annotated[
        list[str] | None,
        typer.Option(help="A resource an admin or a resource principal acts on (repeatable)."),
    ] = None,
    identity: Annotated[
        list[str] | None,
        typer.Option(
            metavar="RESOURCE=IDENTITY",
            help="A user's identity on a resource, e.g. cluster=ann (repeatable).",
        ),
    ] = None,
) -> None:
    """Make a principal and print its key, once."""
    ids: dict[str, str] = {}
    for pair in identity or []:
        res, sep, ident = pair.partition("=")
        if not sep or not res or not ident:
            raise fail(f"--identity {pair!r}: give RESOURCE=IDENTITY")
        ids[res] = ident
    try:
        principal, key = _principals(state_dir).add(
            name, role, time.time(), resources=resource or [], identities=ids
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    say(f"{principal.role} {principal.name}: {', '.join(sorted(principal.resources))}")
    say(f"key (shown once, keep it secret): {key}")


@key_app.command("list")
def list_keys(state_dir: StateDir) -> None:
    """The principals (never their keys)."""
    for name, role, resources in _principals(state_dir).names():
        console.print(f"{role:<9} {name}  {', '.join(resources)}", highlight=False)


@key_app.command("remove")
def remove(name: str, state_dir: StateDir) -> None:
    """Remove a principal: its key stops working at once."""
    if not _principals(state_dir).remove(name):
        raise fail(f"no principal named {name!r}")
    console.print(f"removed {name}", highlight=False)


@urgent_app.command(
    "submit", context_settings={"allow_interspersed_args": False}, no_args_is_help=True
)
def submit(
    command: Annotated[list[str], typer.Argument(help="The job's command and arguments.")],
    urgency: Annotated[str, typer.Option(help="red, orange or yellow.")],
    config: ConfigOpt = None,
    resource: Annotated[
        str | None, typer.Option(help="Default: [urgent] resource, else the site id.")
    ] = None,
    cores: Annotated[PositiveInt, typer.Option()] = 1,
    walltime: Annotated[
        float, typer.Option(min=1, callback=finite, help="Requested time limit, s.")
    ] = 3600,
) -> None:
    """Submit an urgent job as yourself: urgent submit --urgency red -- ./forecast.sh"""
    import getpass

    from elasticsite.batch.base import BatchError, JobRequest
    from elasticsite.urgent.submit import Submitted, UrgentRefused

    urgency = urgency.strip().lower()
    if urgency not in ("red", "orange", "yellow"):
        raise fail(f"--urgency {urgency!r}: choose red, orange or yellow")
    cfg = urgent_section(config)
    site = open_configured_site(config)
    where = resource or cfg.resource or site.config.manager.site_id
    user = getpass.getuser()
    if cfg.socket:  # through the gate: it learns who we are from the kernel
        from elasticsite.urgent.gate import GateError, ask_gate

        ask = {"urgency": urgency, "command": list(command), "cores": cores,
               "walltime": walltime, "resource": resource}  # fmt: skip
        try:
            answer = ask_gate(cfg.socket, ask)
        except GateError as exc:
            tell(f"urgent submit refused: {exc}")
            raise typer.Exit(1) from None
        done = Submitted(answer["job_id"], answer["policy"], answer["token_id"],
                         answer.get("preempted", []), note=answer.get("note", ""))  # fmt: skip
        user, where = answer["user"], answer["resource"]
    else:
        try:
            done = _submit(site, where, JobRequest(list(command), cores, walltime, user), urgency)
        except UrgentRefused as exc:
            tell(f"urgent submit refused: {exc}")
            raise typer.Exit(1) from None
        except BatchError as exc:
            raise fail(str(exc)) from None
    console.print(done.job_id, highlight=False)
    tell(
        f"urgent job {done.job_id} on {where} as {user}: {urgency}, {done.policy}"
        + (f"; preempted {', '.join(done.preempted)}" if done.preempted else "")
        + (f"; {done.note}" if done.note else "")
    )


def _submit(site: Any, where: str, request: Any, urgency: str) -> Any:
    """Authenticate ``request`` with the resource's key, submit it and elevate it."""
    import httpx

    from elasticsite.urgent.submit import submit_urgent

    cfg = site.config.urgent
    verify: bool | str = cfg.ca if cfg.ca else True
    with httpx.Client(base_url=cfg.server, verify=verify, timeout=30) as client:
        return submit_urgent(site.batch, cfg, where, request, urgency, client)


@urgent_app.command("gate")
def gate(
    config: ConfigOpt = None,
    socket: Annotated[
        Path | None, typer.Option(help="Default: [urgent] socket of the configuration.")
    ] = None,
    max_connections: Annotated[
        int, typer.Option(min=1, help="Connections served at once (8 of one user at most).")
    ] = 64,
) -> None:
    """Serve the site's urgent submit gate on a local socket, until stopped.

    Run it as the site (the one account that can read the resource's key); users then
    submit with `elasticsite urgent submit`, as the Unix user the kernel says they are.
    """
    from elasticsite.batch.base import BatchError, JobRequest
    from elasticsite.urgent.gate import Gate, GateError
    from elasticsite.urgent.submit import UrgentRefused

    cfg = urgent_section(config)
    site = open_configured_site(config)
    path = socket or (Path(cfg.socket) if cfg.socket else None)
    if path is None:
        raise fail("give --socket, or set [urgent] socket")
    default = cfg.resource or site.config.manager.site_id

    def handle(user: str, req: Any) -> dict[str, Any]:
        where = req["resource"] or default
        request = JobRequest(req["command"], req["cores"], req["walltime"], user)
        try:
            done = _submit(site, where, request, req["urgency"])
        except (UrgentRefused, BatchError) as exc:
            raise GateError(str(exc)) from None
        return {"ok": True, "job_id": done.job_id, "policy": done.policy,
                "token_id": done.token_id, "preempted": done.preempted, "note": done.note,
                "user": user, "resource": where}  # fmt: skip

    try:
        server = Gate(path, handle, max_connections=max_connections)
    except OSError as exc:
        raise fail(f"cannot listen on {path}: {exc.strerror or exc}") from None
    err.print(f"urgent gate on {path} for {default}; Ctrl-C stops it", highlight=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
