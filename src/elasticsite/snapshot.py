"""What a policy sees: one instant of the site, with the queue's demand precomputed.

A :class:`SiteSnapshot` is built once per evaluation by the live manager and by the
simulator alike; its whole-queue aggregates cost one pass, and demand per attribute
or per selector is computed on first use and kept for the snapshot's life.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from elasticsite.attributes import EMPTY as EMPTY_ATTRIBUTES
from elasticsite.attributes import Selector
from elasticsite.model import CloudSpec, Job, Worker, WorkerState

_PLAIN = ("plain",)
_CORE_LIST = ("cores",)


def _aggregates(queued: Sequence[Job]) -> tuple[float, list[int], int | None]:
    """The queue's walltime, each job's cores, and the most cores a job asks for when no
    job carries attributes (0 for an empty queue; None when some job does), in one pass:
    reading a slotted job's fields in a Python loop costs less than a pass in C per
    aggregate (``map`` with ``attrgetter``) at 100,000 jobs."""
    walltime: float = 0
    cores: list[int] = []
    add = cores.append
    empty = EMPTY_ATTRIBUTES
    plain = not queued or queued[0].attributes is empty
    for job in queued:
        walltime += job.walltime
        add(job.cores)
        if plain and (a := job.attributes) is not empty and a != empty:
            plain = False  # (a batch system that gives every job some: only the first)
    return float(walltime), cores, max(cores, default=0) if plain else None


@dataclass(frozen=True, slots=True)
class Demand:
    """Queued work of one group of jobs: how many, their cores and requested walltime."""

    jobs: int = 0
    cores: int = 0
    walltime: float = 0.0

    def __add__(self, other: Demand) -> Demand:
        return Demand(
            self.jobs + other.jobs, self.cores + other.cores, self.walltime + other.walltime
        )


@dataclass(slots=True)
class SiteSnapshot:
    """Everything a policy may look at, taken at one instant ``now``.

    ``queued`` holds the waiting jobs in the batch system's priority order. The
    whole queue's aggregates are computed once here so every policy reads them in
    O(1); per-group demand (:meth:`demand`, :meth:`demand_of`, :meth:`served`) is
    computed on first use and kept for the snapshot's life.
    """

    now: float
    queued: Sequence[Job]
    running: Sequence[Job]
    workers: Sequence[Worker]
    clouds: Sequence[CloudSpec]
    site_cores: int = 0
    """Cores of the site's own nodes that are up (every node no worker holds)."""
    closed: frozenset[str] = frozenset()
    """Clouds that take no launch now (cooling down after a refusal, blocked until an
    operator fixes them, or protected after repeated boot failures)."""
    held: Sequence[Job] = ()
    """Queued jobs this site holds (Cloud Scheduler's fair share), not in ``queued``."""
    spent_in_period: float = 0.0
    """Money already billed in the budget's current period (``PolicySettings.budget``),
    by every worker finished or live, as the driver's ledger counts it at ``now``."""
    queued_walltime: float = field(init=False)
    queued_cores: int = field(init=False)
    waiting: Sequence[Job] = field(init=False, repr=False, compare=False)
    """Every queued job in queue order, ``queued`` or not: the policy is shown only the
    jobs the clouds could serve (:mod:`elasticsite.feasibility`), and a policy modelling
    the site's own queue (redirection) needs the rest too."""
    _groups: dict[object, object] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.waiting = self.queued
        walltime, cores, top = _aggregates(self.queued)
        self.queued_walltime = walltime
        self.queued_cores = sum(cores)
        self._groups = {_CORE_LIST: cores, _PLAIN: (top,)}  # cores kept: the queue's shape

    def with_workers(self, workers: Sequence[Worker]) -> SiteSnapshot:
        """The same instant with another set of workers (aggregates are reused, not recounted)."""
        view = object.__new__(SiteSnapshot)
        view.now = self.now
        view.queued = self.queued
        view.running = self.running
        view.workers = workers
        view.clouds = self.clouds
        view.site_cores = self.site_cores
        view.closed = self.closed
        view.held = self.held
        view.spent_in_period = self.spent_in_period
        view.queued_walltime = self.queued_walltime
        view.queued_cores = self.queued_cores
        view.waiting = self.waiting
        view._groups = self._groups
        return view

    def with_queue(self, queued: Sequence[Job]) -> SiteSnapshot:
        """The same instant with another queue (its aggregates counted again)."""
        if queued is self.queued:
            return self
        view = self.with_workers(self.workers)
        view.queued = queued
        view.queued_walltime, cores, top = _aggregates(queued)
        view.queued_cores = sum(cores)
        view._groups = {_CORE_LIST: cores, _PLAIN: (top,)}
        return view

    def queue_cores(self) -> list[int]:
        """Each queued job's cores, in queue order."""
        return self._groups[_CORE_LIST]  # type: ignore[return-value]

    def plain_cores(self) -> int | None:
        """The most cores a queued job asks for when no queued job carries attributes
        (0 for an empty queue); None when some job does. Counted with the queue's
        other aggregates, in the same pass."""
        return self._groups[_PLAIN][0]  # type: ignore[index]

    @property
    def queued_demand(self) -> Demand:
        """The whole queue as one :class:`Demand`."""
        return Demand(len(self.queued), self.queued_cores, self.queued_walltime)

    def demand(self, by: str) -> Mapping[str, Demand]:
        """Queued demand per value of the job attribute ``by`` (``"partition"``,
        ``"vm_type"`` ...); jobs without it count under ``""``.

        A job with several values (submitted to two partitions) counts under each, so
        the groups may add up to more than the queue.
        """
        cache_key = ("by", by)
        found = self._groups.get(cache_key)
        if found is None:
            jobs: dict[str, int] = {}
            cores: dict[str, int] = {}
            walltime: dict[str, float] = {}
            for job in self.queued:
                raw = job.attributes.get(by, "")
                for value in raw.split(",") if "," in raw else (raw,):
                    value = value.strip()
                    jobs[value] = jobs.get(value, 0) + 1
                    cores[value] = cores.get(value, 0) + job.cores
                    walltime[value] = walltime.get(value, 0.0) + job.walltime
            found = {v: Demand(jobs[v], cores[v], walltime[v]) for v in jobs}
            self._groups[cache_key] = found
        return found  # type: ignore[return-value]

    def demand_of(self, selector: Selector) -> Demand:
        """Queued demand of the jobs ``selector`` matches (the whole queue if it is empty)."""
        if not selector:
            return self.queued_demand
        found = self._groups.get(selector)
        if found is None:
            jobs = cores = 0
            walltime = 0.0
            matches = selector.matches
            for job in self.queued:
                if matches(job.attributes):
                    jobs += 1
                    cores += job.cores
                    walltime += job.walltime
            found = Demand(jobs, cores, walltime)
            self._groups[selector] = found
        return found  # type: ignore[return-value]

    def served(self, cloud: CloudSpec | str) -> Demand:
        """Queued demand a cloud's workers can serve (its ``serves`` selector)."""
        spec = self.cloud(cloud) if isinstance(cloud, str) else cloud
        return self.demand_of(spec.serves)

    def queued_matching(self, selector: Selector) -> list[Job]:
        """The queued jobs ``selector`` matches, in queue order."""
        if not selector:
            return list(self.queued)
        return [job for job in self.queued if selector.matches(job.attributes)]

    def live_workers(self) -> list[Worker]:
        return [w for w in self.workers if w.state.live]

    def by_state(self, *states: WorkerState) -> list[Worker]:
        wanted = set(states)
        return [w for w in self.workers if w.state in wanted]

    def cloud(self, name: str) -> CloudSpec:
        for spec in self.clouds:
            if spec.name == name:
                return spec
        raise KeyError(f"no cloud named {name!r} in this snapshot")
