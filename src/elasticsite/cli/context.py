"""``elasticsite context ...``: create, list, show and prune a broker's contexts.

Thin like the rest of the command line: parse, call one admin client method, render
with rich; every failure is one line on stderr and exit status 2.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from elasticsite.cli.common import PositiveFloat, PositiveInt, console, fail, say

if TYPE_CHECKING:
    from elasticsite.context.client import AdminClient

__all__ = ["CA_ENV", "TOKEN_ENV", "URL_ENV", "context_app"]

context_app = typer.Typer(
    help="Manage recontextualization contexts on a broker.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

URL_ENV = "ELASTICSITE_BROKER_URL"
TOKEN_ENV = "ELASTICSITE_BROKER_TOKEN"
CA_ENV = "ELASTICSITE_BROKER_CA"

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
            raise fail(f"cannot read the admin token file {token_file}: {exc.strerror}") from None
    elif os.environ.get(TOKEN_ENV):
        token = os.environ[TOKEN_ENV].strip()
    else:
        raise fail(
            f"no admin token: pass --token-file FILE (the broker writes admin.token in its "
            f"state directory) or set ${TOKEN_ENV}"
        )
    if ca is not None and not ca.is_file():
        raise fail(f"no certificate at {ca} (--ca)")
    try:
        with AdminClient(broker_url, token, ca=ca) as client:
            yield client
    except ContextError as exc:
        if exc.status is None:
            raise fail(exc.detail) from None
        raise fail(f"the broker answered {exc.status}: {exc.detail}") from None


_BROKER_OPTIONS = (
    inspect.Parameter("broker_url", inspect.Parameter.KEYWORD_ONLY, annotation=BrokerOpt,
                      default="https://127.0.0.1:8443"),
    inspect.Parameter("token_file", inspect.Parameter.KEYWORD_ONLY, annotation=TokenFileOpt,
                      default=None),
    inspect.Parameter("ca", inspect.Parameter.KEYWORD_ONLY, annotation=CaOpt, default=None),
)  # fmt: skip
"""The options of every command that acts on the broker's contexts, last in each."""

ContextId = Annotated[str, typer.Argument(help="Context id.")]


def _admin_command(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register ``fn(client, ...)`` as ``context NAME``: its own parameters, then
    :data:`_BROKER_OPTIONS`, with which ``client`` is opened (see :func:`_admin`)."""

    def register(fn: Callable[..., None]) -> Callable[..., None]:
        # the client is given, not parsed: its annotation need not resolve at run time
        params = inspect.signature(fn, eval_str=True, locals={"AdminClient": object}).parameters
        signature = inspect.Signature([*list(params.values())[1:], *_BROKER_OPTIONS])

        @functools.wraps(fn)
        def command(
            *, broker_url: str, token_file: Path | None, ca: Path | None, **args: Any
        ) -> None:
            with _admin(broker_url, token_file, ca) as client:
                fn(client, **args)

        command.__signature__ = signature  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        context_app.command(name)(command)
        return command

    return register


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
        typer.Option(
            help="A node rejoining with the same SSH host key replaces its old record, once "
            "it signs the broker's challenge with that key."
        ),
    ] = False,
    allow_loopback: Annotated[
        bool,
        typer.Option(help="Nodes may publish loopback addresses (all on the broker's machine)."),
    ] = False,
    allow_link_local: Annotated[
        bool, typer.Option(help="Nodes may publish link-local addresses.")
    ] = False,
    bind_address: Annotated[
        bool,
        typer.Option(help="A node's address must be the one it connects from (no NAT)."),
    ] = False,
    max_members: Annotated[
        PositiveInt | None, typer.Option(help="Members at most (default: the broker's).")
    ] = None,
    join_rate: Annotated[
        PositiveFloat | None, typer.Option(help="Joins per second (default: the broker's).")
    ] = None,
    join_burst: Annotated[
        PositiveInt | None,
        typer.Option(help="Joins at once above the rate (default: the broker's)."),
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
            allow_loopback=allow_loopback,
            allow_link_local=allow_link_local,
            bind_address=bind_address,
            max_members=max_members,
            join_rate=join_rate,
            join_burst=join_burst,
        )
    except ValidationError as exc:
        raise fail(describe_errors(exc.errors())) from None
    with _admin(broker_url, token_file, ca) as client:
        created = client.create(name, policy)
    if as_json:
        console.print_json(created.model_dump_json())
        return
    console.print(f"context {created.id} created", highlight=False)
    for label, value in (("uri", created.uri), ("key", created.key), ("secret", created.secret)):
        say(f"  {label:<7}{value}")
    console.print(
        "Give workers context_uri, context_key and context_secret in their user data; "
        "the key and secret are not shown again.",
        highlight=False,
    )


@_admin_command("list")
def list_contexts(client: AdminClient) -> None:
    """List the broker's contexts."""
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


@_admin_command("show")
def show(client: AdminClient, context_id: ContextId) -> None:
    """Show one context."""
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
        ("rejoin", "replaces (host key proven)" if c.replace_on_rejoin else "refused while held"),
        ("local addr", _local(c.allow_loopback, c.allow_link_local)),
        ("address", "the one it connects from" if c.bind_address else "any"),
        ("max members", c.max_members or "broker default"),
        ("join rate", f"{c.join_rate:g}/s" if c.join_rate else "broker default"),
    ):
        say(f"{label:<12}{value}")


def _local(loopback: bool, link_local: bool) -> str:
    allowed = [n for n, on in (("loopback", loopback), ("link-local", link_local)) if on]
    return " and ".join(allowed) + " taken" if allowed else "refused"


@_admin_command("members")
def members(client: AdminClient, context_id: ContextId) -> None:
    """List a context's current members in join order."""
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
        t.add_row(  # the data field is free text from a node: shown as written
            n.node_id, n.short_hostname, n.hostname, n.address, key_type, _when(n.joined_at),
            data,
        )  # fmt: skip
    console.print(t)


@_admin_command("remove-node")
def remove_node(
    client: AdminClient,
    context_id: ContextId,
    node: Annotated[str, typer.Argument(help="Node id, or short hostname with --host.")],
    by_host: Annotated[
        bool, typer.Option("--host", help="NODE is a short hostname, not a node id.")
    ] = False,
) -> None:
    """Record that a node left the context (every member is told)."""
    if by_host:
        entry = client.remove_host(context_id, node)
    else:
        entry = client.remove_node(context_id, node)
    console.print(f"{node} removed from {context_id} (entry {entry})", highlight=False)


@_admin_command("delete")
def delete(client: AdminClient, context_id: ContextId) -> None:
    """Delete a context with its nodes and history; its credentials stop working."""
    client.delete(context_id)
    console.print(f"context {context_id} deleted", highlight=False)
