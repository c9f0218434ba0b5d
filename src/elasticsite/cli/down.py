"""``elasticsite down -c FILE``: drain and terminate every worker the site owns, and wait.

It runs the site's manager in shutdown mode: workers still booting are terminated,
joined ones drained (their running jobs finish) and then terminated, on every cloud,
until none is left. ``--now`` terminates them at once instead; the batch system
requeues what they were running. Instances the clouds show with the site's tag but no
record are terminated too. Exit status 0 when none is left, 1 when some are after
``--timeout``, 2 for an error (another manager running on the site, a bad config).
"""

from __future__ import annotations

import logging
import signal
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from elasticsite.cli.common import (
    ConfigOpt,
    LogFormatOpt,
    announce,
    fail,
    finite,
    open_site_manager,
    state_errors,
)
from elasticsite.cli.site import left_running

if TYPE_CHECKING:
    from elasticsite.manager.report import StepReport

__all__ = ["down"]


@state_errors()
def down(
    config: ConfigOpt = None,
    timeout: Annotated[
        float, typer.Option(min=1, callback=finite, help="Give up after this many seconds.")
    ] = 3600.0,
    now: Annotated[
        bool,
        typer.Option("--now", help="Terminate at once; running jobs go back to the queue."),
    ] = False,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True)] = 0,
    log_format: LogFormatOpt = "human",
) -> None:
    """Drain and terminate every worker of the site, on every cloud, and wait for it."""
    from elasticsite.manager.lock import SiteBusy, manager_lock

    site, manager = open_site_manager(config, verbose, log_format)
    started = time.monotonic()
    shown = ""

    def progress(report: StepReport) -> None:
        nonlocal shown
        line = ", ".join(f"{n} {state}" for state, n in sorted(report.workers.items()))
        if line and line != shown:  # none left: the final line says so, once
            shown = line
            announce(f"down: {line} ({time.monotonic() - started:.0f} s)")

    def stop(_signum: int, _frame: Any) -> None:
        manager.stop()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        with manager_lock(site.state_dir, "down"):
            announce(
                f"down: site {site.config.manager.site_id!r}: "
                f"{'terminating' if now else 'draining and terminating'} every worker"
            )
            manager.take_down(timeout, immediate=now, on_step=progress)
    except SiteBusy as exc:
        raise fail(str(exc)) from None
    left = left_running(manager.records.values())
    if left:
        announce(
            f"down: {left} still up after {time.monotonic() - started:.0f} s; run "
            "`elasticsite down` again, or with --now to stop waiting for their jobs",
            logging.WARNING,
        )
        raise typer.Exit(1)
    announce(f"down: no worker left ({time.monotonic() - started:.0f} s)")
