"""``elasticsite cloud reset NAME``: open a cloud the manager closed.

A cloud is closed after it refused a launch for bad credentials or a missing image
(until reset), or after its workers failed to boot or join too many times in a row
(protected: until its cool-down passes, or a reset). ``status`` shows which and why,
and each cloud's last error (:func:`last_errors`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated

import typer

from elasticsite.cli.common import ConfigOpt, console, fail, open_configured_site, state_errors

__all__ = ["cloud_app", "last_errors"]

cloud_app = typer.Typer(help="Operate on the site's clouds.", no_args_is_help=True)


@cloud_app.command("reset")
@state_errors()
def reset(
    name: Annotated[str, typer.Argument(help="The cloud's name in the configuration.")],
    config: ConfigOpt = None,
) -> None:
    """Allow launches on a closed cloud again (the manager applies it at its next step)."""
    site = open_configured_site(config, create=False)
    known = [c.name for c in site.config.clouds]
    if name not in known:
        raise fail(f"no cloud named {name!r} in the configuration (clouds: {', '.join(known)})")
    records = {
        key: record
        for key, record in site.store.cloud_health().items()
        if key == name or key.startswith(name + "/")  # the cloud, and its VM types
    }
    site.store.request_cloud_reset(name)
    if not records:
        console.print(f"cloud {name} was not closed; reset recorded anyway", highlight=False)
    for key, record in sorted(records.items()):
        console.print(
            f"cloud {key}: reset requested (was {record.get('kind') or 'failing'}: "
            f"{record.get('reason') or '-'}); the manager opens it at its next step",
            highlight=False,
        )


def last_errors(errors: Mapping[str, Mapping[str, object]], now: float | None = None) -> list[str]:
    """One line per cloud: its last error, how long ago, why (``throttled``, ...), the API
    call that failed and what the manager was doing (launch, terminate, describe)."""
    now = time.time() if now is None else now
    lines = []
    for name, error in sorted(errors.items()):
        at = error.get("at")
        ago = f" {max(0.0, now - at):.0f}s ago" if isinstance(at, int | float) else ""
        kind = str(error.get("kind") or "unknown").replace("_", " ")
        where = ", ".join(str(x) for x in (error.get("call"), error.get("what")) if x)
        message = str(error.get("error") or "").removeprefix(f"cloud {name}: ")
        lines.append(f"cloud {name}: last error{ago}: {kind} ({where}): {message}")
    return lines
