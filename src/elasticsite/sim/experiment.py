"""Experiment specs (TOML) and the runner that turns them into result rows, in parallel.

Two kinds of spec:

* ``kind = "replay"`` (paper 002): a workload (the Lublin99 model cut at
  ``duration_days``, or an SWF trace split into consecutive ``interval_days`` pieces,
  one per round), an optional sweep of one Lublin parameter, a cloud and strategy sets.
  Each (value, round) runs the site-only ``base`` strategy (EASY, no cloud) and then
  each strategy through :func:`~elasticsite.sim.replay.replay`; the performance cost
  (eq. 3) and the AWRT and slowdown improvements are taken against that same round's
  base.
* ``kind = "elastic"`` (paper 000): workloads x provisioning policies through
  :func:`~elasticsite.sim.elastic.simulate_elastic`, optionally drawing each run's
  reactivity timeline.

One processor of a replay spec is one allocation unit: paper 002 models the SDSC Blue
Horizon site as 144 nodes hosting one VM each, so its specs use ``site_procs = 144``
and a 144-VM cloud, one processor = one node = one VM. An SWF trace that counts CPUs
(Blue Horizon's lists 8 per node) is brought to nodes with ``procs_per_unit = 8``.

Results are appended to ``results.csv`` as tasks finish, so an interrupted experiment
resumes where it stopped: a rerun skips every key (value, round, strategy; or workload,
policy, round) already there. When the last task is in, the file is rewritten in a
fixed order, so the same spec always gives the same bytes.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from elasticsite.sim.lublin import LublinParams, WalltimeModel, generate
from elasticsite.sim.metrics import SimMetrics
from elasticsite.sim.replay import ReplayResult, replay
from elasticsite.sim.specs import (
    ElasticRun,
    ElasticSpec,
    LublinSource,
    ReplaySpec,
    Spec,
    SpecError,
    SWFSource,
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

DAY = 86_400.0
RESULTS = "results.csv"
SUMMARY = "summary.csv"
TABLE1 = "table1.csv"
_FINGERPRINT = "spec.json"


# -- workloads ---------------------------------------------------------------------


def round_seed(seed: int, round_: int) -> int:
    """The seed of one round: the same for every swept value (common random numbers)."""
    return int(np.random.SeedSequence([seed, round_]).generate_state(1)[0])


@dataclass(frozen=True, slots=True)
class Jobs:
    """Jobs of one round as the replay reads them (seconds, allocation units)."""

    submit: np.ndarray[Any, np.dtype[np.float64]]
    procs: np.ndarray[Any, np.dtype[np.int64]]
    runtime: np.ndarray[Any, np.dtype[np.float64]]
    requested: np.ndarray[Any, np.dtype[np.float64]]


def lublin_jobs(source: LublinSource, params: LublinParams, seed: int) -> Jobs:
    """Enough Lublin99 jobs to cover ``duration_days`` from midnight, cut at that time."""
    horizon = source.duration_days * DAY
    wall = WalltimeModel.f_model(source.walltime_f) if source.walltime_f else WalltimeModel()
    n = max(64, int(200 * source.duration_days))
    while True:
        w = generate(n, params, machine_size=source.machine_size, seed=seed, walltime=wall)
        if float(w.submit_time[-1]) >= horizon:
            break
        n *= 2
    keep = w.submit_time < horizon
    return Jobs(w.submit_time[keep], w.processors[keep], w.runtime[keep], w.requested_time[keep])


_SWF_CACHE: dict[Path, Jobs] = {}


def swf_jobs(source: SWFSource) -> Jobs:
    """The whole trace in allocation units (CPUs / ``procs_per_unit``, rounded up)."""
    cached = _SWF_CACHE.get(source.path)
    if cached is None:
        from elasticsite.sim.swf import read_swf

        t = read_swf(source.path, sort_by_submit=True)
        run = t.run_time.astype(np.float64)
        cached = Jobs(
            t.submit_time.astype(np.float64),
            -(-t.allocated_processors // source.procs_per_unit),
            run,
            np.maximum(np.maximum(t.requested_time, run), 1.0),
        )
        _SWF_CACHE[source.path] = cached
    return cached


def swf_intervals(source: SWFSource) -> int:
    """How many consecutive ``interval_days`` pieces the trace holds (rounds available)."""
    jobs = swf_jobs(source)
    if len(jobs.submit) == 0:
        return 0
    span = float(jobs.submit[-1] - jobs.submit[0])
    return int(span // (source.interval_days * DAY)) + 1


def swf_round(source: SWFSource, round_: int) -> Jobs:
    """The ``round_``-th interval of the trace, submit times kept as in the trace."""
    jobs = swf_jobs(source)
    length = source.interval_days * DAY
    lo = float(jobs.submit[0]) + round_ * length
    keep = (jobs.submit >= lo) & (jobs.submit < lo + length)
    return Jobs(jobs.submit[keep], jobs.procs[keep], jobs.runtime[keep], jobs.requested[keep])


# -- result rows -------------------------------------------------------------------

Row = dict[str, str]

REPLAY_KEY = ("parameter", "value", "round", "strategy")
REPLAY_METRICS = (
    "jobs",
    "jobs_on_cloud",
    "awrt",
    "mean_bounded_slowdown",
    "money_spent",
    "vm_hours_billed",
    "vm_hours_used",
    "site_utilisation",
    "performance_cost",
    "awrt_improvement",
    "slowdown_improvement",
)
ELASTIC_KEY = ("workload", "policy", "round")
ELASTIC_METRICS = (
    "jobs",
    "jobs_done",
    "elapsed",
    "overhead",
    "wait_mean",
    "reactivity_max",
    "workers_launched",
    "peak_workers",
    "worker_hours",
    "cost",
)


def _cell(value: float | int | None) -> str:
    """A CSV cell: empty for undefined (None or NaN), exact repr otherwise."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, int | np.integer):
        return str(int(value))
    return repr(float(value))


def _number(cell: str) -> float:
    return math.nan if cell == "" else float(cell)


def value_cell(value: float | None) -> str:
    """How a swept value is written in the CSVs (empty when nothing is swept)."""
    return "" if value is None else repr(float(value))


@dataclass(frozen=True, slots=True)
class _ReplayTask:
    spec: ReplaySpec
    value: float | None
    round: int
    strategies: tuple[str, ...]
    base: tuple[float, float] | None  # base AWRT and slowdown when the base row exists


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
        out.update({k: _cell(values[k]) for k in REPLAY_METRICS})
        return out

    def run(strategy: str) -> ReplayResult:
        return replay(
            jobs.submit, jobs.procs, jobs.runtime, jobs.requested,
            site_procs=spec.site_procs, strategy=strategy,
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
    timeline_dir: Path | None


def _elastic_task(task: _ElasticTask) -> list[Row]:
    """Run one workload under one policy for one round; draw its timeline if asked."""
    from elasticsite import policies
    from elasticsite.sim.elastic import simulate_elastic
    from elasticsite.sim.workload import load_workload

    spec, run = task.spec, task.run
    seed = round_seed(spec.seed, task.round)
    work = load_workload(run.workload, seed=seed)
    cloud = (run.cloud or spec.cloud).model()
    settings = policies.PolicySettings(**spec.policy_settings)  # type: ignore[arg-type]
    warm_up = cloud.boot.high + 2 * spec.interval if run.policy in spec.prewarm else 0.0
    result = simulate_elastic(
        work.arrivals(), [cloud], run.policy, settings,
        interval=spec.interval, scheduler=spec.scheduler, seed=seed, warm_up=warm_up,
    )  # fmt: skip
    m = result.metrics()
    if task.timeline_dir is not None:
        from elasticsite.metrics import timeline
        from elasticsite.report import write_plot, write_timeline_csv

        tl = timeline(result.jobs, result.workers)
        stem = task.timeline_dir / f"{run.workload}-{run.policy}-r{task.round}"
        write_plot(stem.with_suffix(".png"), tl, f"{run.policy} policy, {run.workload} (simulated)")
        write_timeline_csv(stem.with_suffix(".csv"), tl)
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
    row.update({k: _cell(values[k]) for k in ELASTIC_METRICS})
    return [row]


# -- the results log ---------------------------------------------------------------


def _read_rows(path: Path, header: Sequence[str]) -> list[Row]:
    """Rows already in ``path``; a file written by another kind of experiment is an error."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        # a run killed mid-write leaves a partial last row: drop it, it is recomputed
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
        if b"\n" not in data:
            return []
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if list(reader.fieldnames or []) != list(header):
            raise SpecError(
                f"{path}: its columns {reader.fieldnames} are not this experiment's; "
                "choose another --out directory"
            )
        return [row for row in reader if None not in row.values() and None not in row]


def _write_rows(path: Path, header: Sequence[str], rows: Iterable[Row]) -> None:
    """Write a whole CSV atomically (a crash leaves the old file or the new one)."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=list(header), lineterminator="\n")
        out.writeheader()
        out.writerows(rows)
    tmp.replace(path)


def _sorted_log(
    path: Path, header: Sequence[str], key: Callable[[Row], tuple[Any, ...]]
) -> list[Row]:
    """The log's rows in their fixed order, rewriting the file only when it was not."""
    rows = _read_rows(path, header)
    ordered = sorted(rows, key=key)
    if ordered != rows:
        _write_rows(path, header, ordered)
    return ordered


def _check_fingerprint(out: Path, spec: Spec) -> None:
    """Refuse to mix rows of two different experiments in one directory.

    What may change between runs of one directory: the name, the rounds and the list
    of values, strategies, workloads, policies and runs (new keys are computed, known
    ones kept); anything else makes the kept rows wrong.
    """
    data = spec.model_dump(mode="json", exclude={"name", "rounds", "strategies", "workloads",
                                                 "policies", "runs", "timelines"})  # fmt: skip
    if isinstance(data.get("sweep"), dict):
        data["sweep"].pop("values", None)
    text = json.dumps(data, sort_keys=True, indent=1) + "\n"
    path = out / _FINGERPRINT
    if path.exists() and path.read_text(encoding="utf-8") != text:
        raise SpecError(
            f"{out} holds results of an experiment with other settings (see {path}); "
            "choose another --out directory or delete it"
        )
    path.write_text(text, encoding="utf-8")


Progress = Callable[[int, int], None]
"""``progress(rows_done, rows_total)``, called as rows come in."""


def _execute(
    tasks: Sequence[Any],
    fn: Callable[[Any], list[Row]],
    workers: int,
    results: Path,
    header: Sequence[str],
    total: int,
    progress: Progress | None,
) -> int:
    """Run tasks (in worker processes when ``workers`` > 1), appending each row as it comes."""
    done = 0
    if progress:
        progress(0, total)
    if not tasks:
        return 0
    fresh = not results.exists() or results.stat().st_size == 0
    with results.open("a", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=list(header), lineterminator="\n")
        if fresh:
            out.writeheader()
            f.flush()

        def record(rows: list[Row]) -> None:
            nonlocal done
            out.writerows(rows)
            f.flush()
            done += len(rows)
            if progress:
                progress(done, total)

        if workers <= 1 or len(tasks) == 1:
            for task in tasks:
                record(fn(task))
            return done
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
            pending: set[Future[list[Row]]] = {pool.submit(fn, t) for t in tasks}
            try:
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in sorted(finished, key=id):
                        record(fut.result())
            except BaseException:
                for fut in pending:
                    fut.cancel()
                raise
    return done


# -- running -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExperimentResult:
    """What :func:`run_experiment` wrote and how much of it was computed this time.

    ``table`` maps a Table-1 metric to its mean per strategy (unswept replay specs).
    """

    spec: Spec
    out_dir: Path
    results: Path
    summary: Path
    table_csv: Path | None
    plots: tuple[Path, ...]
    computed: int
    kept: int
    table: dict[str, dict[str, float]]


def run_experiment(
    spec: Spec,
    out: str | Path,
    *,
    workers: int | None = None,
    rounds: int | None = None,
    progress: Progress | None = None,
) -> ExperimentResult:
    """Run every row of ``spec`` not yet in ``out/results.csv``, then aggregate and plot.

    ``workers`` defaults to ``os.cpu_count()``; ``rounds`` overrides the spec's.
    """
    if rounds is not None:
        if rounds < 1:
            raise SpecError(f"rounds must be >= 1, got {rounds}")
        spec = spec.model_copy(update={"rounds": rounds})
    nproc = workers if workers is not None else (os.cpu_count() or 1)
    if nproc < 1:
        raise SpecError(f"workers must be >= 1, got {nproc}")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    _check_fingerprint(out_dir, spec)
    results = out_dir / RESULTS
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
    spec: ReplaySpec, out: Path, results: Path, workers: int, progress: Progress | None
) -> ExperimentResult:
    from elasticsite.sim import figures

    header = [*REPLAY_KEY, *REPLAY_METRICS]
    rows = _read_rows(results, header)
    if isinstance(spec.workload, SWFSource):
        have = swf_intervals(spec.workload)
        if spec.rounds > have:
            raise SpecError(
                f"rounds: {spec.rounds} rounds need {spec.rounds} intervals of "
                f"{spec.workload.interval_days:g} days but {spec.workload.path} holds {have}"
            )
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
                base = (_number(base_row["awrt"]), _number(base_row["mean_bounded_slowdown"]))
            tasks.append(_ReplayTask(spec, value, r, missing, base))
            total += len(missing) + (base is None)
    computed = _execute(tasks, _replay_task, workers, results, header, total, progress)
    rows = _sorted_log(results, header, _replay_order(spec))

    wanted = {
        (param, value_cell(v), str(r), s)
        for v in _sweep_values(spec)
        for r in range(spec.rounds)
        for s in ("base", *spec.strategies)
    }
    mine = [r for r in rows if (r["parameter"], r["value"], r["round"], r["strategy"]) in wanted]
    summary_rows = _aggregate(mine, ("parameter", "value", "strategy"), REPLAY_METRICS)
    summary_rows.sort(key=lambda r: _replay_order(spec)({**r, "round": "0"}))
    summary = out / SUMMARY
    _write_rows(summary, ["parameter", "value", "strategy", "rounds", *REPLAY_METRICS],
                summary_rows)  # fmt: skip
    plots: list[Path] = []
    table: dict[str, dict[str, float]] = {}
    table_csv: Path | None = None
    if spec.sweep is not None:
        plots += figures.replay_sweep_plots(out, spec.name, param, spec.strategies, summary_rows)
    else:
        table = table1(summary_rows, spec.strategies)
        table_csv = out / TABLE1
        _write_rows(
            table_csv,
            ["metric", *spec.strategies],
            [{"metric": m, **{s: _cell(v[s]) for s in spec.strategies}} for m, v in table.items()],
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
        label: {s: _number(by[s][col]) if s in by else math.nan for s in strategies}
        for label, col in TABLE1_METRICS.items()
    }


def _aggregate(rows: Sequence[Row], group: Sequence[str], metrics: Sequence[str]) -> list[Row]:
    """Mean of each metric over the rounds of each group (undefined rounds left out)."""
    groups: dict[tuple[str, ...], list[Row]] = {}
    for r in rows:
        groups.setdefault(tuple(r[g] for g in group), []).append(r)
    out = []
    for key, members in groups.items():
        row = dict(zip(group, key, strict=True))
        row["rounds"] = str(len(members))
        for m in metrics:
            values = np.array([_number(r[m]) for r in members])
            defined = values[~np.isnan(values)]
            row[m] = _cell(float(defined.mean()) if len(defined) else math.nan)
        out.append(row)
    return out


def _run_elastic(
    spec: ElasticSpec, out: Path, results: Path, workers: int, progress: Progress | None
) -> ExperimentResult:
    from elasticsite.sim import figures

    header = [*ELASTIC_KEY, *ELASTIC_METRICS]
    rows = _read_rows(results, header)
    known = {(r["workload"], r["policy"], r["round"]) for r in rows}
    runs = spec.all_runs()
    timeline_dir = out / "timelines" if spec.timelines else None
    tasks = [
        _ElasticTask(spec, run, r, timeline_dir)
        for run in runs
        for r in range(spec.rounds)
        if (run.workload, run.policy, str(r)) not in known
    ]
    computed = _execute(tasks, _elastic_task, workers, results, header, len(tasks), progress)
    order = [(run.workload, run.policy) for run in runs]

    def key(row: Row) -> tuple[Any, ...]:
        pair = (row["workload"], row["policy"])
        return (order.index(pair) if pair in order else len(order), pair, int(row["round"]))

    rows = _sorted_log(results, header, key)
    wanted = {(w, p, str(r)) for w, p in order for r in range(spec.rounds)}
    mine = [r for r in rows if (r["workload"], r["policy"], r["round"]) in wanted]
    summary_rows = _aggregate(mine, ("workload", "policy"), ELASTIC_METRICS)
    summary_rows.sort(key=lambda r: key({**r, "round": "0"}))
    summary = out / SUMMARY
    _write_rows(summary, ["workload", "policy", "rounds", *ELASTIC_METRICS], summary_rows)
    plots = figures.elastic_bar_plots(out, spec.name, summary_rows)
    if timeline_dir is not None:
        plots += sorted(timeline_dir.glob("*.png"))
    return ExperimentResult(
        spec, out, results, summary, None, tuple(plots), computed, len(mine) - computed, {}
    )


def write_replay_jobs_csv(path: str | Path, result: ReplayResult) -> Path:
    """One row per job of a replay: times in seconds, where it ran, whether it was rejected."""
    from elasticsite.sim.metrics import CLOUD

    jobs = result.jobs
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = ["job", "submit", "start", "finish", "processors", "runtime", "requested",
              "deadline", "wait", "where", "rejected"]  # fmt: skip
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(header)
        for i in range(len(jobs)):
            start, submit = float(jobs.start[i]), float(jobs.submit[i])
            out.writerow([
                i + 1, _cell(submit), _cell(start), _cell(float(jobs.finish[i])),
                int(jobs.processors[i]), _cell(float(jobs.runtime[i])),
                _cell(float(jobs.requested[i])), _cell(float(jobs.deadline[i])),
                _cell(start - submit), "cloud" if jobs.where[i] == CLOUD else "site",
                int(bool(jobs.rejected[i])),
            ])  # fmt: skip
    return path
