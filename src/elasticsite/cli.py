"""The ``elasticsite`` command: thin wrappers that parse, call one function and render."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from elasticsite import __version__, logs
from elasticsite.cli_slurm import ConfigOpt, slurm_app

app = typer.Typer(
    help="Extend a batch cluster into IaaS clouds on demand.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(slurm_app, name="slurm")
console = Console(emoji=False)  # job commands and ids are shown as they are
err = Console(stderr=True, emoji=False)


def _setup_logging(verbose: int) -> None:
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logs.setup(level, err)


def _fail(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


@contextmanager
def _state_errors() -> Iterator[None]:
    """A state file that cannot be used (corrupt, locked by another process, unwritable)
    ends the command with its one-line ``FILE: cause``, exit status 2, no traceback.

    Decorates every command that opens the site's state."""
    from elasticsite.files import StateFileError

    try:
        yield
    except StateFileError as exc:
        raise _fail(str(exc)) from None


def _config_path(config: Path | None) -> Path:
    return config or Path(os.environ.get("ELASTICSITE_CONFIG", "elasticsite.toml"))


def _load(config: Path | None) -> Any:
    from elasticsite.config import ConfigError, load_config

    path = _config_path(config)
    if not path.exists():
        raise _fail(
            f"no configuration at {path}; pass --config FILE "
            "(examples/local.toml runs the embedded site)"
        )
    try:
        return load_config(path)
    except ConfigError as exc:
        raise _fail(str(exc)) from None


def _open(config: Path | None) -> Any:
    """The configured site; a bad option (named with its file) or an unusable state file
    is one error line."""
    from elasticsite.config import ConfigError
    from elasticsite.manager.site import open_site

    cfg = _load(config)
    try:
        return open_site(cfg)
    except ConfigError as exc:
        raise _fail(f"{_config_path(config)}: {exc}") from None


@app.callback(invoke_without_command=True)
def main(
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
) -> None:
    if version:
        console.print(f"elasticsite {__version__}")
        raise typer.Exit()


@app.command()
@_state_errors()
def demo(
    policy: Annotated[str, typer.Option(help="Provisioning policy.")] = "bursts",
    workload: Annotated[str, typer.Option(help="Built-in workload (paper 000).")] = "workload1",
    speed: Annotated[float, typer.Option(min=0.1, help="Time compression factor.")] = 4.0,
    max_instances: Annotated[int, typer.Option(min=1)] = 10,
    boot_time: Annotated[float, typer.Option(min=0, help="Worker boot delay, s.")] = 60.0,
    shutdown_time: Annotated[float, typer.Option(min=0, help="Worker shutdown, s.")] = 6.0,
    dedicated_workers: Annotated[int, typer.Option(min=1)] = 10,
    seed: Annotated[int, typer.Option()] = 0,
    out: Annotated[Path, typer.Option(help="Where the plot and CSVs go.")] = Path("demo-out"),
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True)] = 0,
) -> None:
    """Run a live elastic site here: jobs arrive, workers boot, join, run them, drain and go."""
    from elasticsite import policies
    from elasticsite.demo import DemoOptions, DemoProgress, run_demo
    from elasticsite.workloads import get_workload, workload_names

    _setup_logging(verbose)
    if policy not in policies.available():
        raise _fail(f"unknown policy {policy!r}; choose one of {', '.join(policies.available())}")
    if workload not in workload_names():
        raise _fail(f"unknown workload {workload!r}; choose one of {', '.join(workload_names())}")
    n = len(get_workload(workload, seed))
    opts = DemoOptions(
        policy=policy,
        workload=workload,
        speed=speed,
        max_instances=max_instances,
        boot_time=boot_time,
        shutdown_time=shutdown_time,
        dedicated_workers=dedicated_workers,
        seed=seed,
        out_dir=out,
    )
    console.print(
        f"[bold]elasticsite demo[/]: {workload} ({n} jobs) with the [bold]{policy}[/] policy, "
        f"{speed:g}x speed, up to {max_instances} workers booting in ~{boot_time:g} s"
    )

    def render(p: DemoProgress) -> Table:
        t = Table.grid(padding=(0, 1))
        w = p.workers
        booting = w.get("requested", 0) + w.get("booting", 0)
        leaving = w.get("draining", 0) + w.get("terminating", 0)
        t.add_row(
            f"[bold]t={p.elapsed:5.0f} s[/]",
            f"jobs: {p.submitted}/{p.total} submitted, {p.queued} queued, "
            f"{p.running} running, {p.done} done",
        )
        t.add_row(
            "",
            f"workers: {booting} booting, {w.get('idle', 0)} idle, {w.get('busy', 0)} busy, "
            f"{leaving} leaving",
        )
        return t

    from elasticsite.config import ConfigError

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(f"{out}: cannot write ({(exc.strerror or str(exc)).lower()})") from None
    try:
        with Live(console=console, refresh_per_second=4, transient=False) as live:
            result = run_demo(opts, on_progress=lambda p: live.update(render(p)))
    except ConfigError as exc:  # a setting out of bounds, e.g. --boot-time inf
        raise _fail(f"demo: {exc}") from None
    console.print()
    _print_metrics(result.metrics)
    console.print(f"plot: {result.plot}")
    console.print(f"jobs: {result.jobs_csv}   workers: {result.workers_csv}")
    console.print(f"ran in {result.wall_seconds:.0f} s of wall-clock time")
    if result.metrics.jobs_not_done:
        raise _fail(f"{result.metrics.jobs_not_done} jobs did not finish")


def _print_metrics(metrics: Any) -> None:
    table = Table(title="Summary", show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("unit")
    for label, value, unit in metrics.to_rows():
        if value is None:
            shown = "-"
        elif isinstance(value, float):
            shown = f"{value:,.2f}" if unit == "money" else f"{value:,.1f}"
        else:
            shown = f"{value:,}"
        table.add_row(label, shown, unit)
    console.print(table)


@app.command()
@_state_errors()
def run(
    config: ConfigOpt = None,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True)] = 1,
) -> None:
    """Run the manager loop until interrupted (SIGINT/SIGTERM stop it cleanly)."""
    _setup_logging(verbose)
    site = _open(config)
    try:
        manager = site.manager()
    except ValueError as exc:
        raise _fail(f"{_config_path(config)}: {exc}") from None

    signals = 0

    def stop(signum: int, _frame: Any) -> None:
        nonlocal signals
        signals += 1
        draining = site.config.manager.on_shutdown == "drain"
        if signals == 1:
            logging.getLogger("elasticsite").warning(
                "signal %d: stopping (%s)%s",
                signum,
                "draining and terminating workers" if draining else "leaving workers running",
                "; signal again to stop at once" if draining else "",
            )
        else:
            logging.getLogger("elasticsite").warning(
                "signal %d again: stopping now, leaving the remaining workers", signum
            )
        manager.stop()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    cfg = site.config
    err.print(
        f"elasticsite {__version__}: site {cfg.manager.site_id!r}, policy {cfg.policy.name}, "
        f"clouds {', '.join(c.name for c in cfg.clouds)}, state in {site.state_dir}"
    )
    manager.run()


@app.command()
@_state_errors()
def submit(
    command: Annotated[list[str], typer.Argument(help="The job's command and arguments.")],
    config: ConfigOpt = None,
    cores: Annotated[int, typer.Option(min=1)] = 1,
    walltime: Annotated[float, typer.Option(min=1, help="Requested time limit, s.")] = 3600,
    count: Annotated[int, typer.Option(min=1, help="Submit this many copies.")] = 1,
) -> None:
    """Queue a job on the site's batch system: submit --cores 1 --walltime 60 -- sleep 30"""
    from elasticsite.batch.base import BatchError, JobRequest
    from elasticsite.files import StateFileError

    site = _open(config)
    user = os.environ.get("USER", "") or str(os.getuid())
    for _ in range(count):
        try:
            job_id = site.batch.submit(JobRequest(command, cores, walltime, user))
        except StateFileError:
            raise  # said as FILE: cause
        except BatchError as exc:
            raise _fail(f"cannot submit: {exc}") from None
        console.print(job_id)


@app.command()
@_state_errors()
def queue(
    config: ConfigOpt = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Include finished jobs.")] = False,
) -> None:
    """Show the site's queued and running jobs (with --all, finished ones too on the
    embedded site), in the order the batch system would start them."""
    from elasticsite.batch.local import LocalBatch

    site = _open(config)
    local = isinstance(site.batch, LocalBatch)
    if all_jobs and not local:
        raise _fail("--all needs the embedded batch system; use the batch system's own tools")
    if local:
        jobs = site.batch.jobs(None if all_jobs else ["queued", "running"])
    else:
        view = _sense(site)
        jobs = [*view.running, *view.queued]
    now = time.time()
    t = Table(show_header=True, header_style="bold")
    for col in ("job", "state", "cores", "walltime", "node", "waited", "command"):
        t.add_column(col)
    for j in jobs:
        waited = (j.started_at or now) - j.submitted_at
        t.add_row(
            j.id,
            j.state.value,
            str(j.cores),
            f"{j.walltime:g}",
            j.node or "",
            f"{waited:.0f}s",
            j.command,
        )
    console.print(t)
    counts = _job_counts(site)
    console.print(", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no jobs")


def _sense(site: Any) -> Any:
    from elasticsite.batch.base import BatchError

    try:
        return site.batch.snapshot()
    except BatchError as exc:
        raise _fail(f"cannot read the batch system: {exc}") from None


def _job_counts(site: Any) -> dict[str, int]:
    """Jobs by state: the embedded system counts them all, others what a snapshot shows."""
    from elasticsite.batch.local import LocalBatch

    if isinstance(site.batch, LocalBatch):
        return dict(site.batch.counts())
    view = _sense(site)
    return {k: v for k, v in (("queued", len(view.queued)), ("running", len(view.running))) if v}


@app.command()
@_state_errors()
def status(
    config: ConfigOpt = None,
    events: Annotated[int, typer.Option(min=0, help="Show this many recent transitions.")] = 10,
) -> None:
    """Show the manager's workers, their states and the queue, from the state database."""
    site = _open(config)
    records = site.store.load(include_done=False)
    now = time.time()
    t = Table(show_header=True, header_style="bold", title=f"site {site.config.manager.site_id}")
    for col in ("worker", "node", "cloud", "state", "for", "jobs", "instance", "note"):
        t.add_column(col)
    for r in records:
        w = r.worker
        t.add_row(
            w.id,
            w.node if w.node != w.id else "",
            w.cloud,
            w.state.value,
            f"{now - w.state_since:.0f}s",
            str(w.running_jobs),
            w.instance_id or "",
            r.last_error,
        )
    console.print(t)
    counts = _job_counts(site)
    console.print("queue: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "empty"))
    context_uri = site.store.get_meta("context.uri")
    if context_uri:
        pending = json.loads(site.store.get_meta("context.pending_removals") or "[]")
        console.print(
            f"context: {context_uri} ({len(pending)} departures waiting for the broker)",
            highlight=False,
        )
    counters = site.store.counters()
    if counters:
        console.print("counters: " + ", ".join(f"{k} {v}" for k, v in sorted(counters.items())))
    recent = site.store.transitions(last=events) if events else []
    if recent:
        console.print("recent transitions:")
        for tr in recent:
            when = time.strftime("%H:%M:%S", time.localtime(tr.at))
            before = tr.from_state.value if tr.from_state else "-"
            console.print(
                f"  {when} {tr.worker_id}: {before} -> {tr.to_state.value} ({tr.cause})",
                highlight=False,
            )


@app.command()
def simulate(
    workload: Annotated[
        str, typer.Option(help="Built-in name, 'lublin', or an SWF trace file (.swf/.gz).")
    ] = "workload1",
    policy: Annotated[str, typer.Option(help="Provisioning policy.")] = "bursts",
    cloud_limit: Annotated[
        int | None,
        typer.Option(min=0, help="Most VMs at once. Default 10; --site-procs with --strategy."),
    ] = None,
    boot: Annotated[
        str | None,
        typer.Option(help="Boot time, s: 60, 74:205 or 60,62,90. Default 60; 0 with --strategy."),
    ] = None,
    shutdown: Annotated[str, typer.Option(help="Shutdown time, s (same forms).")] = "6",
    price: Annotated[float, typer.Option(min=0, help="Price per VM-hour.")] = 0.10,
    billing: Annotated[float, typer.Option(min=1, help="Billing increment, s.")] = 3600,
    cores_per_vm: Annotated[int, typer.Option(min=1)] = 1,
    interval: Annotated[float, typer.Option(min=0.001, help="Decision period, s.")] = 10.0,
    scheduler: Annotated[str, typer.Option(help="fcfs or easy.")] = "easy",
    jobs: Annotated[int, typer.Option(min=1, help="Jobs of a Lublin workload.")] = 10_000,
    machine_size: Annotated[int, typer.Option(min=1, help="Lublin machine size.")] = 128,
    seed: Annotated[int, typer.Option()] = 0,
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
        int, typer.Option(min=1, help="Site processors (= nodes = VMs) with --strategy.")
    ] = 144,
) -> None:
    """Replay a workload through a provisioning policy on the virtual clock."""
    if strategy is not None:
        _simulate_strategy(
            workload, strategy, site_procs, site_procs if cloud_limit is None else cloud_limit,
            boot or "0", price, billing, cores_per_vm, jobs, machine_size, seed, out,
        )  # fmt: skip
        return
    cloud_limit = 10 if cloud_limit is None else cloud_limit
    boot = "60" if boot is None else boot
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from elasticsite import policies
    from elasticsite.metrics import timeline
    from elasticsite.report import write_jobs_csv, write_plot, write_workers_csv
    from elasticsite.sim.cloud import CloudModel, Durations
    from elasticsite.sim.elastic import simulate_elastic
    from elasticsite.sim.workload import load_workload

    if policy not in policies.available():
        raise _fail(f"unknown policy {policy!r}; choose one of {', '.join(policies.available())}")
    try:
        work = load_workload(workload, seed=seed, jobs=jobs, machine_size=machine_size)
        cloud = CloudModel(
            "cloud",
            vm_limit=cloud_limit,
            boot=Durations.parse(boot),
            shutdown=Durations.parse(shutdown),
            price_per_hour=price,
            billing_increment=billing,
            cores_per_vm=cores_per_vm,
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if len(work) == 0:
        raise _fail(f"workload {workload!r} has no job")
    widest = int(work.procs.max())
    if widest > cores_per_vm:
        raise _fail(
            f"a job of {workload!r} needs {widest} processors but a VM has {cores_per_vm}; "
            "jobs run on one VM here: raise --cores-per-vm"
        )
    console.print(
        f"[bold]simulate[/]: {work.name} ({len(work):,} jobs) with the [bold]{policy}[/] policy, "
        f"up to {cloud_limit} VMs of {cores_per_vm} cores booting in {boot} s"
    )
    if work.note:
        console.print(work.note, highlight=False)
    end = float(work.submit[-1]) or 1.0
    with Progress(
        TextColumn("simulated time"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(), console=console, transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task("sim", total=end)
        try:
            result = simulate_elastic(
                work.arrivals(),
                [cloud],
                policy,
                interval=interval,
                scheduler=scheduler,
                seed=seed,
                progress=lambda now: bar.update(task, completed=min(now, end)),
            )
        except ValueError as exc:
            raise _fail(str(exc)) from None
    metrics = result.metrics()
    _print_metrics(metrics)
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{work.name}-{policy}".replace("/", "_")
    specs = [cloud.spec()]
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
) -> None:  # fmt: skip
    """``simulate --strategy``: the base run, then the strategy, then their figures."""
    from elasticsite.sim.cloud import CloudModel, Durations
    from elasticsite.sim.experiment import write_replay_jobs_csv
    from elasticsite.sim.replay import replay
    from elasticsite.sim.strategies import get_strategy
    from elasticsite.sim.workload import load_workload

    if cores_per_vm != 1:
        raise _fail("--strategy runs one single-core VM per processor: leave --cores-per-vm 1")
    try:
        get_strategy(strategy)
        work = load_workload(workload, seed=seed, jobs=jobs, machine_size=machine_size)
        cloud = CloudModel(
            "cloud", vm_limit=cloud_limit, boot=Durations.parse(boot),
            price_per_hour=price, billing_increment=billing,
        )  # fmt: skip
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if len(work) == 0:
        raise _fail(f"workload {workload!r} has no job")
    console.print(
        f"[bold]simulate[/]: {work.name} ({len(work):,} jobs) on {site_procs} site processors "
        f"with the [bold]{strategy}[/] strategy set, up to {cloud_limit} cloud VMs"
    )
    if work.note:
        console.print(work.note, highlight=False)
    from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    from elasticsite.sim.figures import replay_timeline_plot

    columns = (work.submit, work.procs, work.runtime, work.requested)
    end = float(work.submit[-1]) or 1.0
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(), console=console, transient=True,
    ) as bar:  # fmt: skip
        try:
            runs = []
            for name, on in (("base", None), (strategy, cloud)):
                task = bar.add_task(f"{name} (simulated time)", total=end)

                def advance(now: float, task: TaskID = task) -> None:
                    bar.update(task, completed=min(now, end))

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
                bar.update(task, completed=end)
        except ValueError as exc:
            raise _fail(str(exc)) from None
    base, result = runs
    base_metrics = base.metrics()
    metrics = result.metrics(base_awrt=base_metrics.awrt)
    _print_metrics(metrics)
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


@app.command()
def experiment(
    spec: Annotated[Path, typer.Argument(help="Experiment spec (TOML), e.g. experiments/*.toml.")],
    out: Annotated[
        Path | None,
        typer.Option(help="Output directory. Default: experiments-out/<spec name>."),
    ] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="Worker processes. Default: CPU count.")
    ] = None,
    rounds: Annotated[int | None, typer.Option(min=1, help="Override the spec's rounds.")] = None,
) -> None:
    """Run a spec's sweep (resumable), then write results, summary CSV and plots."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from elasticsite.sim.experiment import SpecError, load_spec, run_experiment

    try:
        parsed = load_spec(spec)
    except SpecError as exc:
        raise _fail(str(exc)) from None
    target = out or Path("experiments-out") / parsed.name
    started = time.monotonic()
    with Progress(
        TextColumn(f"[bold]{parsed.name}[/]"), BarColumn(), MofNCompleteColumn(),
        TextColumn("runs"), TimeElapsedColumn(), TimeRemainingColumn(), console=console,
    ) as bar:  # fmt: skip
        task = bar.add_task("runs", total=None)
        try:
            result = run_experiment(
                parsed, target, workers=workers, rounds=rounds,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )  # fmt: skip
        except (SpecError, ValueError) as exc:
            raise _fail(str(exc)) from None
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


@app.command()
def agent(
    userdata: Annotated[
        Path | None, typer.Option(help="User data JSON (default: $ELASTICSITE_USERDATA).")
    ] = None,
    uri: Annotated[str | None, typer.Option(help="Context URI (overrides user data).")] = None,
    key: Annotated[str | None, typer.Option(help="Context key.")] = None,
    secret: Annotated[str | None, typer.Option(help="Context secret.")] = None,
    ca: Annotated[
        Path | None, typer.Option(help="PEM the broker's certificate is checked against.")
    ] = None,
    scripts: Annotated[
        Path | None, typer.Option(help="Scripts root (default: the shipped ones).")
    ] = None,
    state: Annotated[
        Path | None, typer.Option(help="State file (default: ROOT/var/lib/elasticsite/agent.json).")
    ] = None,
    root: Annotated[Path, typer.Option(help="Root the scripts write under.")] = Path("/"),
    period: Annotated[float, typer.Option(min=0, help="Poll every N s; 0 = long poll.")] = 0.0,
    wait: Annotated[float, typer.Option(min=0, max=60, help="Long-poll timeout, s.")] = 30.0,
    short_hostname: Annotated[
        str | None, typer.Option(help="Override the short host name.")
    ] = None,
    hostname: Annotated[str | None, typer.Option(help="Override the FQDN.")] = None,
    address: Annotated[str | None, typer.Option(help="Override the address peers reach.")] = None,
    ssh_host_key: Annotated[str | None, typer.Option(help="Host key line, or a .pub file.")] = None,
    data: Annotated[str, typer.Option(help="Free-form data shared with the context.")] = "",
    no_leave: Annotated[bool, typer.Option("--no-leave", help="Stay a member on exit.")] = False,
    strict: Annotated[bool, typer.Option(help="Stop when a script fails.")] = False,
    once: Annotated[bool, typer.Option(help="Apply what is there, then exit.")] = False,
    script_timeout: Annotated[float, typer.Option(min=0.1, help="Per-script limit, s.")] = 120.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Log warnings only.")] = False,
) -> None:
    """Keep this node in step with its context: join, then run scripts as nodes come and go."""
    from elasticsite.context.agent import DEFAULT_SCRIPTS, AgentError, configure, run_agent

    logs.setup(
        logging.WARNING if quiet else logging.INFO,
        fmt="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = configure(
            userdata=userdata,
            uri=uri,
            key=key,
            secret=secret,
            ca=ca,
            root=root,
            state=state,
            scripts=scripts or DEFAULT_SCRIPTS,
            short_hostname=short_hostname,
            hostname=hostname,
            address=address,
            ssh_host_key=ssh_host_key,
            data=data,
            period=period,
            wait=wait,
            leave=not no_leave,
            strict=strict,
            once=once,
            script_timeout=script_timeout,
        )
        code = run_agent(settings)
    except AgentError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    raise typer.Exit(code)


@app.command(name="policies")
def list_policies() -> None:
    """List the provisioning policies available (built in and installed)."""
    from elasticsite import policies

    for name in policies.available():
        fn = policies.get(name)
        doc = (sys.modules[fn.__module__].__doc__ or fn.__doc__ or "").strip().splitlines()
        console.print(f"[bold]{name}[/]: {doc[0] if doc else ''}", highlight=False)


from elasticsite.cli_context import broker as _broker_command  # noqa: E402
from elasticsite.cli_context import context_app  # noqa: E402

app.add_typer(context_app, name="context")
app.command(name="broker")(_broker_command)
