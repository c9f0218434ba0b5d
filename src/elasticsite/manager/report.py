"""What one step of the manager's loop saw and did: :class:`StepReport`.

The loop fills one per step; logs, progress displays, the Prometheus metrics
(:mod:`.exporter`), the dashboard's history and benchmarks read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from elasticsite.core import Command
from elasticsite.model import Decision, Transition, Worker, WorkerState
from elasticsite.snapshot import SiteSnapshot
from elasticsite.spend import Spent

__all__ = ["StepReport"]


@dataclass(slots=True)
class StepReport:
    """What one iteration saw and did, for logs, progress displays and benchmarks."""

    at: float
    queued: int = 0
    running: int = 0
    workers: dict[str, int] = field(default_factory=dict)
    decision: Decision = field(default_factory=Decision)
    sense_seconds: float = 0.0
    decide_seconds: float = 0.0
    total_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    """The worker transitions the step persisted, with their causes."""
    commands: list[Command] = field(default_factory=list)
    """The commands the step handed to the pool (launches, terminations, drains ...)."""
    worker_clouds: dict[str, str] = field(default_factory=dict)
    """The cloud of each worker that moved."""
    retried: list[str] = field(default_factory=list)
    """The cloud of each launch tried again after a failed attempt."""
    worker_counts: dict[tuple[str, str], int] = field(default_factory=dict)
    """Unfinished workers by (cloud, state) after the step."""
    snapshot: SiteSnapshot | None = None
    """What the step's decision was taken on (queue, running jobs, workers)."""
    spent: Callable[[], Spent] | None = None
    """What the site had spent when the step decided, per cloud and in the budget's
    period: counted when first called (a pass over the workers)."""
    forecast: Callable[[], float] | None = None
    """The budget period's forecast spend after the step's launches, counted when first
    called (None without a budget)."""
    unservable: Mapping[str, str] = field(default_factory=dict)
    """The queued jobs no cloud can run (job id -> why), as of the last decision."""
    unsensed: list[str] = field(default_factory=list)
    """Clouds not sensed this step (their describe failed or missed the deadline)."""

    def tally(self, workers: Iterable[Worker]) -> None:
        """Count ``workers`` by cloud and state (:attr:`worker_counts`) and by state
        (:attr:`workers`)."""
        # Run every step over every worker: a dict per cloud, keyed by the state itself.
        per_cloud: dict[str, dict[WorkerState, int]] = {}
        for w in workers:
            by = per_cloud.get(w.cloud)
            if by is None:
                by = per_cloud[w.cloud] = {}
            st = w.state
            by[st] = by.get(st, 0) + 1
        counts = self.worker_counts
        by_state: dict[str, int] = {}
        for cloud, by in per_cloud.items():
            for st, n in by.items():
                key = (cloud, st.value)
                counts[key] = counts.get(key, 0) + n
                by_state[key[1]] = by_state.get(key[1], 0) + n
        self.workers = by_state
