"""Experiment kinds: what one run of each computes, its result rows and its summaries.

Three kinds of spec (:mod:`~elasticsite.sim.specs`):

* ``kind = "replay"`` (paper 002): a workload (the Lublin99 model cut at
  ``duration_days``, or an SWF trace split into consecutive ``interval_days`` pieces,
  one per round: :mod:`~elasticsite.sim.replay_jobs`), an optional sweep of one Lublin
  parameter, a cloud and strategy sets. Each (value, round) runs the site-only ``base``
  strategy (EASY, no cloud) and then each strategy through
  :func:`~elasticsite.sim.replay.replay`; the performance cost (eq. 3) and the AWRT and
  slowdown improvements are taken against that same round's base.
* ``kind = "deadline"`` (paper 002, Figures 4 and 5): a replay whose jobs partly carry
  deadlines, judged by violations, rejections and eq. 4 against a site-only EDF base;
  run by :mod:`~elasticsite.sim.deadlines`.
* ``kind = "elastic"`` (paper 000): workloads x provisioning policies through
  :func:`~elasticsite.sim.elastic.simulate_elastic`, optionally drawing each run's
  reactivity timeline.

One processor of a replay spec is one allocation unit: paper 002 models the SDSC Blue
Horizon site as 144 nodes hosting one VM each, so its specs use ``site_procs = 144``
and a 144-VM cloud, one processor = one node = one VM. An SWF trace that counts CPUs
(Blue Horizon's lists 8 per node) is brought to nodes with ``procs_per_unit = 8``.

:func:`run_experiment` is the entry point. The tasks of a kind go through the
resumable, parallel runner of :mod:`~elasticsite.sim.runner`: a rerun skips every key
(value, round, strategy; or workload, policy, round) already in ``results.csv``, and
the same spec always gives the same bytes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticsite.sim.deadlines import run_deadline
from elasticsite.sim.metrics import SimMetrics
from elasticsite.sim.replay import ReplayResult, replay
from elasticsite.sim.replay_jobs import (
    check_rounds,
    lublin_jobs,
    swf_round,
    write_replay_jobs_csv,
)
from elasticsite.sim.results import (
    ELASTIC_KEY,
    ELASTIC_METRICS,
    REPLAY_KEY,
    REPLAY_METRICS,
    RESULTS,
    SUMMARY,
    TABLE1,
    TIMELINES,
    ExperimentResult,
    value_cell,
)
from elasticsite.sim.runner import (
    DaskCluster,
    Progress,
    Row,
    RunOutput,
    cell,
    check_fingerprint,
    execute,
    number,
    read_rows,
    round_seed,
    summarise,
    write_rows,
)
from elasticsite.sim.specs import (
    DeadlineSpec,
    ElasticRun,
    ElasticSpec,
    LublinSource,
    ReplaySpec,
    Spec,
    SpecError,
    load_spec,
    parse_spec,
)

__all__ = [
    "RESULTS",
    "SUMMARY",
    "TABLE1",
    "ElasticSpec",
    "ExperimentResult",
    "ReplaySpec",
    "Spec",
    "SpecError",
    "load_spec",
    "parse_spec",
    "round_seed",
    "run_experiment",
    "table1",
    "write_replay_jobs_csv",
]


@dataclass(frozen=True, slots=True)
class _ReplayTask:
    spec: ReplaySpec
    value: float | None
    round: int
    strategies: tuple[str, ...]
    base: tuple[float, float] | None  # base AWRT and slowdown when the base row exists

    @property
    def label(self) -> str:
        """The run as a person names it: its swept value and its round."""
        sweep = self.spec.sweep
        swept = "" if sweep is None or self.value is None else f"{sweep.parameter}={self.value!r} "
        return f"{swept}round {self.round}"


def _replay_task(task: _ReplayTask) -> list[Row]:
    """Run one (value, round): the base unless known, then each missing strategy."""
    spec = task.spec
    sweep = spec.sweep
    seed = round_seed(spec.seed, task.round)
    if isinstance(spec.workload, LublinSource):
        extra = {} if sweep is None or task.value is None else {sweep.parameter: task.value}
        jobs = lublin_jobs(spec.workload, spec.workload.lublin(extra), seed)
    else:
        jobs = swf_round(spec.workload, task.round)
    cloud = spec.cloud.model()
    rows: list[Row] = []

    def row(strategy: str, values: dict[str, float | int | None]) -> Row:
        out = {
            "parameter": "" if sweep is None else sweep.parameter,
            "value": value_cell(task.value),
            "round": str(task.round),
            "strategy": strategy,
        }
        out.update({k: cell(values[k]) for k in REPLAY_METRICS})
        return out

    def run(strategy: str) -> ReplayResult:
        return replay(
            jobs.submit, jobs.procs, jobs.runtime, jobs.requested,
            site_procs=spec.site_procs, strategy=spec.strategy(strategy),
            cloud=None if strategy == "base" else cloud, seed=seed,
        )  # fmt: skip

    if task.base is None:
        m = run("base").metrics()
        base_awrt, base_sd = m.awrt, m.mean_bounded_slowdown
        rows.append(row("base", _replay_values(m, base_awrt, base_sd)))
    else:
        base_awrt, base_sd = task.base
    for strategy in task.strategies:
        m = run(strategy).metrics(base_awrt=base_awrt)
        rows.append(row(strategy, _replay_values(m, base_awrt, base_sd)))
    return rows


def _replay_values(
    m: SimMetrics, base_awrt: float, base_sd: float
) -> dict[str, float | int | None]:
    return {
        "jobs": m.jobs_total,
        "jobs_on_cloud": m.jobs_on_cloud,
        "awrt": m.awrt,
        "mean_bounded_slowdown": m.mean_bounded_slowdown,
        "money_spent": m.money_spent,
        "vm_hours_billed": m.vm_hours_billed,
        "vm_hours_used": m.vm_hours_used,
        "site_utilisation": m.site_utilisation,
        "performance_cost": m.performance_cost,
        "awrt_improvement": base_awrt - m.awrt,
        "slowdown_improvement": base_sd - m.mean_bounded_slowdown,
    }


@dataclass(frozen=True, slots=True)
class _ElasticTask:
    spec: ElasticSpec
    run: ElasticRun
    round: int
    timelines: bool

    @property
    def label(self) -> str:
        """The run as a person names it: workload, policy and round."""
        return f"{self.run.workload} under {self.run.policy}, round {self.round}"


def _elastic_task(task: _ElasticTask) -> RunOutput:
    """Run one workload under one policy for one round; draw its timeline if asked
    (the CSV and the plot come back as bytes, for ``timelines/`` under ``--out``)."""
    from elasticsite.sim.elastic import simulate_elastic
    from elasticsite.sim.workload import load_workload

    spec, run = task.spec, task.run
    seed = round_seed(spec.seed, task.round)
    work = load_workload(run.workload, seed=seed)
    cloud = (run.cloud or spec.cloud).model()
    settings = spec.settings(run.policy)
    warm_up = cloud.boot.high + 2 * spec.interval if run.policy in spec.prewarm else 0.0
    result = simulate_elastic(
        work.arrivals(), [cloud], run.policy, settings,
        interval=spec.interval, scheduler=spec.scheduler, seed=seed, warm_up=warm_up,
    )  # fmt: skip
    m = result.metrics()
    files: dict[str, bytes] = {}
    if task.timelines:
        import tempfile

        from elasticsite.metrics import timeline
        from elasticsite.report import write_plot, write_timeline_csv

        tl = timeline(result.jobs, result.workers)
        name = f"{run.workload}-{run.policy}-r{task.round}"
        with tempfile.TemporaryDirectory(prefix="elasticsite-run-") as tmp:
            stem = Path(tmp) / name
            png = write_plot(stem.with_suffix(".png"), tl,
                             f"{run.policy} policy, {run.workload} (simulated)")  # fmt: skip
            steps = write_timeline_csv(stem.with_suffix(".csv"), tl)
            files = {f"{TIMELINES}/{p.name}": p.read_bytes() for p in (steps, png)}
    values: dict[str, float | int | None] = {
        "jobs": m.jobs_total,
        "jobs_done": m.jobs_done,
        "elapsed": m.elapsed,
        "overhead": m.overhead_total,
        "wait_mean": m.wait_mean,
        "reactivity_max": m.reactivity_max,
        "workers_launched": m.workers_launched,
        "peak_workers": m.peak_workers,
        "worker_hours": m.worker_hours,
        "cost": m.cost_total,
    }
    row = {"workload": run.workload, "policy": run.policy, "round": str(task.round)}
    row.update({k: cell(values[k]) for k in ELASTIC_METRICS})
    return RunOutput([row], files)


# -- running -----------------------------------------------------------------------


def run_experiment(
    spec: Spec,
    out: str | Path,
    *,
    workers: int | None = None,
    rounds: int | None = None,
    progress: Progress | None = None,
    dask: str | DaskCluster | None = None,
) -> ExperimentResult:
    """Run every row of ``spec`` not yet in ``out/results.csv``, then aggregate and plot.

    ``workers`` defaults to ``os.cpu_count()``; ``rounds`` overrides the spec's; with
    ``dask`` (a scheduler's address, or a :class:`DaskCluster` saying how long to wait
    for what) the runs go to that Dask cluster instead.
    """
    if rounds is not None:
        if rounds < 1:
            raise SpecError(f"rounds must be >= 1, got {rounds}")
        spec = spec.model_copy(update={"rounds": rounds})
    nproc: int | DaskCluster = workers if workers is not None else (os.cpu_count() or 1)
    if isinstance(nproc, int) and nproc < 1:
        raise SpecError(f"workers must be >= 1, got {nproc}")
    if dask is not None:
        nproc = dask if isinstance(dask, DaskCluster) else DaskCluster(dask)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    check_fingerprint(out_dir, spec)
    results = out_dir / RESULTS
    if isinstance(spec, DeadlineSpec):
        return run_deadline(spec, out_dir, results, nproc, progress)
    if isinstance(spec, ReplaySpec):
        return _run_replay(spec, out_dir, results, nproc, progress)
    return _run_elastic(spec, out_dir, results, nproc, progress)


def _sweep_values(spec: ReplaySpec) -> list[float | None]:
    return list(spec.sweep.values) if spec.sweep else [None]


def _replay_order(spec: ReplaySpec) -> Callable[[Row], tuple[Any, ...]]:
    values = [value_cell(v) for v in _sweep_values(spec)]
    strategies = ["base", *spec.strategies]

    def key(row: Row) -> tuple[Any, ...]:
        v, s = row["value"], row["strategy"]
        return (
            values.index(v) if v in values else len(values), v, int(row["round"]),
            strategies.index(s) if s in strategies else len(strategies), s,
        )  # fmt: skip

    return key


def _run_replay(
    spec: ReplaySpec,
    out: Path,
    results: Path,
    workers: int | DaskCluster,
    progress: Progress | None,
) -> ExperimentResult:
    from elasticsite.sim import figures

    header = [*REPLAY_KEY, *REPLAY_METRICS]
    rows = read_rows(results, header)
    check_rounds(spec)
    param = spec.sweep.parameter if spec.sweep else ""
    known = {(r["parameter"], r["value"], r["round"], r["strategy"]): r for r in rows}
    tasks: list[_ReplayTask] = []
    total = 0
    for value in _sweep_values(spec):
        for r in range(spec.rounds):
            k = (param, value_cell(value), str(r))
            missing = tuple(s for s in spec.strategies if (*k, s) not in known)
            base_row = known.get((*k, "base"))
            if base_row is not None and not missing:
                continue
            base = None
            if base_row is not None:
                base = (number(base_row["awrt"]), number(base_row["mean_bounded_slowdown"]))
            tasks.append(_ReplayTask(spec, value, r, missing, base))
            total += len(missing) + (base is None)
    computed = execute(tasks, _replay_task, workers, results, header, total, progress)
    wanted = {
        (param, value_cell(v), str(r), s)
        for v in _sweep_values(spec)
        for r in range(spec.rounds)
        for s in ("base", *spec.strategies)
    }
    summary = out / SUMMARY
    mine, summary_rows = summarise(
        results, REPLAY_KEY, REPLAY_METRICS, order=_replay_order(spec), wanted=wanted,
        group=("parameter", "value", "strategy"), summary=summary,
    )  # fmt: skip
    plots: list[Path] = []
    table: dict[str, dict[str, float]] = {}
    table_csv: Path | None = None
    if spec.sweep is not None:
        plots += figures.replay_sweep_plots(out, spec.name, param, spec.strategies, summary_rows)
    else:
        table = table1(summary_rows, spec.strategies)
        table_csv = out / TABLE1
        write_rows(
            table_csv,
            ["metric", *spec.strategies],
            [{"metric": m, **{s: cell(v[s]) for s in spec.strategies}} for m, v in table.items()],
        )
    return ExperimentResult(
        spec, out, results, summary, table_csv, tuple(plots), computed, len(mine) - computed,
        table,
    )  # fmt: skip


TABLE1_METRICS = {
    "Amount spent with VM instances ($)": "money_spent",
    "Number of VM instances/Hours": "vm_hours_billed",
    "Average weighted response time (improvement)": "awrt_improvement",
    "Overall job slowdown (improvement)": "slowdown_improvement",
    "Performance cost (eq. 3)": "performance_cost",
}
"""Table 1's rows (plus the performance cost) and the summary column each comes from."""


def table1(summary_rows: Sequence[Row], strategies: Sequence[str]) -> dict[str, dict[str, float]]:
    """Paper 002's Table 1 layout: metric -> strategy -> mean over the rounds."""
    by = {r["strategy"]: r for r in summary_rows}
    return {
        label: {s: number(by[s][col]) if s in by else math.nan for s in strategies}
        for label, col in TABLE1_METRICS.items()
    }


def _run_elastic(
    spec: ElasticSpec,
    out: Path,
    results: Path,
    workers: int | DaskCluster,
    progress: Progress | None,
) -> ExperimentResult:
    from elasticsite.sim import figures

    header = [*ELASTIC_KEY, *ELASTIC_METRICS]
    rows = read_rows(results, header)
    known = {(r["workload"], r["policy"], r["round"]) for r in rows}
    runs = spec.all_runs()
    tasks = [
        _ElasticTask(spec, run, r, spec.timelines)
        for run in runs
        for r in range(spec.rounds)
        if (run.workload, run.policy, str(r)) not in known
    ]
    computed = execute(tasks, _elastic_task, workers, results, header, len(tasks), progress)
    order = [(run.workload, run.policy) for run in runs]

    def key(row: Row) -> tuple[Any, ...]:
        pair = (row["workload"], row["policy"])
        return (order.index(pair) if pair in order else len(order), pair, int(row["round"]))

    wanted = {(w, p, str(r)) for w, p in order for r in range(spec.rounds)}
    summary = out / SUMMARY
    mine, summary_rows = summarise(
        results, ELASTIC_KEY, ELASTIC_METRICS, order=key, wanted=wanted,
        group=("workload", "policy"), summary=summary,
    )  # fmt: skip
    plots = figures.elastic_bar_plots(out, spec.name, summary_rows)
    if spec.timelines:
        plots += sorted((out / TIMELINES).glob("*.png"))
    return ExperimentResult(
        spec, out, results, summary, None, tuple(plots), computed, len(mine) - computed, {}
    )
