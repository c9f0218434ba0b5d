"""Paper 002's strategy sets: which scheduler runs the site and the cloud, and what to redirect.

A strategy set names the site's and the cloud's schedulers (:mod:`.pools`) and has
two hooks the replay (:mod:`.replay`) calls: :meth:`Strategy.on_arrival`, which
places each arriving job (site, cloud or rejected), and, for strategies that
redirect "as each job arrives or completes", :meth:`Strategy.on_change`, called
once per instant with arrivals or completions, after both pools started what
they could. Jobs arriving or ending at the same instant are therefore handled
together, after all of them are in.

Choices where paper 002 is vague, each tested:

* A pool's *queue ratio* is the processors (VMs) asked for by its waiting jobs
  over its capacity (site processors, cloud VM limit); "processors available"
  read as free-now processors would divide by zero on a full site.
* Redirection walks the site's waiting jobs in queue order (the head first).
* A job larger than the cloud's VM limit is never redirected.
* Weighted Queue's "redirect until num_vms is reached" counts the VMs already in
  execution on the cloud towards ``num_vms``.
* A deadline is met when the planned end (start plus requested time, plus the
  longest boot on the cloud) is no later than it. The deadline-aware sets can
  reject instead of placing a job whose deadline is met nowhere (``reject=True``).
* The paper names no cloud scheduler for Shortest Queue, Weighted Queue and
  Selective: the first two run the site's (EASY), Selective runs conservative
  backfilling on the cloud, since it "makes a reservation" there.
* ``selective`` is the Selective-Differential-Adaptive scheme the paper says it
  uses: one adaptive threshold per job category (default: requested time <= / > 1 h
  x width <= / > 8 VMs). ``selective_global`` keeps one threshold for all jobs.
* Best-effort jobs (no deadline) stay on the site in the deadline-aware sets, but
  under Aggressive their arrival is still checked not to break others' deadlines.

Strategies are registered by name in :data:`STRATEGIES`; :func:`get_strategy` builds one.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar, Protocol

from elasticsite.batch.backfill import edf_key
from elasticsite.batch.pools import BackfillPool, EasyPool, Key, Pool, make_pool
from elasticsite.batch.selective import DEFAULT_CATEGORIES, Categories

__all__ = [
    "STRATEGIES",
    "Aggressive",
    "Base",
    "Conservative",
    "Context",
    "Naive",
    "Selective",
    "SelectiveGlobal",
    "ShortestQueue",
    "Strategy",
    "WeightedQueue",
    "edf",
    "get_strategy",
]


class Context(Protocol):
    """What a strategy sees of a replay and may do with its jobs (ids index the trace)."""

    @property
    def site(self) -> Pool: ...
    @property
    def cloud(self) -> Pool | None: ...

    def procs(self, job: int) -> int: ...
    def requested(self, job: int) -> float:
        """The job's planned duration on the site (its requested time)."""
        ...

    def cloud_requested(self, job: int) -> float:
        """The job's planned duration on the cloud (requested time plus the longest boot)."""
        ...

    def deadline(self, job: int) -> float:
        """Absolute deadline, ``inf`` for a best-effort job."""
        ...

    def key(self, job: int) -> Key | None:
        """Queue-order key of a job (EDF for strategies that ask for it)."""
        ...

    def fits_cloud(self, job: int) -> bool: ...
    def to_site(self, job: int, now: float) -> None: ...
    def to_cloud(self, job: int, now: float) -> None: ...
    @abstractmethod
    def redirect(self, job: int, now: float) -> None:
        """Move a job waiting on the site to the cloud's queue."""

    def reject(self, job: int, now: float) -> None: ...
    def start_cloud(self, now: float) -> None:
        """Let the cloud's scheduler start what it can now."""


class Strategy:
    """A strategy set; the default places every job on the site and never redirects."""

    name: ClassVar[str] = "base"
    site_scheduler: ClassVar[str] = "easy"
    cloud_scheduler: ClassVar[str | None] = None
    edf: ClassVar[bool] = False
    reacts: ClassVar[bool] = False
    """Whether :meth:`on_change` runs at every instant with arrivals or completions."""

    def on_arrival(self, ctx: Context, job: int, now: float) -> None:
        """Place an arriving job; the default queues it at the site."""
        ctx.to_site(job, now)

    def on_change(self, ctx: Context, now: float) -> None:
        """Redirect waiting jobs after an instant's arrivals and completions."""

    def make_site(self, capacity: int) -> EasyPool | BackfillPool:
        """The site's pool of ``capacity`` processors, run by :attr:`site_scheduler`."""
        return make_pool(self.site_scheduler, capacity)


class Base(Strategy):
    """Site only: FCFS with aggressive (EASY) backfilling, no cloud."""


class Naive(Strategy):
    """Conservative backfilling on both; an arriving job the site cannot start at once
    goes to the cloud if it can start there at once, else waits at the site."""

    name = "naive"
    site_scheduler = "conservative"
    cloud_scheduler = "conservative"

    def on_arrival(self, ctx: Context, job: int, now: float) -> None:
        cloud = ctx.cloud
        procs = ctx.procs(job)
        if (
            cloud is not None
            and ctx.fits_cloud(job)
            and ctx.site.earliest_start(procs, ctx.requested(job), now) > now
            and cloud.earliest_start(procs, ctx.cloud_requested(job), now) <= now
        ):
            ctx.to_cloud(job, now)
        else:
            ctx.to_site(job, now)


def _ratio(pool: Pool) -> float:
    return pool.demand / pool.capacity


def _same_ratio(a: Pool, b: Pool) -> bool:
    """Whether two pools' queue ratios are equal, in exact integer arithmetic.

    Demands and capacities are whole processors, so ``a.demand / a.capacity ==
    b.demand / b.capacity`` is the cross product equality below, with no rounding.
    A float tolerance would have to be below ``1 / (a.capacity * b.capacity)``, the
    smallest gap between two distinct such ratios, to never call them equal; the
    exact test is that tolerance's limit, and also never calls equal ratios different.
    """
    return a.demand * b.capacity == b.demand * a.capacity


class _Redirecting(Strategy, ABC):
    """A strategy set that, after each instant's arrivals and completions, moves waiting
    site jobs to the cloud (:meth:`redirect`); without a cloud nothing moves."""

    reacts = True

    def on_change(self, ctx: Context, now: float) -> None:
        cloud = ctx.cloud
        if cloud is not None:
            self.redirect(ctx, ctx.site, cloud, now)

    def redirect(self, ctx: Context, site: Pool, cloud: Pool, now: float) -> None:
        """Redirect the waiting jobs of ``site`` this strategy set sends to ``cloud``."""


class ShortestQueue(_Redirecting):
    """EASY on both; while the cloud's queue ratio is below the site's, redirect the site's
    waiting jobs in queue order, letting the cloud start each before re-comparing.

    The ratios cross by at most one job: that is "until both ratios are similar".
    """

    name = "shortest_queue"
    cloud_scheduler = "easy"

    def redirect(self, ctx: Context, site: Pool, cloud: Pool, now: float) -> None:
        for job in site.waiting_ids():
            if _ratio(cloud) >= _ratio(site):
                break
            if ctx.fits_cloud(job):
                ctx.redirect(job, now)
                ctx.start_cloud(now)


class WeightedQueue(_Redirecting):
    """EASY on both; ``num_vms`` is the smaller of the site's waiting demand (VMs) and the
    cloud's VM limit, and waiting site jobs are redirected until the cloud's VMs (in
    execution, plus any queued there) would pass ``num_vms``.

    So a busy cloud takes nothing even when it has a VM or two free, unless the site's
    demand is large enough (the paper's "until num_vms is reached"). Jobs are taken in
    queue order; one that would pass ``num_vms`` is skipped and a smaller one behind it
    may still go.
    """

    name = "weighted_queue"
    cloud_scheduler = "easy"

    def redirect(self, ctx: Context, site: Pool, cloud: Pool, now: float) -> None:
        in_use = cloud.capacity - cloud.free_now(now) + cloud.demand
        budget = min(site.demand, cloud.capacity) - in_use
        for job in site.waiting_ids():
            if budget <= 0:
                break
            procs = ctx.procs(job)
            if procs <= budget and ctx.fits_cloud(job):
                ctx.redirect(job, now)
                budget -= procs
        ctx.start_cloud(now)


class Selective(_Redirecting):
    """Selective-Differential-Adaptive: selective backfilling on the site with an
    adaptive threshold per job category (:mod:`elasticsite.batch.selective`; by
    default requested time <= / > 1 h x width <= / > 8 VMs), conservative backfilling
    on the cloud.

    At each instant with arrivals or completions, once both pools started what they
    could, and only if the two queue ratios differ (compared exactly, see
    :func:`_same_ratio`), the site's waiting jobs are taken in queue order; one whose
    expansion factor ``(wait + requested) / requested`` exceeds its category's
    current threshold, and which fits the cloud, is redirected if its earliest cloud
    start (requested time plus the longest boot) is strictly before its site
    reservation, or before its earliest site slot if it holds none yet. A tie stays.
    """

    name = "selective"
    site_scheduler = "selective"
    cloud_scheduler = "conservative"

    def __init__(self, categories: Categories = DEFAULT_CATEGORIES) -> None:
        self.categories = categories

    def make_site(self, capacity: int) -> EasyPool | BackfillPool:
        return BackfillPool(capacity, selective=True, categories=self.categories)

    def redirect(self, ctx: Context, site: Pool, cloud: Pool, now: float) -> None:
        if _same_ratio(cloud, site):
            return
        threshold_of = getattr(site, "threshold_of", None)
        for job in site.waiting_ids():
            procs, requested, submitted = site.waiting_job(job)
            threshold = 1.0 if threshold_of is None else threshold_of(procs, requested)
            if (now - submitted + requested) / requested <= threshold or not ctx.fits_cloud(job):
                continue
            here = site.reservation(job)
            if here is None:
                here = site.earliest_start(procs, requested, now)
            if cloud.earliest_start(procs, ctx.cloud_requested(job), now) < here:
                ctx.redirect(job, now)


class SelectiveGlobal(Selective):
    """Selective with one global adaptive threshold (the mean bounded slowdown of every
    completed job): what ``selective`` was before the thresholds became per category.
    Kept to compare against, and for results made with it."""

    name = "selective_global"

    def __init__(self) -> None:
        super().__init__(Categories.single())


class Conservative(Strategy):
    """Deadline-aware, conservative backfilling on both. A job goes to the site if its
    deadline is met there (planned end by the deadline), else to the cloud if met there,
    else to whichever starts it earlier (the site only if strictly earlier).

    With ``reject=True`` a deadline job met nowhere is rejected instead.
    """

    name = "deadline_conservative"
    site_scheduler = "conservative"
    cloud_scheduler = "conservative"

    def __init__(self, reject: bool = False) -> None:
        self.reject = reject

    def on_arrival(self, ctx: Context, job: int, now: float) -> None:
        deadline = ctx.deadline(job)
        cloud = ctx.cloud
        if deadline == math.inf or cloud is None or not ctx.fits_cloud(job):
            ctx.to_site(job, now)
            return
        procs, requested = ctx.procs(job), ctx.requested(job)
        here = ctx.site.earliest_start(procs, requested, now)
        if here + requested <= deadline:
            ctx.to_site(job, now)
            return
        there = cloud.earliest_start(procs, ctx.cloud_requested(job), now)
        if there + ctx.cloud_requested(job) <= deadline:
            ctx.to_cloud(job, now)
        elif self.reject:
            ctx.reject(job, now)
        elif here < there:
            ctx.to_site(job, now)
        else:
            ctx.to_cloud(job, now)


def _breaks(
    ctx: Context, pool: EasyPool, job: int, duration: float, now: float
) -> tuple[bool, float]:
    """Whether queueing ``job`` on ``pool`` makes a met deadline (its own included) late,
    by EDF EASY tentative schedules with and without it; and its tentative start.

    The schedule with it is followed only until every job with a deadline (only those
    can be late) has started, or until ``job`` starts late; the one without it is built
    only when another job is late, and only until those have started.
    """
    deadline = ctx.deadline
    left = {j for j in pool.waiting_ids() if deadline(j) != math.inf}
    left.add(job)
    late: list[int] = []
    here = math.inf
    for j, start in pool.planned_starts(now, (job, ctx.procs(job), duration, ctx.key(job))):
        if j not in left:
            continue
        left.discard(j)
        if j == job:
            here = start
            if start + duration > deadline(job):
                return True, here
        elif start + pool.waiting_job(j)[1] > deadline(j):
            late.append(j)
        if not left:
            break
    if not late:
        return False, here
    before = pool.plan(now, wanted=late)
    broken = any(before[j] + pool.waiting_job(j)[1] <= deadline(j) for j in late)
    return broken, here


class Aggressive(Strategy):
    """Deadline-aware, EASY backfilling in Earliest Deadline First order on both. An
    arriving job stays on the site if the site's tentative schedule with it breaks no
    deadline that was met without it; else it goes to the cloud if the same holds
    there; else to whichever tentatively starts it earlier (the site only if strictly),
    as the paper says, even though EDF may then put it ahead of jobs whose deadlines
    it breaks.

    With ``reject=True`` a deadline job accepted by neither check is rejected instead
    (the paper's rejection experiment).
    """

    name = "deadline_aggressive"
    site_scheduler = "easy"
    cloud_scheduler = "easy"
    edf = True

    def __init__(self, reject: bool = False) -> None:
        self.reject = reject

    def on_arrival(self, ctx: Context, job: int, now: float) -> None:
        site, cloud = ctx.site, ctx.cloud
        if not isinstance(site, EasyPool):
            raise TypeError("the deadline-aware aggressive strategy needs EASY pools")
        broken, here = _breaks(ctx, site, job, ctx.requested(job), now)
        if not broken or cloud is None or not ctx.fits_cloud(job):
            if broken and self.reject and ctx.deadline(job) < math.inf:
                ctx.reject(job, now)
            else:
                ctx.to_site(job, now)
            return
        assert isinstance(cloud, EasyPool)
        broken_there, there = _breaks(ctx, cloud, job, ctx.cloud_requested(job), now)
        if not broken_there:
            ctx.to_cloud(job, now)
        elif self.reject and ctx.deadline(job) < math.inf:
            ctx.reject(job, now)
        elif here < there:
            ctx.to_site(job, now)
        else:
            ctx.to_cloud(job, now)


STRATEGIES: dict[str, Callable[[], Strategy]] = {
    "base": Base,
    "naive": Naive,
    "shortest_queue": ShortestQueue,
    "weighted_queue": WeightedQueue,
    "selective": Selective,
    "selective_global": SelectiveGlobal,
    "deadline_conservative": Conservative,
    "deadline_aggressive": Aggressive,
}
"""Strategy sets by name."""


def get_strategy(name: str) -> Strategy:
    """A fresh strategy set by name."""
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise ValueError(
            f"unknown strategy {name!r}; valid strategies: {', '.join(STRATEGIES)}"
        ) from None


def edf(deadline: float, submitted: float) -> Key:
    """EDF queue key of a job (``inf`` deadline for best-effort), for :attr:`Strategy.edf`."""
    return edf_key(None if deadline == math.inf else deadline, submitted)
