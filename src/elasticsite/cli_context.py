"""``elasticsite broker`` and ``elasticsite context ...``: run a broker, manage contexts.

Thin like the rest of the command line: parse, call one client or server function,
render with rich; every failure is one line on stderr and exit status 2.
"""

from __future__ import annotations

import datetime as dt
import gc
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.table import Table

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
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")] = False,
) -> None:
    """Create a context; prints its URI, key and secret (shown only this once)."""
    with _admin(broker_url, token_file, ca) as client:
        created = client.create(name)
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
    ):
        console.print(f"{label:<11}{value}", highlight=False, soft_wrap=True)


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
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = False,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True)] = 0,
) -> None:
    """Run the recontextualization broker (HTTPS; a self-signed certificate by default)."""
    from elasticsite.context.broker import BrokerError, load_admin_token
    from elasticsite.context.tls import ensure_certificate, fingerprint
    from elasticsite.server import build_server, create_app, raise_open_files_limit

    logging.basicConfig(
        level=logging.DEBUG if verbose > 0 else logging.INFO,
        format="%(message)s",
        datefmt="[%X]",
        handlers=[RichHandler(console=err, show_path=False)],
    )
    if (cert is None) != (key is None):
        raise _fail("give both --cert and --key, or neither for a self-signed certificate")
    if insecure_http and cert is not None:
        raise _fail("--insecure-http serves plain HTTP; it cannot be used with --cert/--key")
    for path in (cert, key):
        if path is not None and not path.is_file():
            raise _fail(f"no such file: {path}")
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        token, token_source = load_admin_token(state_dir, admin_token_file)
    except (BrokerError, OSError) as exc:
        raise _fail(str(exc)) from None
    if not insecure_http and cert is None:
        cert, key = ensure_certificate(state_dir, [host])
    scheme = "http" if insecure_http else "https"
    shown_host = f"[{host}]" if ":" in host else host
    try:
        app = create_app(state_dir, admin_token=token, public_url=public_url, history=history)
    except (ValueError, OSError) as exc:
        raise _fail(f"cannot open the broker state in {state_dir}: {exc}") from None
    console.print(f"broker      {scheme}://{shown_host}:{port}", highlight=False)
    if cert is not None:
        console.print(f"certificate {cert}", highlight=False, soft_wrap=True)
        console.print(f"sha256      {fingerprint(cert)}", highlight=False, soft_wrap=True)
    else:
        console.print("[bold yellow]plain HTTP:[/] credentials cross the network unencrypted")
    console.print(f"admin token {token_source}", highlight=False, soft_wrap=True)
    files = raise_open_files_limit()
    logging.getLogger(__name__).debug("open files limit %d", files)
    server = build_server(
        app,
        host=host,
        port=port,
        certfile=cert,
        keyfile=key,
        access_log=access_log,
        log_level="debug" if verbose > 1 else "info",
    )
    # Thousands of long polls allocate in bursts; the loaded state and the imports
    # live for the whole run, so keep them out of the collector's scans.
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    with suppress(SystemExit):  # uvicorn exits when it cannot bind; said below in one line
        server.run()
    if not server.started:
        raise _fail(f"the broker could not listen on {host}:{port} (see the log above)")
