"""The manager's recorder: queue waits and VM allocation delays, as history for the advisor.

The manager already sees what the advisor needs: every job's submission and start, and
every worker's request and join. After each step it hands the recorder what that step
saw (:meth:`Recorder.observe`), and the recorder writes, on its own thread, into the
site's history (``advisor.db``):

* a **queue wait** for each job seen running for the first time: ``started_at -
  submitted_at``, under the job's partition (else the site's name), the policy its
  ``urgent.policy`` attribute names (else ``default``) and its node count;
* a **VM allocation delay** for each launch whose instances have all joined: from the
  request to the last join, under the cloud, policy ``default`` and the number of
  instances asked at once (the workers a step launched on that cloud). A launch one of
  whose instances failed before joining delivered no allocation and is not recorded.

The step pays only for what is new: the workers launched, joining or ending in that
step. The batch view's running jobs are handed over by reference and compared with the
ones already recorded on the writer's thread, which also opens the store lazily, so a
locked or broken ``advisor.db`` never delays or fails a step; such a failure is logged
once (then at debug level) and counted in :attr:`Recorder.failures`. Job and launch ids
are each observation's ``ref``, so a restart or a re-read records nothing twice.
"""

from __future__ import annotations

import logging
import operator
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from elasticsite.attributes import NODE_COUNT, PARTITION
from elasticsite.core import Plan, WorkerRecord
from elasticsite.history.observations import HistoryStore, Observation
from elasticsite.model import Job, WorkerState

__all__ = ["URGENT_POLICY", "Recorder"]

log = logging.getLogger(__name__)

URGENT_POLICY = "urgent.policy"
"""The job attribute that says under which urgent policy it was submitted
(``next_to_run`` or ``preemption``); jobs without it wait under ``default``."""

_POLICIES = frozenset({"default", "next_to_run", "preemption"})
_PENDING = (WorkerState.REQUESTED, WorkerState.BOOTING)
_JOINED = (WorkerState.IDLE, WorkerState.BUSY)
_FINAL = (WorkerState.TERMINATED, WorkerState.FAILED)
_job_id = operator.attrgetter("id")
_MAX_BACKLOG = 100_000
"""Launch observations kept for a store that cannot be written; older ones are dropped."""


class _Launch:
    """The workers one step asked of one cloud, and how many of them joined."""

    __slots__ = ("cloud", "failed", "last_join", "requested_at", "size", "waiting")

    def __init__(self, cloud: str, requested_at: float) -> None:
        self.cloud = cloud
        self.requested_at = requested_at
        self.size = 0
        self.waiting = 0
        self.last_join = requested_at
        self.failed = False


class Recorder:
    """Turns what each manager step saw into observations, written off the step's thread.

    ``resource`` names the batch queue of jobs without a partition (the site's id).
    """

    def __init__(self, path: str | Path, *, resource: str) -> None:
        self.path = Path(path)
        self.resource = resource
        self.failures = 0
        """Writes that failed (each logged; the first as a warning)."""
        self.recorded = 0
        """Observations the store took as new."""
        self._launches: dict[tuple[str, float], _Launch] = {}
        self._member: dict[str, _Launch] = {}
        self._seeded = False
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._running: Sequence[Job] | None = None
        self._ready: list[Observation] = []
        self._busy = False
        self._closed = False
        self._seen: set[str] = set()
        self._store: HistoryStore | None = None
        self._thread: threading.Thread | None = None

    # -- the step's side: O(what is new) -------------------------------------

    def observe(
        self,
        running: Sequence[Job] | None,
        plan: Plan,
        records: Mapping[str, WorkerRecord],
    ) -> None:
        """Take what one step saw: the batch view's running jobs (None when the batch
        system could not be read) and the step's new workers and transitions.

        ``records`` are the manager's unfinished workers; read once, on the first call,
        to follow the launches a restart left in flight.
        """
        if not self._seeded:
            fresh = {rec.worker.id for rec in plan.new}
            self._seed(rec for wid, rec in records.items() if wid not in fresh)
        for rec in plan.new:
            w = rec.worker
            launch = self._launches.get((w.cloud, w.requested_at))
            if launch is None:
                launch = self._launches[w.cloud, w.requested_at] = _Launch(w.cloud, w.requested_at)
            launch.size += 1
            launch.waiting += 1
            self._member[w.id] = launch
        done: list[Observation] = []
        for t in plan.transitions:
            launch = self._member.get(t.worker_id)
            if launch is None:
                continue
            if t.to_state in _JOINED:  # its first join: a member has not joined yet
                launch.last_join = max(launch.last_join, t.at)
            elif t.to_state in _FINAL:
                launch.failed = True
            else:
                continue
            del self._member[t.worker_id]
            launch.waiting -= 1
            if launch.waiting == 0:
                del self._launches[launch.cloud, launch.requested_at]
                if not launch.failed:
                    done.append(self._allocation(launch))
        if running is None and not done:
            return
        with self._lock:
            if running is not None:
                self._running = running  # only the newest view matters: it holds the others
            self._ready.extend(done)
            if len(self._ready) > _MAX_BACKLOG:
                del self._ready[: len(self._ready) - _MAX_BACKLOG]
            self._start()
            self._wake.notify()

    def _seed(self, records: Iterable[WorkerRecord]) -> None:
        """Follow the launches still in flight at start-up (from the store's records)."""
        self._seeded = True
        for rec in records:
            w = rec.worker
            key = (w.cloud, w.requested_at)
            launch = self._launches.get(key)
            if launch is None:
                launch = self._launches[key] = _Launch(w.cloud, w.requested_at)
            launch.size += 1
            if w.state in _PENDING:
                launch.waiting += 1
                self._member[w.id] = launch
            elif w.joined_at is not None:
                launch.last_join = max(launch.last_join, w.joined_at)
        for key, launch in list(self._launches.items()):
            if launch.waiting == 0:  # all joined before the restart: recorded then
                del self._launches[key]

    def _allocation(self, launch: _Launch) -> Observation:
        return Observation(
            phase="allocation",
            resource=launch.cloud,
            policy="default",
            nodes=launch.size,
            value=max(0.0, launch.last_join - launch.requested_at),
            at=launch.last_join,
            source="manager",
            ref=f"launch@{launch.requested_at:.6f}",
        )

    # -- the writer's side ---------------------------------------------------

    def _start(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(
                target=self._write_loop, name="es-advisor-recorder", daemon=True
            )
            self._thread.start()

    def _write_loop(self) -> None:
        while True:
            with self._lock:
                while self._running is None and not self._ready and not self._closed:
                    self._wake.wait()
                if self._running is None and not self._ready:
                    break  # closed, and nothing left
                running, self._running = self._running, None
                ready, self._ready = self._ready, []
                self._busy = True
            try:
                self._write(running, ready)
            finally:
                with self._lock:
                    self._busy = False
                    self._wake.notify_all()
        if self._store is not None:
            self._store.close()  # this thread's connection

    def _write(self, running: Sequence[Job] | None, ready: list[Observation]) -> None:
        new_jobs: list[Job] = []
        current: set[str] | None = None
        observations = list(ready)
        try:
            if running is not None:
                current = set(map(_job_id, running))  # C-speed; only new ids are looked at
                fresh = current - self._seen
                if fresh:
                    new_jobs = [j for j in running if j.id in fresh and j.started_at is not None]
                    observations.extend(self._queue_wait(j) for j in new_jobs)
            if observations:
                if self._store is None:
                    self._store = HistoryStore(self.path)
                self.recorded += self._store.add(observations)
        except Exception as exc:  # the history must never break the manager
            self.failures += 1
            level = logging.WARNING if self.failures == 1 else logging.DEBUG
            log.log(level, "advisor history %s: not recorded (%s); will retry", self.path, exc)
            with self._lock:  # the launches wait for the next try; queue waits are re-found
                self._ready[:0] = ready[-_MAX_BACKLOG:]
            return
        if current is not None:
            self._seen = current  # a job no longer running is not seen running again

    def _queue_wait(self, job: Job) -> Observation:
        attrs = job.attributes
        policy = attrs.get(URGENT_POLICY, "default")
        if policy not in _POLICIES:
            policy = "default"
        count = attrs.get(NODE_COUNT, "1")
        nodes = int(count) if count.isdigit() and int(count) > 0 else 1
        started = job.started_at if job.started_at is not None else job.submitted_at
        return Observation(
            phase="allocation",
            resource=attrs.get(PARTITION) or self.resource,
            policy=policy,
            nodes=nodes,
            value=max(0.0, started - job.submitted_at),
            at=started,
            source="manager",
            ref=job.id,
        )

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything handed over so far is written (or failed); False on timeout."""
        with self._lock:
            return self._wake.wait_for(
                lambda: self._running is None and not self._ready and not self._busy, timeout
            )

    def close(self, timeout: float = 30.0) -> None:
        """Write what is left, stop the writer and close the store."""
        with self._lock:
            self._closed = True
            self._wake.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("advisor history %s: still writing after %g s", self.path, timeout)
