"""One pool of processors behind one event-style scheduler interface, for the replays.

Paper 002's site and its cloud are each a single pool of ``capacity`` processors
(VMs on the cloud). A redirection strategy needs the same few things from either,
whatever scheduler runs it, so every pool answers one interface (:class:`Pool`):

* the event loop: ``submit``, ``finish``, ``start_now(now) -> [job ids]``;
* redirection: ``remove`` a waiting job, ``waiting_ids`` in priority order,
  ``demand`` (processors asked for by waiting jobs), ``free_now``;
* planning: ``earliest_start(procs, requested, now)`` and ``reservation``.

Schedulers by name (:data:`SCHEDULERS`): ``"fcfs"`` and ``"easy"`` (aggressive
backfilling) are written here in event style; ``"conservative"`` and
``"selective"`` wrap :mod:`elasticsite.batch.backfill`. Jobs are planned with their
requested time; a job's processors are taken back at its planned end at the
latest (the replay kills a job at its requested time). ``key`` orders waiting
jobs (lower first, e.g. :func:`~elasticsite.batch.backfill.edf_key`); without it
the order is arrival.

EASY keeps the queue and the running jobs sorted by planned end, so one pass is
the in-order prefix, one walk to the head's shadow time and a backfill scan that
stops when no processor is left. A pass after only arrivals at the queue's tail
checks just those arrivals: nothing else changed, and a job that could not
backfill before cannot now (time only moves its end closer to the shadow time
from the wrong side).
"""

from __future__ import annotations

import copy
import math
from bisect import bisect_left, insort
from collections.abc import Collection, Iterator
from itertools import compress, islice
from typing import Protocol

from elasticsite.batch.backfill import ConservativeBackfill
from elasticsite.batch.selective import Categories, SelectiveBackfill

__all__ = ["SCHEDULERS", "BackfillPool", "EasyPool", "Key", "Pool", "make_pool"]

Key = tuple[float, ...]
_INF = math.inf


class Pool(Protocol):
    """What replays and redirection strategies ask of one pool of processors."""

    capacity: int

    def submit(
        self, job_id: int, procs: int, requested: float, now: float, key: Key | None = None
    ) -> None:
        """Queue a job needing ``procs`` processors for up to ``requested`` seconds."""

    def finish(self, job_id: int, now: float) -> None:
        """A running job ended at ``now``."""

    def start_now(self, now: float) -> list[int]:
        """Jobs starting at ``now`` (they count as running from here on)."""
        ...

    def remove(self, job_id: int, now: float) -> None:
        """Take a waiting job out of the queue (to send it elsewhere)."""

    def waiting_ids(self) -> list[int]:
        """Waiting jobs in priority order."""
        ...

    def waiting_job(self, job_id: int) -> tuple[int, float, float]:
        """``(procs, requested, submitted)`` of a waiting job."""
        ...

    @property
    def demand(self) -> int:
        """Processors asked for by all waiting jobs."""
        ...

    @property
    def n_waiting(self) -> int:
        """How many jobs wait."""
        ...

    def free_now(self, now: float) -> int:
        """Processors neither running a job nor reserved from ``now`` on."""
        ...

    def earliest_start(self, procs: int, requested: float, now: float) -> float:
        """Estimated start of a job of this shape were it submitted now."""
        ...

    def reservation(self, job_id: int) -> float | None:
        """A waiting job's planned start, or ``None`` when it has none."""
        ...


def _check(job_id: int, procs: int, requested: float, capacity: int) -> None:
    if not 0 < procs <= capacity:
        raise ValueError(f"job {job_id} asks for {procs} processors; it needs 1..{capacity}")
    if not requested > 0:
        raise ValueError(f"job {job_id} has requested time {requested}; it must be > 0")


class _Waiting:
    """What every pool keeps of its waiting jobs: their shapes and their total demand."""

    _jobs: dict[int, tuple[int, float, float]]  # waiting: procs, requested, submitted
    _demand: int

    def waiting_job(self, job_id: int) -> tuple[int, float, float]:
        return self._jobs[job_id]

    def backdate(self, job_id: int, submitted: float) -> None:
        """A waiting job was submitted at ``submitted``, before it was queued here (a
        queue rebuilt from a live batch system): its wait counts from then."""
        procs, requested, _ = self._jobs[job_id]
        self._jobs[job_id] = (procs, requested, submitted)

    @property
    def demand(self) -> int:
        return self._demand


class EasyPool(_Waiting):
    """FCFS (``backfill=False``) or aggressive EASY backfilling over one pool, event style.

    The head job (first in priority order that does not fit) gets the earliest
    time enough processors free up as running jobs reach their planned ends (its
    *shadow time*); a later job starts now only if it fits now and ends by the
    shadow time or uses processors the head leaves spare then.
    """

    def __init__(self, capacity: int, *, backfill: bool = True) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be a positive number of processors, got {capacity}")
        self.capacity = capacity
        self.backfill = backfill
        self._free = capacity
        self._queue: list[int] = []
        self._qp: list[int] = []  # procs, parallel to _queue, for a C-level backfill filter
        self._keys: list[Key] = []  # parallel to _queue, kept only once a key was given
        self._keyed = False
        self._seq = 0
        self._jobs: dict[int, tuple[int, float, float]] = {}  # waiting: procs, requested, submit
        self._running: dict[int, tuple[int, float]] = {}  # procs, planned end
        self._ends: list[tuple[float, int, int]] = []  # (planned end, id, procs), sorted
        self._demand = 0
        self._checked = 0  # queue prefix whose last pass verdict still holds
        self._shadow = _INF
        self._extra = 0

    # -- events -----------------------------------------------------------------------
    def submit(
        self, job_id: int, procs: int, requested: float, now: float, key: Key | None = None
    ) -> None:
        """Queue a job; with a ``key`` it is placed by key (ties and keyless jobs by arrival)."""
        if job_id in self._jobs or job_id in self._running:
            raise ValueError(f"job {job_id} is already queued or running")
        _check(job_id, procs, requested, self.capacity)
        self._jobs[job_id] = (procs, requested, now)
        self._demand += procs
        self._seq += 1
        if key is None and not self._keyed:
            self._queue.append(job_id)
            self._qp.append(procs)
            return
        if not self._keyed:  # first key: give the earlier arrivals their arrival keys
            self._keyed = True
            self._keys = [(_INF, _INF, i) for i in range(len(self._queue))]
        order: Key = (_INF, _INF, self._seq) if key is None else (*key, _INF, self._seq)
        i = bisect_left(self._keys, order)
        self._keys.insert(i, order)
        self._queue.insert(i, job_id)
        self._qp.insert(i, procs)
        if i < self._checked:
            self._checked = 0

    def finish(self, job_id: int, now: float) -> None:
        """Free a running job's processors."""
        try:
            procs, end = self._running.pop(job_id)
        except KeyError:
            raise ValueError(f"job {job_id} is not running; finish only started jobs") from None
        ends = self._ends
        del ends[bisect_left(ends, (end, job_id, procs))]
        self._free += procs
        self._checked = 0

    def remove(self, job_id: int, now: float) -> None:
        """Take a waiting job out of the queue."""
        procs, _, _ = self._jobs.pop(job_id)
        self._demand -= procs
        i = self._queue.index(job_id)
        del self._queue[i]
        del self._qp[i]
        if self._keyed:
            del self._keys[i]
        self._checked = 0

    def start_now(self, now: float) -> list[int]:
        """One scheduling pass at ``now``: the in-order prefix, then backfill (EASY only)."""
        queue, jobs = self._queue, self._jobs
        if not queue:
            return []
        started: list[int] = []
        free = self._free
        begin = self._checked
        if begin == 0:
            n = 0
            for job_id in queue:  # in-order prefix: what FCFS starts
                procs = jobs[job_id][0]
                if procs > free:
                    break
                free -= procs
                self._run(job_id, now)
                started.append(job_id)
                n += 1
            if n:
                del queue[:n]
                del self._qp[:n]
                if self._keyed:
                    del self._keys[:n]
            if not queue:
                self._free = free
                return started
            head_procs = jobs[queue[0]][0]
            self._shadow, self._extra = self._shadow_of(head_procs, free)
            begin = 1
        if self.backfill and free > 0 and begin < len(queue):
            shadow, extra = self._shadow, self._extra
            picked: list[int] = []
            qp = self._qp
            # Only jobs no larger than the free processors can start: filtered in C.
            fitting = map(free.__ge__, islice(qp, begin, None))
            for i in compress(range(begin, len(queue)), fitting):
                procs = qp[i]
                if procs > free:
                    continue
                job_id = queue[i]
                requested = jobs[job_id][1]
                if now + requested <= shadow:
                    pass
                elif procs <= extra:
                    extra -= procs
                else:
                    continue
                free -= procs
                self._run(job_id, now)
                started.append(job_id)
                picked.append(i)
                if free == 0:
                    break
            self._extra = extra
            for i in reversed(picked):
                del queue[i]
                del qp[i]
                if self._keyed:
                    del self._keys[i]
        self._free = free
        self._checked = len(queue)
        return started

    def _run(self, job_id: int, now: float) -> None:
        procs, requested, _ = self._jobs.pop(job_id)
        self._demand -= procs
        end = now + requested
        self._running[job_id] = (procs, end)
        insort(self._ends, (end, job_id, procs))

    def _shadow_of(self, procs: int, free: int) -> tuple[float, int]:
        """Earliest planned time ``procs`` are free, and the processors spare at that time."""
        if procs <= free:
            return -_INF, free - procs
        ends = self._ends
        avail = free
        n = len(ends)
        k = 0
        while k < n:
            t = ends[k][0]
            while k < n and ends[k][0] == t:  # every job ending at t frees its processors
                avail += ends[k][2]
                k += 1
            if avail >= procs:
                return t, avail - procs
        return _INF, 0  # unreachable: procs <= capacity

    # -- queries ----------------------------------------------------------------------
    def waiting_ids(self) -> list[int]:
        return list(self._queue)

    @property
    def n_waiting(self) -> int:
        return len(self._queue)

    @property
    def running(self) -> dict[int, tuple[int, float]]:
        """Running jobs as ``(procs, planned end)``."""
        return dict(self._running)

    def free_now(self, now: float) -> int:
        return self._free

    def earliest_start(self, procs: int, requested: float, now: float) -> float:
        """When ``procs`` processors free up as running jobs end, ignoring the queue.

        This is :func:`elasticsite.batch.scheduling.reservation` on one node: what the
        job would get if it were the head of the queue.
        """
        shadow, _ = self._shadow_of(procs, self._free)
        return max(shadow, now)

    def reservation(self, job_id: int) -> float | None:
        """The head job's shadow time; other waiting jobs have no reservation under EASY."""
        if self._queue and self._queue[0] == job_id and self._checked:
            return self._shadow
        return None

    def plan(
        self,
        now: float,
        extra: tuple[int, int, float, Key | None] | None = None,
        wanted: Collection[int] | None = None,
    ) -> dict[int, float]:
        """Tentative start of every waiting job, and of ``extra = (id, procs, requested,
        key)`` as if submitted now: a copy of this pool run forward, every running and
        started job ending at its planned end. For the deadline-aware aggressive strategy.

        With ``wanted``, the run stops once those jobs have started: the starts it
        returns then cover them (and whatever started before), each the same as in the
        whole plan, since a start depends only on what happened before it.
        """
        starts: dict[int, float] = {}
        left = None if wanted is None else set(wanted)
        for job_id, t in self.planned_starts(now, extra):
            starts[job_id] = t
            if left is not None:
                left.discard(job_id)
                if not left:
                    break
        return starts

    def planned_starts(
        self, now: float, extra: tuple[int, int, float, Key | None] | None = None
    ) -> Iterator[tuple[int, float]]:
        """:meth:`plan`'s starts one at a time, ``(job, start)`` in the order the plan
        starts them, computed only as far as they are taken."""
        pool = copy.copy(self)
        pool._queue, pool._qp, pool._keys = list(self._queue), list(self._qp), list(self._keys)
        pool._jobs, pool._running = dict(self._jobs), dict(self._running)
        pool._ends = list(self._ends)
        if extra is not None:
            pool.submit(extra[0], extra[1], extra[2], now, extra[3])
        t = now
        while True:
            for job_id in pool.start_now(t):
                yield job_id, t
            if not pool._queue:
                return
            ends = pool._ends
            t = ends[0][0]
            while ends and ends[0][0] == t:
                pool.finish(ends[0][1], t)


class BackfillPool(_Waiting):
    """Conservative or selective backfilling (:mod:`elasticsite.batch.backfill`) as a pool.

    Removing a waiting job releases its reservation and compresses the others,
    as an early finish does. A selective pool keeps one threshold per job category
    of ``categories`` (default: one global threshold).
    """

    def __init__(
        self, capacity: int, *, selective: bool = False, categories: Categories | None = None
    ) -> None:
        self.capacity = capacity
        self.sched: ConservativeBackfill[int] | SelectiveBackfill[int] = (
            SelectiveBackfill(capacity, categories=categories)
            if selective
            else ConservativeBackfill(capacity)
        )
        self._jobs: dict[int, tuple[int, float, float]] = {}
        self._demand = 0

    def submit(
        self, job_id: int, procs: int, requested: float, now: float, key: Key | None = None
    ) -> None:
        _check(job_id, procs, requested, self.capacity)
        self.sched.submit(job_id, procs, requested, now, key)
        self._jobs[job_id] = (procs, requested, now)
        self._demand += procs

    def finish(self, job_id: int, now: float) -> None:
        self.sched.finish(job_id, now)

    def start_now(self, now: float) -> list[int]:
        started = self.sched.start_now(now)
        for job_id in started:
            self._demand -= self._jobs.pop(job_id)[0]
        return started

    def backdate(self, job_id: int, submitted: float) -> None:
        super().backdate(job_id, submitted)
        self.sched.backdate(job_id, submitted)

    def remove(self, job_id: int, now: float) -> None:
        self.sched.cancel(job_id, now)
        self._demand -= self._jobs.pop(job_id)[0]

    def waiting_ids(self) -> list[int]:
        return self.sched.waiting_order()

    @property
    def n_waiting(self) -> int:
        return self.sched.waiting

    def threshold_of(self, procs: int, requested: float) -> float:
        """Selective backfilling's expansion-factor threshold for a job of this size and
        requested time (its category's); 1 for conservative."""
        s = self.sched
        return s.threshold_of(procs, requested) if isinstance(s, SelectiveBackfill) else 1.0

    def free_now(self, now: float) -> int:
        self.sched.profile.compact(now)
        return self.sched.profile.free_at(now)

    def earliest_start(self, procs: int, requested: float, now: float) -> float:
        """Exact: the earliest slot in the availability profile (every reservation kept)."""
        self.sched.profile.compact(now)
        return self.sched.profile.earliest(procs, requested, now)

    def reservation(self, job_id: int) -> float | None:
        return self.sched.reservation(job_id)


SCHEDULERS = ("fcfs", "easy", "conservative", "selective")
"""Scheduler names :func:`make_pool` accepts."""


def make_pool(name: str, capacity: int) -> EasyPool | BackfillPool:
    """A pool of ``capacity`` processors run by the named scheduler."""
    if name == "fcfs":
        return EasyPool(capacity, backfill=False)
    if name == "easy":
        return EasyPool(capacity)
    if name == "conservative":
        return BackfillPool(capacity)
    if name == "selective":
        return BackfillPool(capacity, selective=True)
    raise ValueError(f"unknown scheduler {name!r}; valid schedulers: {', '.join(SCHEDULERS)}")
