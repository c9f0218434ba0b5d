"""Selective backfilling with adaptive thresholds kept per job category.

A waiting job is reserved a slot only once its expansion factor
``(wait + requested) / requested`` exceeds its category's threshold; the other
waiting jobs start only where they delay no reservation. This is the
Selective-Differential-Adaptive scheme paper 002 names (after Srinivasan et al.):

* *differential*: jobs fall into categories (:class:`Categories`), by default
  requested time <= / > 1 h crossed with width <= / > 8 processors, four in all;
* *adaptive*: a category's threshold is the mean bounded slowdown of the jobs of
  that category completed so far, and at least 1.

Why per category: one global mean is dominated by the many short narrow jobs,
whose slowdowns are large; a long wide job then needs to wait a multiple of its
long requested time before it is protected, and meanwhile narrow jobs backfill
past it. With its own category's (lower) mean it is protected much sooner.

Choices, each tested:

* A job's category is set by its *requested* time (the only length known while it
  waits), and the slowdown it completes with counts towards that same category.
* A category with no completed job yet has threshold 1, so a job that has waited at
  all qualifies: starvation protection from the start, not unprotected aggressive
  backfilling until history exists.
* ``Categories.single()`` (no cuts) is the one global threshold of the plain
  selective scheme; the replay's ``selective_global`` strategy runs it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from elasticsite.batch.backfill import _INF, K, _Backfill, _Waiting

__all__ = ["DEFAULT_CATEGORIES", "Categories", "SelectiveBackfill"]


@dataclass(frozen=True, slots=True)
class Categories:
    """Job categories: requested-time bands crossed with width bands.

    ``runtime_cuts`` (seconds) and ``width_cuts`` (processors) are strictly
    ascending cut points; a job is in the band whose upper cut it does not exceed
    (``<=``), or in the last band past every cut. Categories are numbered runtime
    band first: ``runtime_band * (len(width_cuts) + 1) + width_band``.
    """

    runtime_cuts: tuple[float, ...] = (3600.0,)
    width_cuts: tuple[int, ...] = (8,)

    def __post_init__(self) -> None:
        for name, cuts in (("runtime_cuts", self.runtime_cuts), ("width_cuts", self.width_cuts)):
            if any(not c > 0 for c in cuts):
                raise ValueError(f"{name}: every cut must be > 0, got {list(cuts)}")
            if any(b <= a for a, b in pairwise(cuts)):
                raise ValueError(f"{name}: cuts must be strictly ascending, got {list(cuts)}")

    @classmethod
    def single(cls) -> Categories:
        """One category for every job: the single global threshold."""
        return cls((), ())

    def __len__(self) -> int:
        return (len(self.runtime_cuts) + 1) * (len(self.width_cuts) + 1)

    def of(self, procs: int, requested: float) -> int:
        """The category number of a job of ``procs`` processors and ``requested`` seconds."""
        return bisect_left(self.runtime_cuts, requested) * (len(self.width_cuts) + 1) + bisect_left(
            self.width_cuts, procs
        )

    def labels(self) -> list[str]:
        """One readable label per category, in category order (e.g. ``run<=3600s w>8``)."""
        return [
            f"{r} {w}"
            for r in _bands("run", self.runtime_cuts, "s")
            for w in _bands("w", self.width_cuts, "")
        ]


def _bands(name: str, cuts: Sequence[float], unit: str) -> list[str]:
    if not cuts:
        return [f"any {name}"]
    out = [f"{name}<={cuts[0]:g}{unit}"]
    out += [f"{a:g}{unit}<{name}<={b:g}{unit}" for a, b in pairwise(cuts)]
    out.append(f"{name}>{cuts[-1]:g}{unit}")
    return out


DEFAULT_CATEGORIES = Categories()
"""Requested time <= / > 1 h crossed with width <= / > 8 processors (VMs in a replay)."""


class SelectiveBackfill(_Backfill[K]):
    """Selective backfilling with an adaptive expansion-factor threshold per category.

    ``categories`` defaults to :meth:`Categories.single` (one global threshold);
    pass :data:`DEFAULT_CATEGORIES` (or your own) for Selective-Differential-Adaptive.
    ``bound`` is the runtime floor (seconds) of the bounded slowdown averaged for
    the thresholds, so that a few very short jobs that waited do not make them
    explode; ``bound=0`` averages the plain slowdown.
    """

    def __init__(
        self,
        capacity: int,
        start: float = 0.0,
        bound: float = 10.0,
        categories: Categories | None = None,
    ) -> None:
        super().__init__(capacity, start)
        self.bound = bound
        self.categories = Categories.single() if categories is None else categories
        n = len(self.categories)
        self._slowdown_sum = [0.0] * n
        self._completed = [0] * n
        self._category: dict[K, int] = {}  # of every queued or running job

    @property
    def thresholds(self) -> list[float]:
        """Each category's threshold: max(1, mean bounded slowdown of its completed jobs)."""
        return [self._threshold(c) for c in range(len(self._completed))]

    def _threshold(self, category: int) -> float:
        done = self._completed[category]
        return 1.0 if done == 0 else max(1.0, self._slowdown_sum[category] / done)

    def threshold_of(self, procs: int, requested: float) -> float:
        """The threshold a waiting job of ``procs`` processors for ``requested`` s must pass
        (its category's entry of :attr:`thresholds`, without building the others)."""
        return self._threshold(self.categories.of(procs, requested))

    def cancel(self, job_id: K, now: float) -> None:
        super().cancel(job_id, now)
        del self._category[job_id]

    def _on_submit(self, job_id: K, job: _Waiting, now: float) -> None:
        """Arrival only queues: promotion and backfilling happen in :meth:`start_now`."""
        self._category[job_id] = self.categories.of(job.procs, job.requested)

    def _on_complete(self, job_id: K, submitted: float, started: float, now: float) -> None:
        category = self._category.pop(job_id)
        floor = max(now - started, self.bound)
        if floor > 0:
            self._slowdown_sum[category] += max(1.0, (now - submitted) / floor)
            self._completed[category] += 1

    def start_now(self, now: float) -> list[K]:
        """Promote jobs past their threshold, start due reservations, then backfill the rest."""
        profile = self.profile
        profile.compact(now)
        margins = [t - 1.0 for t in self.thresholds]
        category = self._category
        unreserved = [(j, w) for j, w in self._ordered() if w.start == _INF]
        for job_id, job in unreserved:
            # XFactor > threshold  <=>  wait > (threshold - 1) * requested
            if now - job.submitted > margins[category[job_id]] * job.requested:
                self._reserve(job_id, job, profile.earliest(job.procs, job.requested, now))
        started = super().start_now(now)
        free_now = profile.free[0]
        running = self._running
        for job_id, job in unreserved:
            if free_now == 0:
                break
            if job.start != _INF or job.procs > free_now:
                continue
            if profile.earliest(job.procs, job.requested, now) == now:
                end = now + job.requested
                profile.reserve(now, end, job.procs)
                del self._waiting[job_id]
                running[job_id] = (job.procs, end, job.submitted, now)
                started.append(job_id)
                free_now -= job.procs
        return started
