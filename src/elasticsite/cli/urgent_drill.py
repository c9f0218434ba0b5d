"""``elasticsite urgent drill``: warm standby, one drill per policy, into the advisor's history.

Like ``urgent submit`` and ``urgent gate``, it runs on a site whose configuration has
an ``[urgent]`` section only. Each drill says, before it waits, which job it is and how
long it waits for it to start; one that does not start by then is cancelled and said
so, and the command ends with status 1 when any drill failed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated

import typer

from elasticsite.cli.common import (
    ConfigOpt,
    NonNegativeInt,
    PositiveInt,
    console,
    err,
    fail,
    finite,
    open_configured_site,
    tell,
    urgent_section,
)

__all__ = ["drill"]


def _said(before: str, after: str) -> Callable[[str], None]:
    """Say ``before``, the drill's job id and ``after``, once the job is queued."""
    return lambda job_id: tell(before + job_id + after)


def drill(
    config: ConfigOpt = None,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            "-p",
            help="priority, next_to_run or preemption; repeat. "
            "Default: every policy [urgent] policies maps an urgency to.",
        ),
    ] = None,
    resource: Annotated[
        str | None, typer.Option(help="Its name in the history. Default: [urgent] resource.")
    ] = None,
    command: Annotated[str, typer.Option(help="What the drill runs (split like a shell).")] = (
        "true"
    ),
    cores: Annotated[PositiveInt, typer.Option()] = 1,
    every: Annotated[
        float, typer.Option(min=1, callback=finite, help="Seconds between rounds.")
    ] = 3600,
    rounds: Annotated[NonNegativeInt, typer.Option(help="0: until stopped.")] = 1,
    timeout: Annotated[
        float,
        typer.Option(min=1, callback=finite, help="Give a drill up if not done after this, s."),
    ] = 1800,
    start_timeout: Annotated[
        float,
        typer.Option(
            "--start-timeout",
            min=1,
            callback=finite,
            help="Give a drill up, and cancel its job, if the job has not started after "
            "this, s (at most --timeout).",
        ),
    ] = 600,
) -> None:
    """Submit a small urgent job per policy, follow it, and record its allocation and
    execution delays for the deadline advisor (source "drill").

    A preemption drill preempts running jobs like a real urgent job (volunteers first).
    """
    import shlex

    from elasticsite.batch.urgency import BATCH_POLICIES
    from elasticsite.history.observations import HistoryStore, store_path
    from elasticsite.urgent.drill import drill as run_drill

    for p in policy or ():
        if p not in BATCH_POLICIES:
            raise fail(f"--policy {p!r}: a drill tests {', '.join(BATCH_POLICIES)}")
    argv = shlex.split(command)
    if not argv:
        raise fail("--command is empty")
    cfg = urgent_section(config)
    site = open_configured_site(config)
    chosen = policy or sorted(set(cfg.policies.values()))
    where = resource or cfg.resource or site.config.manager.site_id
    wait = min(start_timeout, timeout)
    history = HistoryStore(store_path(site.config.state_dir()))
    done_rounds = failed = 0
    try:
        while True:
            for p in chosen:
                said = _said(
                    f"drill: {p} on {where}: job ",
                    f"; waiting up to {wait:g} s for it to start, {timeout:g} s in all",
                )
                result = run_drill(site.batch, where, p, argv, cores=cores, timeout=timeout,
                                   start_timeout=wait, on_submitted=said)  # fmt: skip
                if result.error:
                    tell(f"drill {result.job_id} ({p}): {result.error}")
                    failed += 1
                    continue
                history.add(result.observations(time.time()))
                console.print(
                    f"{where} {p}: job {result.job_id} allocated in {result.allocation:.1f} s, "
                    f"ran {result.execution:.1f} s"
                    + (f", preempted {result.preempted}" if result.preempted else ""),
                    highlight=False,
                )
            done_rounds += 1
            if rounds and done_rounds >= rounds:
                break
            time.sleep(every)
    except KeyboardInterrupt:
        err.print("drill stopped", highlight=False)
    finally:
        history.close()
    if failed:
        raise typer.Exit(1)
