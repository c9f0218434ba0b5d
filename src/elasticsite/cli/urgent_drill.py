"""``elasticsite urgent drill``: warm standby, one drill per policy, into the advisor's history."""

from __future__ import annotations

import time
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
)

__all__ = ["drill"]


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
        float, typer.Option(min=1, callback=finite, help="Give a drill up after this.")
    ] = 1800,
) -> None:
    """Submit a small urgent job per policy, follow it, and record its allocation and
    execution delays for the deadline advisor (source "drill").

    A preemption drill preempts running jobs like a real urgent job (volunteers first).
    """
    import shlex

    from elasticsite.advisor.history import HistoryStore, store_path
    from elasticsite.urgent.batch_policies import BATCH_POLICIES
    from elasticsite.urgent.drill import drill as run_drill

    site = open_configured_site(config)
    cfg = site.config.urgent
    chosen = policy or (sorted(set(cfg.policies.values())) if cfg else list(BATCH_POLICIES))
    for p in chosen:
        if p not in BATCH_POLICIES:
            raise fail(f"--policy {p!r}: a drill tests {', '.join(BATCH_POLICIES)}")
    where = resource or (cfg.resource if cfg and cfg.resource else site.config.manager.site_id)
    argv = shlex.split(command)
    if not argv:
        raise fail("--command is empty")
    history = HistoryStore(store_path(site.config.state_dir()))
    done_rounds = 0
    try:
        while True:
            for p in chosen:
                err.print(f"drill: {p} on {where} ...", highlight=False)
                result = run_drill(site.batch, where, p, argv, cores=cores, timeout=timeout)
                if result.error:
                    err.print(f"drill {result.job_id} ({p}): {result.error}", highlight=False)
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
