"""Paper 002's deadline experiments (Figures 4 and 5): one :class:`DeadlineSpec` run.

Each (stringency, fraction, round) is one task of the resumable runner
(:mod:`~elasticsite.sim.runner`):

1. the round's workload runs on the site alone under EASY, with no deadlines, which
   gives each job its turnaround ``ta`` and completion ``ct``;
2. a Bernoulli draw with probability ``fraction`` (seeded by the round, so the chosen
   sets nest as the fraction grows) picks the deadline jobs, and eq. 5 with the
   stringency factor gives their deadlines (:func:`~.metrics.assign_deadlines`, the
   spec's ``eq5`` reading);
3. the base run schedules the site alone in earliest-deadline-first order with EASY
   backfilling, rejecting what it cannot meet when the spec says ``reject``;
4. each strategy set runs with the cloud; its violations, rejections, money and the
   non-violation cost (eq. 4: money per violation avoided against the base) are kept.

Rows are keyed by (stringency, fraction, round, strategy); ``summary.csv`` holds the
means over the rounds, and the plots are Figure 4's panels (money spent and eq. 4 per
stringency) and Figure 5's (money spent, and the share of jobs rejected with the
cloud against the site alone).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticsite.sim.metrics import SimMetrics, assign_deadlines
from elasticsite.sim.replay import replay
from elasticsite.sim.replay_jobs import check_rounds, lublin_jobs, swf_round
from elasticsite.sim.results import SUMMARY, ExperimentResult
from elasticsite.sim.runner import (
    DaskCluster,
    Progress,
    Row,
    cell,
    execute,
    read_rows,
    round_seed,
    summarise,
)
from elasticsite.sim.specs import DeadlineSpec, LublinSource

__all__ = ["DEADLINE_KEY", "DEADLINE_METRICS", "run_deadline"]

DEADLINE_KEY = ("stringency", "fraction", "round", "strategy")
DEADLINE_METRICS = (
    "jobs",
    "jobs_on_cloud",
    "deadline_jobs",
    "violations",
    "rejected",
    "rejected_share",
    "violations_avoided",
    "money_spent",
    "vm_hours_billed",
    "awrt",
    "mean_bounded_slowdown",
    "non_violation_cost",
)
"""``rejected_share`` is rejected jobs over deadline jobs (accepted or not), in [0, 1];
``violations_avoided`` is the base's violations minus the strategy's."""


@dataclass(frozen=True, slots=True)
class _Task:
    spec: DeadlineSpec
    stringency: float
    fraction: float
    round: int
    strategies: tuple[str, ...]
    with_base: bool

    @property
    def label(self) -> str:
        """The run as a person names it."""
        return f"stringency {self.stringency!r}, fraction {self.fraction!r}, round {self.round}"


def _values(m: SimMetrics, base_violations: int) -> dict[str, float | int | None]:
    offered = m.deadline_jobs + m.jobs_rejected
    return {
        "jobs": m.jobs_total,
        "jobs_on_cloud": m.jobs_on_cloud,
        "deadline_jobs": offered,
        "violations": m.deadline_violations,
        "rejected": m.jobs_rejected,
        "rejected_share": m.jobs_rejected / offered if offered else None,
        "violations_avoided": base_violations - m.deadline_violations,
        "money_spent": m.money_spent,
        "vm_hours_billed": m.vm_hours_billed,
        "awrt": m.awrt,
        "mean_bounded_slowdown": m.mean_bounded_slowdown,
        "non_violation_cost": m.non_violation_cost,
    }


def _task(task: _Task) -> list[Row]:
    spec = task.spec
    seed = round_seed(spec.seed, task.round)
    if isinstance(spec.workload, LublinSource):
        jobs = lublin_jobs(spec.workload, spec.workload.lublin(), seed)
    else:
        jobs = swf_round(spec.workload, task.round)

    def run(strategy: Any, cloud: bool, deadlines: Any = None) -> Any:
        return replay(
            jobs.submit, jobs.procs, jobs.runtime, jobs.requested,
            site_procs=spec.site_procs, strategy=strategy,
            cloud=spec.cloud.model() if cloud else None, deadlines=deadlines, seed=seed,
        )  # fmt: skip

    plain = run("base", cloud=False).jobs
    deadlines = assign_deadlines(
        plain.submit, plain.finish - plain.submit, task.fraction, task.stringency,
        seed=seed, floor_at_base_completion=spec.eq5 == "later",
    )  # fmt: skip
    base = run(spec.base(), cloud=False, deadlines=deadlines).metrics()
    key = {"stringency": repr(task.stringency), "fraction": repr(task.fraction)}
    rows: list[Row] = []

    def row(strategy: str, m: SimMetrics) -> None:
        values = _values(m, base.deadline_violations)
        rows.append({**key, "round": str(task.round), "strategy": strategy,
                     **{k: cell(values[k]) for k in DEADLINE_METRICS}})  # fmt: skip

    if task.with_base:
        row("base", base)
    for name in task.strategies:
        result = run(spec.strategy(name), cloud=True, deadlines=deadlines)
        row(name, result.metrics(base_violations=base.deadline_violations))
    return rows


def _order(spec: DeadlineSpec) -> Callable[[Row], tuple[Any, ...]]:
    sfs = [repr(float(s)) for s in spec.stringency]
    fractions = [repr(float(f)) for f in spec.fractions]
    strategies = ["base", *spec.strategies]

    def index(values: list[str], v: str) -> int:
        return values.index(v) if v in values else len(values)

    def key(row: Row) -> tuple[Any, ...]:
        return (
            index(sfs, row["stringency"]), row["stringency"],
            index(fractions, row["fraction"]), row["fraction"], int(row["round"]),
            index(strategies, row["strategy"]), row["strategy"],
        )  # fmt: skip

    return key


def run_deadline(
    spec: DeadlineSpec,
    out: Path,
    results: Path,
    workers: int | DaskCluster,
    progress: Progress | None,
) -> ExperimentResult:
    """Run the rows of ``spec`` not yet in ``results``; summarise and plot them all."""
    from elasticsite.sim import figures

    header = [*DEADLINE_KEY, *DEADLINE_METRICS]
    rows = read_rows(results, header)
    check_rounds(spec)
    known = {tuple(r[k] for k in DEADLINE_KEY) for r in rows}
    tasks: list[_Task] = []
    total = 0
    for sf in spec.stringency:
        for fraction in spec.fractions:
            for r in range(spec.rounds):
                k = (repr(float(sf)), repr(float(fraction)), str(r))
                missing = tuple(s for s in spec.strategies if (*k, s) not in known)
                with_base = (*k, "base") not in known
                if missing or with_base:
                    tasks.append(_Task(spec, float(sf), float(fraction), r, missing, with_base))
                    total += len(missing) + with_base
    computed = execute(tasks, _task, workers, results, header, total, progress)
    wanted = {
        (repr(float(sf)), repr(float(f)), str(r), s)
        for sf in spec.stringency
        for f in spec.fractions
        for r in range(spec.rounds)
        for s in ("base", *spec.strategies)
    }
    summary = out / SUMMARY
    mine, summary_rows = summarise(
        results, DEADLINE_KEY, DEADLINE_METRICS, order=_order(spec), wanted=wanted,
        group=("stringency", "fraction", "strategy"), summary=summary,
    )  # fmt: skip
    plots = figures.deadline_plots(out, spec.name, spec.strategies, summary_rows)
    return ExperimentResult(
        spec, out, results, summary, None, tuple(plots), computed, len(mine) - computed, {}
    )
