"""``elasticsite urgent key add|list|remove``: the principals of the urgent services.

The keys live with the server's state (``urgent.db`` in its ``--state-dir``, 0600); a
key is printed once, when made, and only its digest is kept. Serve the services with
``elasticsite broker --urgent``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from elasticsite.cli.common import console, fail

if TYPE_CHECKING:
    from elasticsite.urgent.principals import Principals

__all__ = ["urgent_app"]

urgent_app = typer.Typer(
    help="Urgent computing: the principals (API keys) of the urgent services.",
    no_args_is_help=True,
)
key_app = typer.Typer(help="API keys of administrators, users and resources.", no_args_is_help=True)
urgent_app.add_typer(key_app, name="key")

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
    console.print(f"{principal.role} {principal.name}: {', '.join(sorted(principal.resources))}",
                  highlight=False, soft_wrap=True)  # fmt: skip
    console.print(f"key (shown once, keep it secret): {key}", highlight=False, soft_wrap=True)


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
