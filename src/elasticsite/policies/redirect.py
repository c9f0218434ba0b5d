"""Paper 002's redirection strategies as live policies: which queued jobs burst to the cloud.

``naive``, ``shortest_queue``, ``weighted_queue``, ``selective`` and
``selective_global`` decide, like the
replay's strategy sets (:mod:`elasticsite.policies.strategies`, the same code), which of
the site's waiting jobs go to the cloud, and return them as
:class:`~elasticsite.model.Redirect`\\ s to ``redirect_to``, the partition (or queue)
the cloud workers serve. The workers for the jobs bound to the cloud (those already in
that partition, and those redirected now) are sized by the policy named ``provision``
(``on_demand`` by default), run on a snapshot holding only those jobs. Both are
:class:`RedirectOptions`, read from ``settings.options``.

Each step rebuilds the two pools the strategies reason on from the snapshot:

* the site: ``snapshot.site_cores`` processors, its running jobs (those on no
  worker's node) until their requested end, its queued jobs (every queued job not
  in ``redirect_to``) in queue order, back-dated to their submission;
* the cloud: the VM cores of every cloud serving the target, with the jobs running
  on workers and those queued in ``redirect_to``. A job's time there is its
  requested time plus the longest boot estimate, as in the replay.

Then arrivals are placed (Naive's rule, for every site job still waiting: the live
queue has no "arrival" to wait for, so a job the cloud could not take yesterday may
go today), both pools start what they can, and the reacting strategies redirect.
Where the live site differs from the paper's model:

* A job that can never run on the site (larger than its processors, or a site
  without nodes of its own) goes to the cloud whenever it fits there.
* ``selective`` is Selective-Differential-Adaptive, as in the replay: a threshold
  per job category, the categories from the options' ``params["selective_categories"]``
  (``{runtime_cuts = [3600], width_cuts = [8]}`` by default: seconds of walltime
  and cores). A pool rebuilt each step has no completed job to learn from, so every
  category's threshold is 1 unless ``params["selective_threshold"]`` sets them: one
  number for all, or one per category in category order (runtime band first, e.g.
  ``run<=3600s w<=8``, ``run<=3600s w>8``, ``run>3600s w<=8``, ``run>3600s w>8``).
  ``selective_global`` is the same with one category.

Pure: the snapshot in, a Decision out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from elasticsite.attributes import PARTITION, Selector
from elasticsite.batch.pools import BackfillPool, EasyPool, Key, make_pool
from elasticsite.batch.selective import Categories
from elasticsite.model import Decision, Job, Redirect
from elasticsite.plugins import PluginOptions
from elasticsite.policies.base import Decide, PolicySettings, get, options_of, register
from elasticsite.policies.strategies import (
    Naive,
    Selective,
    SelectiveGlobal,
    ShortestQueue,
    Strategy,
    WeightedQueue,
)
from elasticsite.snapshot import SiteSnapshot

__all__ = [
    "REDIRECTING",
    "RedirectOptions",
    "plan_redirects",
    "redirect_target",
    "selective_categories",
    "selective_thresholds",
]

Pool = EasyPool | BackfillPool


def selective_categories(params: Mapping[str, Any]) -> Categories:
    """The job categories ``params["selective_categories"]`` gives ``selective`` (the
    default four without it); ``ValueError`` naming the key when it is malformed."""
    raw = params.get("selective_categories")
    if raw is None:
        return Categories()
    if not isinstance(raw, Mapping) or set(raw) - {"runtime_cuts", "width_cuts"}:
        raise ValueError(
            "selective_categories: give a table with runtime_cuts (seconds) and "
            f"width_cuts (cores), e.g. {{runtime_cuts = [3600], width_cuts = [8]}}; got {raw!r}"
        )
    try:
        return Categories(
            tuple(_number(c) for c in raw.get("runtime_cuts", [3600.0])),
            tuple(_whole(c) for c in raw.get("width_cuts", [8])),
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"selective_categories: {exc}") from None


def selective_thresholds(params: Mapping[str, Any], categories: Categories) -> list[float] | None:
    """The thresholds ``params["selective_threshold"]`` sets, one per category (``None``:
    none set); ``ValueError`` naming the key when it is malformed."""
    set_to = params.get("selective_threshold")
    if set_to is None:
        return None
    values = set_to if isinstance(set_to, list) else [set_to] * len(categories)
    if len(values) != len(categories) or not all(_number(v, strict=False) >= 1 for v in values):
        raise ValueError(
            "selective_threshold: give one number >= 1, or one per category in this "
            f"order: {', '.join(categories.labels())}; got {set_to!r}"
        )
    return [float(v) for v in values]


def _number(value: Any, strict: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        if not strict:
            return -math.inf
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValueError(f"width cuts are whole cores, got {value!r}")
    return int(value)


class _Thresholds:
    """A site pool whose selective thresholds are set per category, not learnt."""

    def __init__(self, pool: Pool, categories: Categories, thresholds: Sequence[float]) -> None:
        self._pool = pool
        self._categories = categories
        self._thresholds = thresholds

    def threshold_of(self, procs: int, requested: float) -> float:
        return self._thresholds[self._categories.of(procs, requested)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


@dataclass(eq=False)
class _Live:
    """The :class:`~elasticsite.policies.strategies.Context` of one live step: job ``i`` is
    ``jobs[i]``; redirections are recorded, not carried out."""

    jobs: Sequence[Job]
    site: Any
    cloud: Pool | None
    boot: float
    servable: Collection[str] | None = None
    """Ids of the jobs some cloud could run once redirected (None: every job)."""
    redirected: list[int] = field(default_factory=list, init=False)

    def procs(self, job: int) -> int:
        return self.jobs[job].cores

    def requested(self, job: int) -> float:
        return max(self.jobs[job].walltime, 1.0)  # a pool plans with a positive time

    def cloud_requested(self, job: int) -> float:
        return self.requested(job) + self.boot

    def deadline(self, job: int) -> float:
        return math.inf

    def key(self, job: int) -> Key | None:
        return None

    def fits_cloud(self, job: int) -> bool:
        return (
            self.cloud is not None
            and self.jobs[job].cores <= self.cloud.capacity
            and (self.servable is None or self.jobs[job].id in self.servable)
        )

    def to_site(self, job: int, now: float) -> None:
        j = self.jobs[job]
        self.site.submit(job, j.cores, self.requested(job), now)
        self.site.backdate(job, min(j.submitted_at, now))

    def to_cloud(self, job: int, now: float) -> None:
        assert self.cloud is not None
        self.cloud.submit(job, self.jobs[job].cores, self.cloud_requested(job), now)
        self.redirected.append(job)

    def redirect(self, job: int, now: float) -> None:
        self.site.remove(job, now)
        self.to_cloud(job, now)

    def reject(self, job: int, now: float) -> None:
        """Live jobs are never rejected here: the job stays where it is."""

    def start_cloud(self, now: float) -> None:
        if self.cloud is not None:
            self.cloud.start_now(now)


def _occupy(pool: Pool, jobs: Sequence[tuple[int, Job]], now: float) -> None:
    """Start ``jobs`` (running in the batch system) in ``pool`` until their requested end."""
    for i, job in jobs:
        end = (job.started_at if job.started_at is not None else now) + job.walltime
        pool.submit(i, job.cores, max(end - now, 1.0), now)
    if jobs:
        pool.start_now(now)


def plan_redirects(
    snapshot: SiteSnapshot, strategy: Strategy, settings: PolicySettings
) -> list[Job]:
    """The queued jobs ``strategy`` sends to the cloud now, in the order it chose them."""
    own = options_of(settings, RedirectOptions)
    target = own.redirect_to
    now = snapshot.now
    bound = Selector.of({PARTITION: [target]})
    serving = [c for c in snapshot.clouds if not c.serves or c.serves.matches({PARTITION: target})]
    cloud_cores = sum(c.max_instances * c.default_vm.cores for c in serving)
    if cloud_cores <= 0:
        return []
    # The site's own queue holds every waiting job; only those some cloud could run once
    # redirected (the snapshot's ``queued``) may go.
    jobs: list[Job] = [*snapshot.running, *snapshot.waiting]
    servable = None if snapshot.waiting is snapshot.queued else {j.id for j in snapshot.queued}
    on_workers = {w.node for w in snapshot.workers}
    site_running: list[tuple[int, Job]] = []
    cloud_running: list[tuple[int, Job]] = []
    for i, job in enumerate(snapshot.running):
        (cloud_running if job.node in on_workers else site_running).append((i, job))
    first = len(snapshot.running)
    site_queued: list[int] = []
    cloud_queued: list[int] = []
    for i, job in enumerate(snapshot.waiting, first):
        (cloud_queued if bound.matches(job.attributes) else site_queued).append(i)

    cloud = make_pool(strategy.cloud_scheduler or "easy", max(cloud_cores, _cores(cloud_running)))
    boot = max((c.boot_time for c in serving), default=0.0)
    _occupy(cloud, cloud_running, now)
    ctx = _Live(jobs, None, cloud, boot, servable)
    for i in cloud_queued:
        if ctx.fits_cloud(i):
            cloud.submit(i, jobs[i].cores, ctx.cloud_requested(i), now)
            cloud.backdate(i, min(jobs[i].submitted_at, now))

    site_cores = snapshot.site_cores
    runnable = [i for i in site_queued if jobs[i].cores <= site_cores]
    stranded = [i for i in site_queued if jobs[i].cores > site_cores]
    for i in stranded:  # no site node can ever run it
        if ctx.fits_cloud(i):
            ctx.to_cloud(i, now)
    if site_cores <= 0 or not runnable:
        return [jobs[i] for i in ctx.redirected]

    site_pool = strategy.make_site(max(site_cores, _cores(site_running)))
    _occupy(site_pool, site_running, now)
    ctx.site = site_pool
    if isinstance(strategy, Selective):
        thresholds = selective_thresholds(own.params, strategy.categories)
        if thresholds is not None:
            ctx.site = _Thresholds(site_pool, strategy.categories, thresholds)
    for i in runnable:
        strategy.on_arrival(ctx, i, now)
    site_pool.start_now(now)
    ctx.start_cloud(now)
    if strategy.reacts:
        strategy.on_change(ctx, now)
    return [jobs[i] for i in ctx.redirected]


def _cores(jobs: Sequence[tuple[int, Job]]) -> int:
    return sum(job.cores for _, job in jobs)


def _policy(make: Callable[[], Strategy]) -> Decide:
    def decide(snapshot: SiteSnapshot, settings: PolicySettings) -> Decision:
        own = options_of(settings, RedirectOptions)
        provision = get(own.provision)
        if provision.redirects:
            raise ValueError(
                f"policy.provision = {own.provision!r} redirects jobs itself; "
                "name a provisioning policy (on_demand, bursts, ...)"
            )
        strategy = make()
        if isinstance(strategy, Selective) and not isinstance(strategy, SelectiveGlobal):
            strategy = Selective(selective_categories(own.params))
        chosen = plan_redirects(snapshot, strategy, settings)
        target = own.redirect_to
        bound = Selector.of({PARTITION: [target]})
        moved = {job.id for job in chosen}
        # A job sent to the cloud is sized there as it will be: in the target partition.
        cloud_queue = [
            replace(job, attributes={**job.attributes, PARTITION: target})
            if job.id in moved
            else job
            for job in snapshot.queued
            if job.id in moved or bound.matches(job.attributes)
        ]
        on_workers = {w.node for w in snapshot.workers}
        cloud_view = SiteSnapshot(
            snapshot.now,
            cloud_queue,
            [job for job in snapshot.running if job.node in on_workers],
            snapshot.workers,
            snapshot.clouds,
        )
        cloud_view.closed = snapshot.closed
        decision = provision(cloud_view, settings)
        decision.redirect.extend(Redirect(job.id, target) for job in chosen)
        return decision

    decide.__doc__ = f"{_SUMMARY[make.__name__]} (paper 002)."
    return decide


_SUMMARY = {
    "Naive": "Naive: a job the site cannot start now goes to a cloud that can",
    "ShortestQueue": "Shortest queue: move waiting jobs while the cloud's queue is shorter",
    "WeightedQueue": "Weighted queue: fill the cloud up to the site's demand",
    "Selective": "Selective: move jobs waiting past their category's threshold that start "
    "sooner there",
    "SelectiveGlobal": "Selective with one threshold: move jobs waiting past it that start "
    "sooner there",
}


REDIRECTING: dict[str, Callable[[], Strategy]] = {
    "naive": Naive,
    "shortest_queue": ShortestQueue,
    "weighted_queue": WeightedQueue,
    "selective": Selective,
    "selective_global": SelectiveGlobal,
}
"""The redirection strategies that run live, by policy name."""


class RedirectOptions(PluginOptions):
    """What the redirecting policies read in ``[policy]``: the partition the cloud
    workers serve, the policy that sizes them, and ``selective``'s categories and
    thresholds in ``params`` (checked here, before any step runs: against the one
    category of ``selective_global`` when the validation context's ``policy`` names it)."""

    redirect_to: str = Field("cloud", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    provision: str = "on_demand"
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("params")
    @classmethod
    def _selective(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        policy = (info.context or {}).get("policy") or {}
        categories = selective_categories(value)
        if policy.get("name") == "selective_global":
            categories = Categories.single()
        selective_thresholds(value, categories)
        return value


def redirect_target(settings: PolicySettings) -> str:
    """The partition a redirecting policy deciding with ``settings`` sends jobs to."""
    return options_of(settings, RedirectOptions).redirect_to


for _name, _make in REDIRECTING.items():
    register(_name, options=RedirectOptions, redirects=True)(_policy(_make))
