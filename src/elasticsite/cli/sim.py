"""``elasticsite simulate|experiment``: workloads replayed on the virtual clock, one run
or a spec's resumable sweep, with their tables, CSVs and plots."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Literal

import typer
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
    tell,
)
from elasticsite.cli.status import ProgressOpt, StatusLine

__all__ = ["experiment", "simulate"]


def simulate(
    workload: Annotated[
        str, typer.Option(help="Built-in name, 'lublin', or an SWF trace file (.swf/.gz).")
    ] = "workload1",
    policy: Annotated[str, typer.Option(help="Provisioning policy.")] = "bursts",
    cloud_limit: Annotated[
        NonNegativeInt | None,
        typer.Option(
            help="Most VMs at once. Default 10; --site-procs with --strategy. Given, the "
            "cloud is yours: no boot contention unless --image-transfer or --parallel-boots.",
        ),
    ] = None,
    cloud: Annotated[
        str,
        typer.Option(
            help="Paper 000's cloud whose calibrated boot, contention and shutdown times "
            "are the defaults: uchicago, iu (both contended), ec2; or none (60 s)."
        ),
    ] = "uchicago",
    boot: Annotated[
        str | None,
        typer.Option(
            help="Boot time alone, s: 60, 74:205 or 60,62,90; 0 with --strategy. Given, the "
            "cloud is yours: no boot contention unless asked for."
        ),
    ] = None,
    image_transfer: Annotated[
        NonNegativeFloat | None,
        typer.Option(
            help="Contention: s one boot's image takes alone over a link all boots share."
        ),
    ] = None,
    parallel_boots: Annotated[
        NonNegativeInt | None,
        typer.Option(help="Contention: boots in progress at once, the rest wait (0: all)."),
    ] = None,
    boot_slowdown: Annotated[NonNegativeFloat | None, typer.Option(hidden=True)] = None,
    shutdown: Annotated[str | None, typer.Option(help="Shutdown time, s (same forms).")] = None,
    price: Annotated[NonNegativeFloat, typer.Option(help="Price per VM-hour.")] = 0.10,
    billing: Annotated[
        float, typer.Option(min=1, callback=finite, help="Billing increment, s.")
    ] = 3600,
    cores_per_vm: Annotated[PositiveInt, typer.Option()] = 1,
    interval: Annotated[
        float, typer.Option(min=0.001, callback=finite, help="Decision period, s.")
    ] = 10.0,
    scheduler: Annotated[str, typer.Option(help="fcfs or easy.")] = "easy",
    jobs: Annotated[PositiveInt, typer.Option(help="Jobs of a Lublin workload.")] = 10_000,
    machine_size: Annotated[PositiveInt, typer.Option(help="Lublin machine size.")] = 128,
    seed: Annotated[NonNegativeInt, typer.Option()] = 0,
    out: Annotated[Path, typer.Option(help="Where the plot and CSVs go.")] = Path("sim-out"),
    strategy: Annotated[
        str | None,
        typer.Option(
            help="Paper 002 mode: replay on a site of --site-procs plus the cloud under this "
            "strategy set (naive, shortest_queue, weighted_queue, selective, ...), against "
            "the site-only base."
        ),
    ] = None,
    site_procs: Annotated[
        PositiveInt, typer.Option(help="Site processors (= nodes = VMs) with --strategy.")
    ] = 144,
    progress: ProgressOpt = None,
) -> None:
    """Replay a workload through a provisioning policy on the virtual clock."""
    if boot_slowdown is not None:
        raise fail(
            "--boot-slowdown is gone: boots now share a finite boot path; use "
            "--image-transfer SECONDS and --parallel-boots N (docs/boot-model.md)"
        )
    if strategy is not None:
        _simulate_strategy(
            workload, strategy, site_procs, site_procs if cloud_limit is None else cloud_limit,
            boot or "0", price, billing, cores_per_vm, jobs, machine_size, seed, out, progress,
        )  # fmt: skip
        return
    from elasticsite import policies
    from elasticsite.metrics import timeline
    from elasticsite.report import write_jobs_csv, write_plot, write_workers_csv
    from elasticsite.sim.cloud import describe_cloud, sim_cloud
    from elasticsite.sim.elastic import SimulationExploded, SimulationStalled, simulate_elastic
    from elasticsite.sim.workload import load_workload

    if policy not in policies.available():
        raise fail(f"unknown policy {policy!r}; choose one of {', '.join(policies.available())}")
    try:
        work = load_workload(workload, seed=seed, jobs=jobs, machine_size=machine_size)
        model = sim_cloud(
            cloud,
            boot,
            shutdown,
            vm_limit=cloud_limit,
            image_transfer=image_transfer,
            parallel_boots=parallel_boots,
            price_per_hour=price,
            billing_increment=billing,
            cores_per_vm=cores_per_vm,
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    if len(work) == 0:
        raise fail(f"workload {workload!r} has no job")
    widest = int(work.procs.max())
    if widest > cores_per_vm:
        raise fail(
            f"a job of {workload!r} needs {widest} processors but a VM has {cores_per_vm}; "
            "jobs run on one VM here: raise --cores-per-vm"
        )
    console.print(
        Text.assemble(
            ("simulate", "bold"), f": {work.name} ({len(work):,} jobs) with the ",
            (policy, "bold"), f" policy, up to {model.vm_limit} VMs of {cores_per_vm} cores, "
            f"{describe_cloud(model)}",
        )
    )  # fmt: skip
    if work.note:
        console.print(work.note, highlight=False)
    with StatusLine(progress) as line:
        try:
            result = simulate_elastic(
                work.arrivals(),
                [model],
                policy,
                interval=interval,
                preboot=policies.preboot_workers(policy, policies.PolicySettings()),
                scheduler=scheduler,
                seed=seed,
                status=lambda s: line.update(s.line()),
            )
        except (ValueError, SimulationStalled, SimulationExploded) as exc:
            line.clear()
            raise fail(str(exc)) from None
    metrics = result.metrics()
    print_metrics(metrics)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{work.name}-{policy}".replace("/", "_")
    specs = [model.spec()]
    plot = write_plot(
        out / f"{tag}.png",
        timeline(result.jobs, result.workers),
        f"{policy} policy, {work.name} (simulated)",
    )
    write_jobs_csv(out / f"{tag}-jobs.csv", result.jobs)
    write_workers_csv(out / f"{tag}-workers.csv", result.workers, specs, jobs=result.jobs)
    console.print(f"plot: {plot}   CSVs: {out / tag}-jobs.csv, {out / tag}-workers.csv")
    console.print(f"{result.events:,} events, {result.decisions:,} decisions")


def _simulate_strategy(
    workload: str, strategy: str, site_procs: int, cloud_limit: int, boot: str, price: float,
    billing: float, cores_per_vm: int, jobs: int, machine_size: int, seed: int, out: Path,
    progress: bool | None,
) -> None:  # fmt: skip
    """``simulate --strategy``: the base run, then the strategy, then their figures."""
    from elasticsite.policies.strategies import get_strategy
    from elasticsite.sim.cloud import CloudModel, Durations
    from elasticsite.sim.experiment import write_replay_jobs_csv
    from elasticsite.sim.replay import replay
    from elasticsite.sim.workload import load_workload

    if cores_per_vm != 1:
        raise fail("--strategy runs one single-core VM per processor: leave --cores-per-vm 1")
    try:
        get_strategy(strategy)
        work = load_workload(workload, seed=seed, jobs=jobs, machine_size=machine_size)
        cloud = CloudModel(
            "cloud", vm_limit=cloud_limit, boot=Durations.parse(boot),
            price_per_hour=price, billing_increment=billing,
        )  # fmt: skip
    except ValueError as exc:
        raise fail(str(exc)) from None
    if len(work) == 0:
        raise fail(f"workload {workload!r} has no job")
    console.print(
        Text.assemble(
            ("simulate", "bold"), f": {work.name} ({len(work):,} jobs) on {site_procs} site "
            "processors with the ", (strategy, "bold"), f" strategy set, up to {cloud_limit} "
            "cloud VMs",
        )
    )  # fmt: skip
    if work.note:
        console.print(work.note, highlight=False)
    from elasticsite.sim.figures import replay_timeline_plot
    from elasticsite.sim.watch import clock

    columns = (work.submit, work.procs, work.runtime, work.requested)
    end = float(work.submit[-1])
    with StatusLine(progress) as line:
        try:
            runs = []
            for name, on in (("base", None), (strategy, cloud)):

                def advance(now: float, name: str = name) -> None:
                    line.update(f"{name}: simulated {clock(now)} of {clock(end)} submissions")

                runs.append(
                    replay(
                        *columns,
                        site_procs=site_procs,
                        strategy=name,
                        cloud=on,
                        seed=seed,
                        progress=advance,
                    )
                )
        except ValueError as exc:
            line.clear()
            raise fail(str(exc)) from None
    base, result = runs
    base_metrics = base.metrics()
    metrics = result.metrics(base_awrt=base_metrics.awrt)
    print_metrics(metrics)
    console.print(
        f"base (site only, EASY): AWRT {base_metrics.awrt:,.1f} s, bounded slowdown "
        f"{base_metrics.mean_bounded_slowdown:,.1f}, site utilisation "
        f"{base_metrics.site_utilisation:.1%}",
        highlight=False,
    )
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{work.name}-{strategy}-jobs.csv".replace("/", "_")
    write_replay_jobs_csv(path, result)
    plot = replay_timeline_plot(
        path.with_name(path.name.replace("-jobs.csv", ".png")),
        result,
        f"{strategy} strategy set, {work.name} (simulated)",
    )
    console.print(f"jobs: {path}   plot: {plot}")
    console.print(f"{result.events:,} events")


def _warn(text: str) -> None:
    tell(f"warning: {text}")


def experiment(
    spec: Annotated[Path, typer.Argument(help="Experiment spec (TOML), e.g. experiments/*.toml.")],
    out: Annotated[
        Path | None,
        typer.Option(help="Output directory. Default: experiments-out/<spec name>."),
    ] = None,
    workers: Annotated[
        PositiveInt | None, typer.Option(help="Worker processes. Default: CPU count.")
    ] = None,
    rounds: Annotated[PositiveInt | None, typer.Option(help="Override the spec's rounds.")] = None,
    dask: Annotated[
        str | None,
        typer.Option(
            help="Run on this Dask scheduler (tcp://HOST:PORT) instead of local processes.",
            show_default=False,
        ),
    ] = None,
    dask_wait_workers: Annotated[
        float,
        typer.Option(
            min=0.001, callback=finite, help="With --dask: wait this long for a first worker, s."
        ),
    ] = 60.0,
    dask_timeout: Annotated[
        float,
        typer.Option(
            min=0.001,
            callback=finite,
            help="With --dask: the longest time without a run finishing, s.",
        ),
    ] = 600.0,
    dask_on_timeout: Annotated[
        Literal["stop", "wait"],
        typer.Option(help="With --dask, then: stop (exit 2; rerun resumes) or wait, saying so."),
    ] = "stop",
    progress: ProgressOpt = None,
) -> None:
    """Run a spec's sweep (resumable), then write results, summary CSV and plots."""
    from elasticsite.sim.experiment import SpecError, load_spec, run_experiment
    from elasticsite.sim.runner import DaskCluster

    try:
        parsed = load_spec(spec)
        cluster = None if dask is None else DaskCluster(
            dask, wait_workers=dask_wait_workers, timeout=dask_timeout,
            on_timeout=dask_on_timeout, notify=_warn,
        )  # fmt: skip
    except (SpecError, ValueError) as exc:
        raise fail(str(exc)) from None
    target = out or Path("experiments-out") / parsed.name
    started = time.monotonic()
    runs = [0, 0]

    def show(done: int, total: int) -> None:
        runs[:] = [done, total]

    with StatusLine(progress) as line:
        line.ticking(lambda: f"{parsed.name}: {runs[0]:,}/{runs[1]:,} runs done, "
                             f"{line.elapsed:,.0f} s")  # fmt: skip
        try:
            result = run_experiment(
                parsed, target, workers=workers, rounds=rounds, dask=cluster, progress=show
            )
        except (SpecError, ValueError, RuntimeError) as exc:
            line.clear()
            raise fail(str(exc)) from None
    console.print(
        f"{result.computed} runs computed, {result.kept} kept from an earlier run, "
        f"in {time.monotonic() - started:.1f} s"
    )
    if result.table:
        strategies = list(next(iter(result.table.values())))
        t = Table(title=f"{parsed.name}: means over the rounds", header_style="bold")
        t.add_column("metric")
        for s in strategies:
            t.add_column(s, justify="right")
        for label, values in result.table.items():
            t.add_row(label, *(f"{values[s]:,.2f}" for s in strategies))
        console.print(t)
    console.print(f"results: {result.results}   summary: {result.summary}")
    if result.table_csv:
        console.print(f"table: {result.table_csv}")
    for plot in result.plots:
        console.print(f"plot: {plot}")
