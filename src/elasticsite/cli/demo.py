"""``elasticsite demo``: a live elastic site on this machine, shown as it runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.live import Live
from rich.table import Table
from rich.text import Text

from elasticsite.cli.common import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    console,
    fail,
    finite,
    print_metrics,
    setup_logging,
    state_errors,
)

if TYPE_CHECKING:
    from elasticsite.demo import DemoProgress

__all__ = ["demo"]


@state_errors()
def demo(
    policy: Annotated[str, typer.Option(help="Provisioning policy.")] = "bursts",
    workload: Annotated[str, typer.Option(help="Built-in workload (paper 000).")] = "workload1",
    speed: Annotated[
        float, typer.Option(min=0.1, callback=finite, help="Time compression factor.")
    ] = 4.0,
    max_instances: Annotated[PositiveInt, typer.Option()] = 10,
    boot_time: Annotated[NonNegativeFloat, typer.Option(help="Worker boot delay, s.")] = 60.0,
    image_transfer: Annotated[
        NonNegativeFloat,
        typer.Option(help="Contention: s of a boot that move its image over a link boots share."),
    ] = 0.0,
    parallel_boots: Annotated[
        NonNegativeInt, typer.Option(help="Contention: workers booting at once, the rest wait.")
    ] = 0,
    boot_slowdown: Annotated[NonNegativeFloat | None, typer.Option(hidden=True)] = None,
    shutdown_time: Annotated[NonNegativeFloat, typer.Option(help="Worker shutdown, s.")] = 6.0,
    dedicated_workers: Annotated[PositiveInt, typer.Option()] = 10,
    seed: Annotated[NonNegativeInt, typer.Option()] = 0,
    out: Annotated[Path, typer.Option(help="Where the plot and CSVs go.")] = Path("demo-out"),
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True)] = 0,
) -> None:
    """Run a live elastic site here: jobs arrive, workers boot, join, run them, drain and go."""
    from elasticsite import policies
    from elasticsite.config import ConfigError
    from elasticsite.demo import DemoOptions, run_demo
    from elasticsite.workloads import get_workload, workload_names

    setup_logging(verbose)
    if boot_slowdown is not None:
        raise fail(
            "--boot-slowdown is gone: boots now share a finite boot path; use "
            "--image-transfer SECONDS and --parallel-boots N (docs/boot-model.md)"
        )
    if policy not in policies.available():
        raise fail(f"unknown policy {policy!r}; choose one of {', '.join(policies.available())}")
    if workload not in workload_names():
        raise fail(f"unknown workload {workload!r}; choose one of {', '.join(workload_names())}")
    n = len(get_workload(workload, seed))
    opts = DemoOptions(
        policy=policy,
        workload=workload,
        speed=speed,
        max_instances=max_instances,
        boot_time=boot_time,
        image_transfer=image_transfer,
        parallel_boots=parallel_boots,
        shutdown_time=shutdown_time,
        dedicated_workers=dedicated_workers,
        seed=seed,
        out_dir=out,
    )
    from elasticsite.boottime import BootPath

    path = BootPath(image_transfer, parallel_boots).describe()
    console.print(
        Text.assemble(
            ("elasticsite demo", "bold"), f": {workload} ({n} jobs) with the ", (policy, "bold"),
            f" policy, {speed:g}x speed, up to {max_instances} workers booting in "
            f"~{boot_time:g} s alone ({path})",
        )
    )  # fmt: skip
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"{out}: cannot write ({(exc.strerror or str(exc)).lower()})") from None
    try:
        with Live(console=console, refresh_per_second=4, transient=False) as live:
            result = run_demo(opts, on_progress=lambda p: live.update(_progress(p)))
    except ConfigError as exc:  # a setting out of bounds, e.g. --boot-time inf
        raise fail(f"demo: {exc}") from None
    console.print()
    print_metrics(result.metrics)
    console.print(f"plot: {result.plot}")
    console.print(f"jobs: {result.jobs_csv}   workers: {result.workers_csv}")
    console.print(f"ran in {result.wall_seconds:.0f} s of wall-clock time")
    if result.metrics.jobs_not_done:
        raise fail(f"{result.metrics.jobs_not_done} jobs did not finish")


def _progress(p: DemoProgress) -> Table:
    """Two lines under the header: the jobs, then the workers by phase."""
    t = Table.grid(padding=(0, 1))
    w = p.workers
    booting = w.get("requested", 0) + w.get("booting", 0)
    leaving = w.get("draining", 0) + w.get("terminating", 0)
    t.add_row(
        Text(f"t={p.elapsed:5.0f} s", style="bold"),
        f"jobs: {p.submitted}/{p.total} submitted, {p.queued} queued, "
        f"{p.running} running, {p.done} done",
    )
    t.add_row(
        "",
        f"workers: {booting} booting, {w.get('idle', 0)} idle, {w.get('busy', 0)} busy, "
        f"{leaving} leaving",
    )
    return t
