"""``elasticsite broker``: run the recontextualization broker.

Parses and checks every option before anything is created, then serves the
project's one ASGI app until stopped; every failure is one line on stderr and exit
status 2.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import socket
import sqlite3
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from elasticsite import logs
from elasticsite.cli.common import (
    LogFormatOpt,
    NonNegativeInt,
    Port,
    PositiveFloat,
    PositiveInt,
    console,
    err,
    fail,
    finite,
    say,
)
from elasticsite.cli.context import TOKEN_ENV
from elasticsite.context.limits import BrokerLimits
from elasticsite.files import StateFileError, private_dir

if TYPE_CHECKING:
    from elasticsite.advisor.service import Advisor
    from elasticsite.dashboard.routes import Dashboard

__all__ = ["broker", "broker_limits"]

_LIMITS = BrokerLimits()  # the admission defaults the options show


def broker_limits(
    reserve: list[str], max_members: int, join_rate: float, join_burst: int, max_bytes: int
) -> BrokerLimits:
    """The broker's admission defaults, with this host's names reserved; a bad
    reserved name raises ValueError naming it."""
    from pydantic import ValidationError

    from elasticsite.context.models import ContextPolicy

    names: list[str] = []
    for name in (*reserve, socket.gethostname(), socket.getfqdn()):
        try:
            names.extend(ContextPolicy(reserved=[name]).reserved)
        except ValidationError:
            if name in reserve:
                raise ValueError(
                    f"--reserve {name!r} is neither a host name nor an address"
                ) from None
    return BrokerLimits(
        max_members=max_members,
        join_rate=join_rate,
        join_burst=join_burst,
        max_member_bytes=max_bytes,
        reserved=tuple(dict.fromkeys(names)),
    )


def _advisor(site_file: Path | None) -> tuple[Advisor | None, str | None, Path | None]:
    """The advisor of the site ``site_file`` configures, its token and the token's file;
    whatever is wrong with them is one error line."""
    if site_file is None:
        return None, None, None
    from elasticsite.advisor.routes import load_advisor_token
    from elasticsite.advisor.service import Advisor
    from elasticsite.cli.common import load_site_config
    from elasticsite.history.observations import HistoryStore, store_path

    cfg = load_site_config(site_file)
    if not cfg.advisor.resources:
        raise fail(f"{site_file}: [advisor] names no resources to rank; add [[advisor.resources]]")
    state = cfg.state_dir().resolve()
    try:
        store = HistoryStore(store_path(state))
        token, path = load_advisor_token(state)
    except (StateFileError, OSError, ValueError) as exc:
        raise fail(str(exc)) from None
    return Advisor(store, cfg.advisor), token, path


def _dashboard(site_file: Path | None) -> Dashboard | None:
    """The dashboard of the site ``site_file`` configures (its manager's state store)."""
    if site_file is None:
        return None
    from elasticsite.cli.common import load_site_config
    from elasticsite.dashboard.routes import Dashboard

    cfg = load_site_config(site_file)
    m = cfg.manager
    # Three missed samples (or steps, when they are slower) and the page says so.
    stale = 3 * max(m.history_interval or 60.0, m.interval)
    return Dashboard(
        cfg.state_dir().resolve() / "manager.db", stale_after=stale, site_file=site_file.absolute()
    )


def _state_dir(given: Path | None, site_file: Path | None) -> Path:
    """The broker's state directory: as given, else ``broker/`` in the state directory of
    the site it serves a dashboard or advisor for."""
    if given is not None:
        return given
    if site_file is None:
        raise fail(
            "give --state-dir, or --dashboard/--advisor SITE.toml to keep the broker's "
            "state in that site's state directory"
        )
    from elasticsite.cli.common import load_site_config

    site_state = load_site_config(site_file).state_dir().resolve()
    try:
        private_dir(site_state)  # the manager's too: never left open by the broker
    except StateFileError as exc:
        raise fail(str(exc)) from None
    return site_state / "broker"


def broker(
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Where the broker keeps its database and keys (default with --dashboard or "
            "--advisor: the site's state directory's broker/).",
            show_default=False,
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[Port, typer.Option(help="Port to listen on.")] = 8443,
    cert: Annotated[
        Path | None, typer.Option("--cert", help="TLS certificate (PEM).", show_default=False)
    ] = None,
    key: Annotated[
        Path | None, typer.Option("--key", help="TLS private key (PEM).", show_default=False)
    ] = None,
    insecure_http: Annotated[
        bool, typer.Option("--insecure-http", help="Serve plain HTTP (no TLS): tests only.")
    ] = False,
    admin_token_file: Annotated[
        Path | None,
        typer.Option(
            "--admin-token-file",
            help=f"File holding the admin token (else ${TOKEN_ENV}, else STATE_DIR/admin.token).",
            show_default=False,
        ),
    ] = None,
    public_url: Annotated[
        str | None,
        typer.Option(
            "--public-url",
            help="Base of the context URIs handed out (default: as the client reached us).",
            show_default=False,
        ),
    ] = None,
    history: Annotated[
        PositiveInt, typer.Option(help="Entries kept per context; older callers get a snapshot.")
    ] = 10_000,
    header_timeout: Annotated[
        PositiveFloat,
        typer.Option(
            "--header-timeout",
            help="Seconds a client has to send a request's headers: from connecting (TLS "
            "handshake included), then from the first byte of each later request.",
        ),
    ] = 10.0,
    body_timeout: Annotated[
        PositiveFloat,
        typer.Option(
            "--body-timeout",
            help="Seconds a client has, once a request's headers are in, to send its whole "
            "body (answered 408 and disconnected if it does not).",
        ),
    ] = 30.0,
    keep_alive: Annotated[
        PositiveInt,
        typer.Option(
            "--keep-alive",
            help="Seconds an idle connection is kept between requests (longer than agents' "
            "pauses between polls).",
        ),
    ] = 75,
    max_connections: Annotated[
        PositiveInt,
        typer.Option(
            "--max-connections",
            help="Open connections at most, handshakes included; the open-files limit is "
            "raised to fit.",
        ),
    ] = 16_384,
    max_connections_per_address: Annotated[
        NonNegativeInt,
        typer.Option(
            "--max-connections-per-address",
            help="Open connections at most from one client address (an IPv6 client: its "
            "/64); 0: no limit (agents behind one NAT address).",
        ),
    ] = 512,
    reserve: Annotated[
        list[str] | None,
        typer.Option(
            help="A host name or address no node of any context may take (repeatable); "
            "this host's own names are always reserved.",
            show_default=False,
        ),
    ] = None,
    max_members: Annotated[
        PositiveInt, typer.Option(help="Members per context, unless the context sets its own.")
    ] = _LIMITS.max_members,
    join_rate: Annotated[
        float,
        typer.Option(
            min=0.001,
            callback=finite,
            help="Joins a second per context, unless it sets its own.",
        ),
    ] = _LIMITS.join_rate,
    join_burst: Annotated[
        PositiveInt,
        typer.Option(help="Joins at once above the rate, unless the context sets it."),
    ] = _LIMITS.join_burst,
    max_context_bytes: Annotated[
        int,
        typer.Option(min=1024, help="Bytes of member records one context may hold."),
    ] = _LIMITS.max_member_bytes,
    advisor: Annotated[
        Path | None,
        typer.Option(
            "--advisor",
            help="Also serve the deadline advisor of this site (its TOML file) at "
            "/advisor/advise, for bearers of its advisor.token or the admin token.",
            show_default=False,
        ),
    ] = None,
    dashboard: Annotated[
        Path | None,
        typer.Option(
            "--dashboard",
            help="Also serve the live dashboard of this site (its TOML file) at /dashboard, "
            "for the admin token's holder.",
            show_default=False,
        ),
    ] = None,
    urgent: Annotated[
        bool,
        typer.Option(
            "--urgent",
            help="Also serve the urgent-computing services at /urgent, and their portals at "
            "/urgent/portal (state in STATE_DIR/urgent.db; keys from `elasticsite urgent key "
            "add`).",
        ),
    ] = False,
    docs: Annotated[
        bool,
        typer.Option(
            "--docs",
            help="Also serve the API's description at /openapi.json, /docs and /redoc, to "
            "anyone who reaches the port (off by default: it maps every route).",
        ),
    ] = False,
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = False,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True)] = 0,
    log_format: LogFormatOpt = "human",
) -> None:
    """Run the recontextualization broker (HTTPS; a self-signed certificate by default)."""
    from elasticsite.connlimits import ConnectionLimits, LimitError
    from elasticsite.context.auth import BrokerError, load_admin_token
    from elasticsite.context.tls import ensure_certificate, fingerprint
    from elasticsite.server import build_server, create_app, raise_open_files_limit

    try:  # before anything is created
        limits = ConnectionLimits(
            header_timeout=header_timeout,
            body_timeout=body_timeout,
            keep_alive=keep_alive,
            max_connections=max_connections,
            max_connections_per_address=max_connections_per_address,
        )
    except LimitError as exc:
        raise fail(f"--{exc.field.replace('_', '-')} {exc.problem}") from None
    try:
        admission = broker_limits(
            reserve or [], max_members, join_rate, join_burst, max_context_bytes
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    logs.setup(logging.DEBUG if verbose > 0 else logging.INFO, err, log_format=log_format)
    state_dir = _state_dir(state_dir, dashboard or advisor)
    if (cert is None) != (key is None):
        raise fail("give both --cert and --key, or neither for a self-signed certificate")
    if insecure_http and cert is not None:
        raise fail("--insecure-http serves plain HTTP; it cannot be used with --cert/--key")
    for path in (cert, key):
        if path is not None and not path.is_file():
            raise fail(f"no such file: {path}")
    try:
        private_dir(state_dir)
        token, token_source = load_admin_token(state_dir, admin_token_file)
    except (BrokerError, StateFileError, OSError) as exc:
        raise fail(str(exc)) from None
    if not insecure_http and cert is None:
        cert, key = ensure_certificate(state_dir, [host])
    scheme = "http" if insecure_http else "https"
    shown_host = f"[{host}]" if ":" in host else host
    served, advisor_token, advisor_token_file = _advisor(advisor)
    board = _dashboard(dashboard)
    urgent_service = None
    if urgent:
        from elasticsite.urgent.routes import UrgentService
        from elasticsite.urgent.store import UrgentStore

        try:
            urgent_service = UrgentService(UrgentStore(state_dir / "urgent.db"))
        except (StateFileError, OSError) as exc:
            raise fail(str(exc)) from None
    try:
        app = create_app(
            state_dir,
            admin_token=token,
            public_url=public_url,
            history=history,
            limits=admission,
            advisor=served,
            advisor_token=advisor_token,
            dashboard=board,
            urgent=urgent_service,
            docs=docs,
        )
    except (ValueError, OSError, sqlite3.Error, StateFileError) as exc:
        raise fail(f"cannot open the broker state in {state_dir}: {exc}") from None

    def announce() -> None:  # once the socket listens: the URLs printed can be used at once
        console.print(f"broker      {scheme}://{shown_host}:{port}", highlight=False)
        if cert is not None:
            say(f"certificate {cert}")
            say(f"sha256      {fingerprint(cert)}")
        else:
            unencrypted = " credentials cross the network unencrypted"
            console.print(Text.assemble(("plain HTTP:", "bold yellow"), unencrypted))
        say(f"admin token {token_source}")
        if advisor_token_file is not None:
            say(
                f"advisor     {scheme}://{shown_host}:{port}/advisor/advise, "
                f"token {advisor_token_file}"
            )
        if board is not None:
            console.print(f"dashboard   {scheme}://{shown_host}:{port}/dashboard", highlight=False)
        if urgent_service is not None:
            console.print(
                f"urgent      {scheme}://{shown_host}:{port}/urgent/portal", highlight=False
            )

    allowed = raise_open_files_limit(limits.max_connections)
    server = build_server(
        app,
        host=host,
        port=port,
        certfile=cert,
        keyfile=key,
        access_log=access_log,
        log_level="debug" if verbose > 1 else "info",
        connection_limits=dataclasses.replace(limits, max_connections=allowed),
    )
    server.on_started = announce
    # Thousands of long polls allocate in bursts; the loaded state and the imports
    # live for the whole run, so keep them out of the collector's scans.
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    with suppress(SystemExit):  # uvicorn exits when it cannot bind; said below in one line
        server.run()
    if not server.started:
        raise fail(f"the broker could not listen on {host}:{port} (see the log above)")
