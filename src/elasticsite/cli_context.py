"""``elasticsite broker`` and ``elasticsite context ...``: run a broker, manage contexts.

Thin like the rest of the command line: parse, call one client or server function,
render with rich; every failure is one line on stderr and exit status 2.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gc
import logging
import os
import socket
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from elasticsite import logs
from elasticsite.context.admission import BrokerLimits
from elasticsite.files import StateFileError, private_dir

if TYPE_CHECKING:
    from elasticsite.context.client import AdminClient

__all__ = ["broker", "context_app"]

# No emoji codes: fingerprints and keys hold sequences such as ":CD:".
console = Console(emoji=False)
err = Console(stderr=True, emoji=False)

context_app = typer.Typer(
    help="Manage recontextualization contexts on a broker.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

URL_ENV = "ELASTICSITE_BROKER_URL"
TOKEN_ENV = "ELASTICSITE_BROKER_TOKEN"
CA_ENV = "ELASTICSITE_BROKER_CA"


_LIMITS = BrokerLimits()


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


def _fail(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


BrokerOpt = Annotated[
    str,
    typer.Option(
        "--broker", envvar=URL_ENV, help=f"Broker URL (or ${URL_ENV}).", show_default=True
    ),
]
TokenFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        help=f"File holding the admin token (else ${TOKEN_ENV} holds the token itself).",
        show_default=False,
    ),
]
CaOpt = Annotated[
    Path | None,
    typer.Option(
        "--ca",
        envvar=CA_ENV,
        help=f"PEM certificate the broker's is checked against (or ${CA_ENV}; "
        "default: the system's trust store).",
        show_default=False,
    ),
]


@contextmanager
def _admin(broker_url: str, token_file: Path | None, ca: Path | None) -> Iterator[AdminClient]:
    """An AdminClient; every ContextError inside becomes one error line and exit 2."""
    from elasticsite.context.client import AdminClient, ContextError

    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise _fail(f"cannot read the admin token file {token_file}: {exc.strerror}") from None
    elif os.environ.get(TOKEN_ENV):
        token = os.environ[TOKEN_ENV].strip()
    else:
        raise _fail(
            f"no admin token: pass --token-file FILE (the broker writes admin.token in its "
            f"state directory) or set ${TOKEN_ENV}"
        )
    if ca is not None and not ca.is_file():
        raise _fail(f"no certificate at {ca} (--ca)")
    try:
        with AdminClient(broker_url, token, ca=ca) as client:
            yield client
    except ContextError as exc:
        if exc.status is None:
            raise _fail(exc.detail) from None
        raise _fail(f"the broker answered {exc.status}: {exc.detail}") from None


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@context_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="A name to recognise the context by.")] = "",
    broker_url: BrokerOpt = "https://127.0.0.1:8443",
    token_file: TokenFileOpt = None,
    ca: CaOpt = None,
    domain: Annotated[
        str | None,
        typer.Option(help="Host names must lie in this domain.", show_default=False),
    ] = None,
    host_pattern: Annotated[
        str | None,
        typer.Option(help="Shell pattern host names must match, e.g. 'w-*.example.org'."),
    ] = None,
    reserve: Annotated[
        list[str] | None,
        typer.Option(
            help="A host name or address no node may take (repeatable).", show_default=False
        ),
    ] = None,
    replace_on_rejoin: Annotated[
        bool,
        typer.Option(help="A node rejoining with the same SSH host key replaces its old record."),
    ] = False,
    bind_address: Annotated[
        bool,
        typer.Option(help="A node's address must be the one it connects from (no NAT)."),
    ] = False,
    max_members: Annotated[
        int | None, typer.Option(help="Members at most (default: the broker's).")
    ] = None,
    join_rate: Annotated[
        float | None, typer.Option(help="Joins per second (default: the broker's).")
    ] = None,
    join_burst: Annotated[
        int | None, typer.Option(help="Joins at once above the rate (default: the broker's).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")] = False,
) -> None:
    """Create a context; prints its URI, key and secret (shown only this once).

    Nodes joining it can never take one another's names or addresses, nor reserved
    ones; the options narrow which names they may take and how many may join."""
    from pydantic import ValidationError

    from elasticsite.context.models import ContextPolicy
    from elasticsite.context.validation import describe_errors

    try:
        policy = ContextPolicy(
            domain=domain,
            host_pattern=host_pattern,
            reserved=reserve or [],
            replace_on_rejoin=replace_on_rejoin,
            bind_address=bind_address,
            max_members=max_members,
            join_rate=join_rate,
            join_burst=join_burst,
        )
    except ValidationError as exc:
        raise _fail(describe_errors(exc.errors())) from None
    with _admin(broker_url, token_file, ca) as client:
        created = client.create(name, policy)
    if as_json:
        console.print_json(created.model_dump_json())
        return
    console.print(f"context {created.id} created", highlight=False)
    for label, value in (("uri", created.uri), ("key", created.key), ("secret", created.secret)):
        console.print(f"  {label:<7}{value}", highlight=False, soft_wrap=True)
    console.print(
        "Give workers context_uri, context_key and context_secret in their user data; "
        "the key and secret are not shown again.",
        highlight=False,
    )


@context_app.command("list")
def list_contexts(
    broker_url: BrokerOpt = "https://127.0.0.1:8443",
    token_file: TokenFileOpt = None,
    ca: CaOpt = None,
) -> None:
    """List the broker's contexts."""
    with _admin(broker_url, token_file, ca) as client:
        contexts = client.list()
    if not contexts:
        console.print("no contexts")
        return
    t = Table(header_style="bold")
    t.add_column("id", no_wrap=True, min_width=16)  # ids are copied: never cut them
    t.add_column("name")
    t.add_column("members", justify="right")
    t.add_column("last entry", justify="right")
    t.add_column("created")
    t.add_column("uri", overflow="fold")
    for c in contexts:
        t.add_row(c.id, c.name, str(c.members), str(c.last_id), _when(c.created_at), c.uri)
    console.print(t)


@context_app.command("show")
def show(
    context_id: Annotated[str, typer.Argument(help="Context id.")],
    broker_url: BrokerOpt = "https://127.0.0.1:8443",
    token_file: TokenFileOpt = None,
    ca: CaOpt = None,
) -> None:
    """Show one context."""
    with _admin(broker_url, token_file, ca) as client:
        c = client.show(context_id)
    for label, value in (
        ("id", c.id),
        ("name", c.name),
        ("uri", c.uri),
        ("created", _when(c.created_at)),
        ("members", c.members),
        ("last entry", c.last_id),
        ("domain", c.domain or "any"),
        ("pattern", c.host_pattern or "any"),
        ("reserved", ", ".join(["localhost", *c.reserved])),
        ("rejoin", "replaces (same host key)" if c.replace_on_rejoin else "refused while held"),
        ("address", "the one it connects from" if c.bind_address else "any"),
        ("max members", c.max_members or "broker default"),
        ("join rate", f"{c.join_rate:g}/s" if c.join_rate else "broker default"),
    ):
        console.print(f"{label:<12}{value}", highlight=False, soft_wrap=True)


@context_app.command("members")
def members(
    context_id: Annotated[str, typer.Argument(help="Context id.")],
    broker_url: BrokerOpt = "https://127.0.0.1:8443",
    token_file: TokenFileOpt = None,
    ca: CaOpt = None,
) -> None:
    """List a context's current members in join order."""
    with _admin(broker_url, token_file, ca) as client:
        m = client.members(context_id)
    if not m.members:
        console.print(f"no members (last entry {m.last_id})", highlight=False)
        return
    t = Table(header_style="bold", title=f"{len(m.members)} members, last entry {m.last_id}")
    t.add_column("node id", no_wrap=True, min_width=16)
    for col in ("short", "hostname", "address", "ssh key", "joined", "data"):
        t.add_column(col, overflow="fold")
    for n in m.members:
        key_type = n.ssh_host_key.split(" ", 1)[0]
        data = n.data if len(n.data) <= 40 else n.data[:37] + "..."
        t.add_row(  # the data field is free text from a node: never markup
            n.node_id, n.short_hostname, n.hostname, n.address, key_type, _when(n.joined_at),
            escape(data),
        )  # fmt: skip
    console.print(t)


@context_app.command("remove-node")
def remove_node(
    context_id: Annotated[str, typer.Argument(help="Context id.")],
    node: Annotated[str, typer.Argument(help="Node id, or short hostname with --host.")],
    by_host: Annotated[
        bool, typer.Option("--host", help="NODE is a short hostname, not a node id.")
    ] = False,
    broker_url: BrokerOpt = "https://127.0.0.1:8443",
    token_file: TokenFileOpt = None,
    ca: CaOpt = None,
) -> None:
    """Record that a node left the context (every member is told)."""
    with _admin(broker_url, token_file, ca) as client:
        if by_host:
            entry = client.remove_host(context_id, node)
        else:
            entry = client.remove_node(context_id, node)
    console.print(f"{node} removed from {context_id} (entry {entry})", highlight=False)


@context_app.command("delete")
def delete(
    context_id: Annotated[str, typer.Argument(help="Context id.")],
    broker_url: BrokerOpt = "https://127.0.0.1:8443",
    token_file: TokenFileOpt = None,
    ca: CaOpt = None,
) -> None:
    """Delete a context with its nodes and history; its credentials stop working."""
    with _admin(broker_url, token_file, ca) as client:
        client.delete(context_id)
    console.print(f"context {context_id} deleted", highlight=False)


def broker(
    state_dir: Annotated[
        Path, typer.Option("--state-dir", help="Where the broker keeps its database and keys.")
    ],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8443,
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
        int, typer.Option(min=1, help="Entries kept per context; older callers get a snapshot.")
    ] = 10_000,
    header_timeout: Annotated[
        float,
        typer.Option(
            "--header-timeout",
            help="Seconds a client has to send a request's headers: from connecting (TLS "
            "handshake included), then from the first byte of each later request.",
        ),
    ] = 10.0,
    keep_alive: Annotated[
        int,
        typer.Option(
            "--keep-alive",
            help="Seconds an idle connection is kept between requests (longer than agents' "
            "pauses between polls).",
        ),
    ] = 75,
    max_connections: Annotated[
        int,
        typer.Option(
            "--max-connections",
            help="Open connections at most, handshakes included; the open-files limit is "
            "raised to fit.",
        ),
    ] = 16_384,
    max_connections_per_address: Annotated[
        int,
        typer.Option(
            "--max-connections-per-address",
            help="Open connections at most from one client address; 0: no limit (agents "
            "behind one NAT address).",
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
        int, typer.Option(min=1, help="Members per context, unless the context sets its own.")
    ] = _LIMITS.max_members,
    join_rate: Annotated[
        float,
        typer.Option(min=0.001, help="Joins a second per context, unless it sets its own."),
    ] = _LIMITS.join_rate,
    join_burst: Annotated[
        int, typer.Option(min=1, help="Joins at once above the rate, unless the context sets it.")
    ] = _LIMITS.join_burst,
    max_context_bytes: Annotated[
        int,
        typer.Option(min=1024, help="Bytes of member records one context may hold."),
    ] = _LIMITS.max_member_bytes,
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = False,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True)] = 0,
) -> None:
    """Run the recontextualization broker (HTTPS; a self-signed certificate by default)."""
    from elasticsite.connlimits import ConnectionLimits, LimitError
    from elasticsite.context.auth import BrokerError, load_admin_token
    from elasticsite.context.tls import ensure_certificate, fingerprint
    from elasticsite.server import build_server, create_app, raise_open_files_limit

    try:  # before anything is created
        limits = ConnectionLimits(
            header_timeout=header_timeout,
            keep_alive=keep_alive,
            max_connections=max_connections,
            max_connections_per_address=max_connections_per_address,
        )
    except LimitError as exc:
        raise _fail(f"--{exc.field.replace('_', '-')} {exc.problem}") from None
    try:
        admission = broker_limits(
            reserve or [], max_members, join_rate, join_burst, max_context_bytes
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None
    logs.setup(logging.DEBUG if verbose > 0 else logging.INFO, err)
    if (cert is None) != (key is None):
        raise _fail("give both --cert and --key, or neither for a self-signed certificate")
    if insecure_http and cert is not None:
        raise _fail("--insecure-http serves plain HTTP; it cannot be used with --cert/--key")
    for path in (cert, key):
        if path is not None and not path.is_file():
            raise _fail(f"no such file: {path}")
    try:
        private_dir(state_dir)
        token, token_source = load_admin_token(state_dir, admin_token_file)
    except (BrokerError, StateFileError, OSError) as exc:
        raise _fail(str(exc)) from None
    if not insecure_http and cert is None:
        cert, key = ensure_certificate(state_dir, [host])
    scheme = "http" if insecure_http else "https"
    shown_host = f"[{host}]" if ":" in host else host
    try:
        app = create_app(
            state_dir,
            admin_token=token,
            public_url=public_url,
            history=history,
            limits=admission,
        )
    except (ValueError, OSError, sqlite3.Error, StateFileError) as exc:
        raise _fail(f"cannot open the broker state in {state_dir}: {exc}") from None
    console.print(f"broker      {scheme}://{shown_host}:{port}", highlight=False)
    if cert is not None:
        console.print(f"certificate {cert}", highlight=False, soft_wrap=True)
        console.print(f"sha256      {fingerprint(cert)}", highlight=False, soft_wrap=True)
    else:
        console.print("[bold yellow]plain HTTP:[/] credentials cross the network unencrypted")
    console.print(f"admin token {token_source}", highlight=False, soft_wrap=True)
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
    # Thousands of long polls allocate in bursts; the loaded state and the imports
    # live for the whole run, so keep them out of the collector's scans.
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    with suppress(SystemExit):  # uvicorn exits when it cannot bind; said below in one line
        server.run()
    if not server.started:
        raise _fail(f"the broker could not listen on {host}:{port} (see the log above)")
