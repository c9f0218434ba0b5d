"""Conservative and selective backfilling over one pool of processors, event by event.

Paper 002's site is one machine of ``capacity`` processors; a job needs ``procs``
of them for up to its *requested time* (planning) and ends after its *actual*
runtime (completion). Both schedulers keep an availability :class:`Profile` and
answer an event loop: ``submit(job_id, procs, requested_time, now)`` when a job
arrives, ``finish(job_id, now)`` when one ends, then ``start_now(now) -> [job_id]``
once the instant's events are in. Every future reservation begins where a planned
job ends, so a loop that wakes only at submits and finishes starts each job
exactly at its reservation (:meth:`~_Backfill.next_start` is there to check).
Jobs are taken to be killed at their requested time: a later finish frees nothing.

* :class:`ConservativeBackfill`: every job is reserved its earliest slot on
  arrival; when a job ends early, reservations are recomputed in priority order
  (compression), repeated until nothing moves, and only ever move earlier.
* :class:`~elasticsite.batch.selective.SelectiveBackfill` (its own module, on the
  same base): a waiting job is reserved only once its expansion factor exceeds
  an adaptive threshold kept per job category.

Priority is arrival order unless ``submit`` gets a ``key`` (lower first), e.g.
:func:`edf_key`; jobs without a key follow keyed ones. A key never delays a
reservation made; it orders compression and, for selective, promotion and backfill.

Cost, with ``S`` profile steps (about twice the running and reserved jobs) and
``Q`` waiting jobs: a slot search walks the steps it crosses, window checks being
C-level ``min`` over slices; reserve and release are a bisect and a slice rewrite;
compression is ``O(Q)`` mostly O(1) rejections per pass plus a search for each job
that may move; ``start_now`` is ``O(log Q)`` per due job, and selective adds an
``O(Q)`` promotion and backfill scan.
"""

from __future__ import annotations

import heapq
import math
from abc import ABC, abstractmethod
from bisect import bisect_left, bisect_right
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["ConservativeBackfill", "Profile", "edf_key"]

K = TypeVar("K", bound=Hashable)
Key = tuple[float, ...]
_INF = math.inf


def edf_key(deadline: float | None, submitted_at: float) -> tuple[float, float]:
    """Earliest-deadline-first sort key: by deadline, jobs without one last, ties by arrival.

    Usable as ``key=`` of :meth:`ConservativeBackfill.submit` and as a plain
    ``sorted`` key for the queue handed to :func:`elasticsite.batch.scheduling.easy`.
    """
    return (_INF if deadline is None else deadline, submitted_at)


class Profile:
    """Free processors over future time, a step function in two parallel sorted lists.

    ``free[i]`` are free on ``[times[i], times[i+1])``; the last step runs to infinity
    and equals ``capacity``. Updates merge equal neighbours, keeping the lists short.
    """

    __slots__ = ("capacity", "free", "times")

    def __init__(self, capacity: int, start: float = 0.0) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be a positive number of processors, got {capacity}")
        self.capacity = capacity
        self.times: list[float] = [start]
        self.free: list[int] = [capacity]

    def free_at(self, t: float) -> int:
        """Free processors at ``t``; a time before the profile's origin reads as the origin."""
        return self.free[max(bisect_right(self.times, t) - 1, 0)]

    def earliest(self, procs: int, duration: float, after: float, limit: float = _INF) -> float:
        """Earliest start ``>= after`` where ``procs`` stay free for ``duration``.

        The search gives up at ``limit`` and returns it when nothing earlier fits.
        """
        if procs > self.capacity:
            raise ValueError(f"a job of {procs} processors never fits in {self.capacity}")
        times, free = self.times, self.free
        i = bisect_right(times, after) - 1
        if i < 0:
            i, after = 0, times[0]
        start = after
        while True:
            if free[i] < procs:
                i += 1
                while free[i] < procs:  # the last step is full capacity, so this stops
                    i += 1
                start = times[i]
            if start >= limit:
                return limit
            j = bisect_left(times, start + duration, i + 1)
            if j == i + 1 or min(free[i + 1 : j]) >= procs:
                return start
            # Every start up to the last blocked step in the window still covers it.
            k = j - 1
            while free[k] >= procs:
                k -= 1
            i = k + 1  # k is blocked, so it is not the last (full) step: i is valid
            start = times[i]

    def reserve(self, start: float, end: float, procs: int) -> None:
        """Take ``procs`` on ``[start, end)``; raises rather than over-allocate."""
        self._add(start, end, -procs)

    def release(self, start: float, end: float, procs: int) -> None:
        """Give back ``procs`` on ``[start, end)``, e.g. the unused tail of an early finish."""
        self._add(start, end, procs)

    def compact(self, now: float) -> None:
        """Forget the steps wholly in the past, so searches start near ``now``."""
        times = self.times
        k = bisect_right(times, now) - 1
        if k > 0:
            del times[:k]
            del self.free[:k]
        if times[0] < now:
            times[0] = now

    def _add(self, start: float, end: float, delta: int) -> None:
        """Add ``delta`` free processors on ``[start, end)``; inlined splits, it is the hot path."""
        if end <= start:
            return
        times, free = self.times, self.free
        if start <= times[0]:
            i = 0
        else:
            i = bisect_left(times, start)
            if i == len(times) or times[i] != start:
                times.insert(i, start)
                free.insert(i, free[i - 1])
        j = bisect_left(times, end, i)
        if j == len(times) or times[j] != end:
            times.insert(j, end)
            free.insert(j, free[j - 1])
        steps = free[i:j]
        if (min(steps) + delta < 0) if delta < 0 else (max(steps) + delta > self.capacity):
            self._merge(j)
            self._merge(i)
            raise ValueError(
                f"changing [{start}, {end}) by {delta} processors leaves the profile outside "
                f"0..{self.capacity}; reservations and releases must match"
            )
        free[i:j] = [f + delta for f in steps]
        self._merge(j)
        self._merge(i)

    def _merge(self, k: int) -> None:
        """Drop breakpoint ``k`` if it no longer changes the free count."""
        free = self.free
        if 0 < k < len(free) and free[k] == free[k - 1]:
            del self.times[k]
            del free[k]


class _Waiting:
    """A queued job; ``start`` is its reservation, ``inf`` while it has none."""

    __slots__ = ("key", "procs", "requested", "start", "submitted")

    def __init__(self, procs: int, requested: float, submitted: float, key: Key) -> None:
        self.procs = procs
        self.requested = requested
        self.submitted = submitted
        self.key = key
        self.start = _INF


class _Backfill(ABC, Generic[K]):
    """What both schedulers share: the profile, the queue, due reservations, compression."""

    def __init__(self, capacity: int, start: float = 0.0) -> None:
        self.profile = Profile(capacity, start)
        self._waiting: dict[K, _Waiting] = {}
        self._running: dict[K, tuple[int, float, float, float]] = {}  # procs, end, submit, start
        self._due: list[tuple[float, int, K]] = []  # (reservation, seq, id), stale entries skipped
        self._seq = 0
        self._keyed = False  # True once any job came with its own key: order must be sorted

    def submit(
        self, job_id: K, procs: int, requested_time: float, now: float, key: Key | None = None
    ) -> None:
        """Queue a job; ``key`` orders it among waiting jobs (lower first), default arrival."""
        if job_id in self._waiting or job_id in self._running:
            raise ValueError(f"job {job_id!r} is already queued or running")
        if not 0 < procs <= self.profile.capacity:
            raise ValueError(
                f"job {job_id!r} asks for {procs} processors; it needs 1..{self.profile.capacity}"
            )
        if not requested_time > 0:
            raise ValueError(f"job {job_id!r} has requested time {requested_time}; it must be > 0")
        self._seq += 1
        if key is None:
            order: Key = (_INF, _INF, self._seq)
        else:
            order = (*key, _INF, self._seq)  # an equal key ties by arrival, before no-key jobs
            self._keyed = True
        job = _Waiting(procs, requested_time, now, order)
        self._waiting[job_id] = job
        self._on_submit(job_id, job, now)

    def finish(self, job_id: K, now: float) -> None:
        """A running job ended at ``now``; an early end frees its tail and compresses the plan."""
        try:
            procs, end, submitted, started = self._running.pop(job_id)
        except KeyError:
            raise ValueError(f"job {job_id!r} is not running; finish only started jobs") from None
        self._on_complete(job_id, submitted, started, now)
        if now < end:
            self.profile.release(now, end, procs)
            self.profile.compact(now)
            self._compress(now, end)

    def cancel(self, job_id: K, now: float) -> None:
        """Take a waiting job out (cancelled, or sent elsewhere); its reserved slot is given
        back and the plan compressed, as when a job ends early."""
        try:
            job = self._waiting.pop(job_id)
        except KeyError:
            raise ValueError(
                f"job {job_id!r} is not waiting; only queued jobs can be cancelled"
            ) from None
        if job.start != _INF:
            end = job.start + job.requested
            self.profile.release(job.start, end, job.procs)
            self.profile.compact(now)
            self._compress(now, end)

    def waiting_order(self) -> list[K]:
        """Waiting jobs in priority order."""
        return [job_id for job_id, _ in self._ordered()]

    def start_now(self, now: float) -> list[K]:
        """Jobs to start at ``now``, in the order they were granted; they count as running."""
        self.profile.compact(now)
        started: list[K] = []
        due, waiting, running = self._due, self._waiting, self._running
        while due and due[0][0] <= now:
            start, _, job_id = heapq.heappop(due)
            job = waiting.get(job_id)
            if job is None or job.start != start:
                continue  # started already, or its reservation moved
            del waiting[job_id]
            running[job_id] = (job.procs, start + job.requested, job.submitted, start)
            started.append(job_id)
        return started

    def next_start(self) -> float:
        """Earliest reservation not yet started (``inf`` if none): a wake-up for event loops."""
        due, waiting = self._due, self._waiting
        while due:
            start, _, job_id = due[0]
            job = waiting.get(job_id)
            if job is not None and job.start == start:
                return start
            heapq.heappop(due)
        return _INF

    def backdate(self, job_id: K, submitted: float) -> None:
        """Record that a waiting job was submitted at ``submitted`` (earlier than the
        ``now`` it was queued at here): its wait, and so selective's expansion factor,
        count from then. For a queue rebuilt from a live batch system."""
        self._waiting[job_id].submitted = submitted

    def reservation(self, job_id: K) -> float | None:
        """Reserved start of a waiting job, or ``None`` if it has no reservation."""
        job = self._waiting[job_id]
        return None if job.start == _INF else job.start

    def reservations(self) -> dict[K, float]:
        """Reserved start of every waiting job that has one."""
        return {j: w.start for j, w in self._waiting.items() if w.start != _INF}

    @property
    def waiting(self) -> int:
        """Number of queued jobs, reserved or not."""
        return len(self._waiting)

    @property
    def running(self) -> dict[K, tuple[int, float]]:
        """Running jobs as ``(procs, planned end)``."""
        return {j: (r[0], r[1]) for j, r in self._running.items()}

    def _reserve(self, job_id: K, job: _Waiting, start: float) -> None:
        self.profile.reserve(start, start + job.requested, job.procs)
        job.start = start
        self._seq += 1
        heapq.heappush(self._due, (start, self._seq, job_id))

    def _ordered(self) -> list[tuple[K, _Waiting]]:
        """Waiting jobs in priority order (dict order is arrival order when no key was given)."""
        items = list(self._waiting.items())
        if self._keyed:
            items.sort(key=lambda item: item[1].key)
        return items

    def _compress(self, now: float, opened_to: float) -> None:
        """Move reservations to their earliest slots, in priority order; none moves later.

        A later job moving up can open room for an earlier one, so passes repeat
        until none moves. Then each reservation is at its earliest given all the
        others (so it begins where a job ends), and at the next compression a job
        can only move into room opened since, within ``[now, opened_to)``.
        """
        profile = self.profile
        ordered = [item for item in self._ordered() if now < item[1].start < _INF]
        times, free = profile.times, profile.free
        room = max(free[: bisect_left(times, opened_to)])
        # Only room at or after ``opened`` is new since the last pass.
        opened = now
        while opened < _INF:
            since, opened = opened, _INF
            for job_id, job in ordered:
                start = job.start
                duration = job.requested
                procs = job.procs
                if procs > room or start + duration <= since or start <= now:
                    continue
                # Inlined fast path of _earlier (most checks end here): the step just
                # before the reservation is blocked and no whole window fits before it.
                run = bisect_left(times, start) - 1
                if free[run] < procs and times[run] - duration < now:
                    continue
                new = self._earlier(procs, duration, start, opened_to)
                if new < start:
                    end = start + duration
                    profile.release(start, end, procs)
                    self._reserve(job_id, job, new)
                    # Room opens where the old slot is not covered by the new one.
                    low = max(start, new + duration)
                    opened = min(opened, low)
                    since = min(since, low)
                    opened_to = max(opened_to, end)
                    times, free = profile.times, profile.free
                    room = max(free[: bisect_left(times, opened_to)])

    def _earlier(self, procs: int, duration: float, start: float, opened_to: float) -> float:
        """Earliest start of a job reserved at ``start``, its own processors counted free.

        An earlier window's part past ``start`` lies in the job's own slot, so it fits
        if every step from its start to ``start`` has room (the roomy run ending at
        ``start``), or if it fits as is before the blocked step ahead of ``start``
        and, the job having been at its earliest, begins before ``opened_to``.
        """
        times, free = self.profile.times, self.profile.free
        run = bisect_left(times, start) - 1  # the step just before the reservation
        if run < 0:
            return start
        if free[run] >= procs:
            while run > 0 and free[run - 1] >= procs:
                run -= 1
            return self.profile.earliest(procs, duration, times[0], times[run])
        # That step is blocked: the window must end by its start.
        limit = min(math.nextafter(times[run] - duration, _INF), opened_to)
        if limit <= times[0] or max(free[: bisect_left(times, limit)]) < procs:  # max in C
            return start
        new = self.profile.earliest(procs, duration, times[0], limit)
        return new if new < limit else start

    @abstractmethod
    def _on_submit(self, job_id: K, job: _Waiting, now: float) -> None:
        """Give a newly submitted job its place (each scheduler its own way)."""

    def _on_complete(self, job_id: K, submitted: float, started: float, now: float) -> None:
        """Hook for completion statistics; nothing by default."""


class ConservativeBackfill(_Backfill[K]):
    """Conservative backfilling: every job is reserved its earliest slot on arrival.

    A new job only takes processors no reservation holds, so it never delays an
    earlier one; a job that fits now is reserved at ``now`` and starts at the
    next :meth:`start_now`.
    """

    def _on_submit(self, job_id: K, job: _Waiting, now: float) -> None:
        self.profile.compact(now)
        self._reserve(job_id, job, self.profile.earliest(job.procs, job.requested, now))
