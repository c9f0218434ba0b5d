"""What an experiment writes: its files' names, its rows' keys and metrics, its result.

Apart from :mod:`~elasticsite.sim.experiment`, which runs the kinds, so a kind run
elsewhere (:mod:`~elasticsite.sim.deadlines`) writes the same files without importing
the module that runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elasticsite.sim.specs import Spec

__all__ = [
    "ELASTIC_KEY",
    "ELASTIC_METRICS",
    "REPLAY_KEY",
    "REPLAY_METRICS",
    "RESULTS",
    "SUMMARY",
    "TABLE1",
    "TIMELINES",
    "ExperimentResult",
    "value_cell",
]

RESULTS = "results.csv"
SUMMARY = "summary.csv"
TABLE1 = "table1.csv"
TIMELINES = "timelines"


# -- result rows -------------------------------------------------------------------

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


def value_cell(value: float | None) -> str:
    """How a swept value is written in the CSVs (empty when nothing is swept)."""
    return "" if value is None else repr(float(value))


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
