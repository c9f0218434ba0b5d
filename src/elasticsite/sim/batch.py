"""A batch system on the virtual clock: the :class:`~elasticsite.batch.base.BatchSystem`
contract, scheduled by the same passes as the embedded batch system.

Jobs arrive as events (:meth:`SimBatch.arrive`), start when a pass of
:func:`elasticsite.batch.scheduling.schedule` places them, and finish after their
runtime, cut at their walltime. A node is declared by ``add_node`` and stays DOWN
until its instance has booted and calls :meth:`SimBatch.register` (the simulated
cloud does, as a worker's daemon would); it goes DOWN again when its instance
stops (:meth:`SimBatch.node_down`). A scheduling pass runs at every arrival,
completion, registration and undrain, so a job starts the instant it can.

Partitions work as on the embedded batch system: a job runs only on nodes of its
``partition`` attribute (``""`` by default); nodes ``add_node`` declares are in
``node_partition``, those :meth:`SimBatch.add_site_node` adds in the default one.
So do owners: a node :meth:`SimBatch.set_owner` gives a user runs that user's jobs only.
"""

from __future__ import annotations

from dataclasses import dataclass

from elasticsite.attributes import PARTITION, partition_of
from elasticsite.batch import scheduling
from elasticsite.batch.base import (
    KILLED,
    PREEMPTED,
    WALLTIME_EXCEEDED,
    BatchError,
    BatchView,
    JobDetail,
    JobRequest,
    Node,
    NodeState,
    UnknownJob,
    UnknownNode,
    checked_command,
)
from elasticsite.model import Job, JobState
from elasticsite.sim.engine import Simulation

__all__ = ["SimBatch"]


@dataclass(slots=True)
class _Node:
    name: str
    cores: int
    free: int
    up: bool = False
    draining: bool = False
    running: int = 0
    registered_at: float | None = None
    partition: str = ""
    owner: str = ""


class SimBatch:
    """The simulated site's batch system: cloud nodes, and site nodes if some are added."""

    def __init__(self, sim: Simulation, scheduler: str = "easy", node_partition: str = "") -> None:
        if scheduler not in scheduling.POLICIES:
            raise ValueError(
                f"unknown scheduler {scheduler!r}; use one of {', '.join(scheduling.POLICIES)}"
            )
        self.sim = sim
        self.scheduler = scheduler
        self.jobs: list[Job] = []
        self.queue: list[Job] = []
        self.running: dict[str, Job] = {}
        self.held: dict[str, Job] = {}
        """Queued jobs held: no pass starts them until released."""
        self.nodes: dict[str, _Node] = {}
        self.done = 0
        self._ids = 0
        self.node_partition = node_partition
        self._seq: dict[str, int] = {}
        self._front: dict[str, int] = {}
        self._partitioned = bool(node_partition)
        """Whether any job or node is outside the default partition (else one schedule)."""
        self._owned = False
        """Whether any node was ever given an owner."""

    # --- the workload ---------------------------------------------------------------

    def arrive(self, job: Job) -> None:
        """Queue ``job`` now (the simulator schedules this at its submit time)."""
        job.state = JobState.QUEUED
        if not self._partitioned and partition_of(job.attributes):
            self._partitioned = True
        self.jobs.append(job)
        self._seq[job.id] = len(self._seq)
        queue = self.queue
        if not queue or self._key(queue[-1]) <= self._key(job):
            queue.append(job)  # the usual case: equal priorities, arrival order
        else:
            queue.append(job)
            queue.sort(key=self._key)
        self._schedule()

    def _key(self, job: Job) -> tuple[int, int, int]:
        """Queue order: moved to the front (latest first), priority, then arrival."""
        return (-self._front.get(job.id, 0), -job.priority, self._seq.get(job.id, 0))

    def _finish(self, run: tuple[Job, float]) -> None:
        job, started = run
        if self.running.get(job.id) is not job or job.started_at != started:
            return  # requeued meanwhile (its node went away), maybe started again
        now = self.sim.now
        job.finished_at = now
        if (job.runtime or 0.0) <= job.walltime:
            job.state, job.exit_code = JobState.COMPLETED, 0
        else:  # cut at its walltime, as a real batch system kills it
            job.state, job.signal, job.reason = JobState.FAILED, KILLED, WALLTIME_EXCEEDED
        del self.running[job.id]
        self.done += 1
        node = self.nodes.get(job.node or "")
        if node is not None:
            node.free += job.cores
            node.running -= 1
        self._schedule()

    def _schedule(self) -> None:
        if not self.queue:
            return
        up = [n for n in self.nodes.values() if n.up and not n.draining]
        if not up:
            return
        now = self.sim.now
        running = [
            (j.node or "", j.cores, (j.started_at or now) + j.walltime)
            for j in self.running.values()
        ]
        if self._partitioned or self._owned:
            starts = self._by_partition(up, running)
        else:
            free = [(n.name, n.free) for n in up]
            starts = dict(scheduling.schedule(self.scheduler, now, self.queue, free, running))
        if not starts:
            return
        kept = []
        for job in self.queue:
            name = starts.get(job.id)
            if name is None:
                kept.append(job)
                continue
            node = self.nodes[name]
            job.state = JobState.RUNNING
            job.started_at = now
            job.attempts += 1
            job.node = name
            node.free -= job.cores
            node.running += 1
            self.running[job.id] = job
            self.sim.at(now + min(job.runtime or 0.0, job.walltime), self._finish, (job, now))
        self.queue = kept

    def _by_partition(
        self, up: list[_Node], running: list[tuple[str, int, float]]
    ) -> dict[str, str]:
        """One schedule per partition: its queued jobs on its nodes."""
        part_of = {n.name: n.partition for n in self.nodes.values()}
        starts: dict[str, str] = {}
        for part in sorted({n.partition for n in up}):
            waiting = [j for j in self.queue if partition_of(j.attributes) == part]
            if not waiting:
                continue
            free = [(n.name, n.free, n.owner) for n in up if n.partition == part]
            busy = [r for r in running if part_of.get(r[0]) == part]
            users = {j.id: j.user for j in waiting}
            starts.update(
                scheduling.schedule_owned(self.scheduler, self.sim.now, waiting, free, busy, users)
            )
        return starts

    def add_site_node(self, name: str, cores: int) -> None:
        """A node of the site itself, in the default partition, up from now on."""
        self.add_node(name, cores)
        self.nodes[name].partition = ""
        self.register(name)

    # --- what the simulated cloud reports ---------------------------------------------

    def register(self, name: str) -> None:
        """The node's instance has booted: it takes jobs from now on."""
        node = self.nodes.get(name)
        if node is None or node.up:
            return
        node.up = True
        node.registered_at = self.sim.now
        self._schedule()

    def node_down(self, name: str) -> None:
        """The node's instance is stopping: it runs nothing more (jobs go back)."""
        node = self.nodes.get(name)
        if node is None:
            return
        node.up = False
        self._requeue(name)

    def _requeue(self, name: str) -> None:
        node = self.nodes.get(name)
        lost = [j for j in self.running.values() if j.node == name]
        for job in lost:
            del self.running[job.id]
            job.state, job.node, job.started_at = JobState.REQUEUED, None, None
            job.reason = f"node {name} lost"
            if node is not None:
                node.free += job.cores
                node.running -= 1
        if lost:
            self.queue[:0] = lost
            if any(j.priority or j.id in self._front for j in self.queue):
                self.queue.sort(key=self._key)  # ahead of their peers, not of urgent jobs
            self._schedule()

    # --- the BatchSystem contract -----------------------------------------------------

    def snapshot(self) -> BatchView:
        nodes = [self._node(n) for n in self.nodes.values()]
        return BatchView(self.sim.now, list(self.queue), list(self.running.values()), nodes)

    @staticmethod
    def _node(n: _Node) -> Node:
        if not n.up:
            state = NodeState.DOWN
        elif n.draining:
            state = NodeState.DRAINING if n.running else NodeState.DRAINED
        else:
            state = NodeState.BUSY if n.running else NodeState.IDLE
        return Node(
            n.name, n.cores, state, n.running, n.free, registered_at=n.registered_at, owner=n.owner
        )

    def add_node(self, name: str, cores: int, pool: str = "") -> None:
        if cores < 1:
            raise BatchError(f"add_node {name}: cores must be >= 1, got {cores}")
        if pool:
            self._partitioned = True
        part = pool or self.node_partition
        self.nodes.setdefault(name, _Node(name, cores, cores, partition=part))

    def drain(self, name: str, reason: str) -> None:
        node = self.nodes.get(name)
        if node is None:
            raise UnknownNode(f"drain: no node {name}")
        node.draining = True

    def undrain(self, name: str) -> None:
        node = self.nodes.get(name)
        if node is None:
            raise UnknownNode(f"undrain: no node {name}")
        node.draining = False
        self._schedule()

    def set_owner(self, name: str, user: str) -> None:
        node = self.nodes.get(name)
        if node is None:
            raise UnknownNode(f"set_owner: no node {name}")
        if node.owner != user:
            node.owner = user
            self._owned = True
            self._schedule()

    def remove_node(self, name: str) -> None:
        node = self.nodes.get(name)
        if node is not None:
            node.up = False  # its requeued jobs must not start on it again
            self._requeue(name)
            del self.nodes[name]

    def submit(self, request: JobRequest) -> str:
        checked_command(request)
        self._ids += 1
        job = Job(
            f"s{self._ids}",
            request.cores,
            request.walltime,
            self.sim.now,
            user=request.user,
            priority=request.priority,
            runtime=request.walltime,
            attributes=dict(request.attributes),
        )
        self.arrive(job)
        return job.id

    def _queued(self, job_id: str) -> Job:
        for job in self.queue:
            if job.id == job_id:
                return job
        raise UnknownJob(f"no queued job {job_id}")

    def set_priority(self, job_id: str, priority: int) -> None:
        job = self._queued(job_id)
        job.priority = priority
        self.queue.sort(key=self._key)
        self._schedule()

    def move_to_front(self, job_id: str) -> None:
        self._queued(job_id)
        self._front[job_id] = len(self._front) + 1
        self.queue.sort(key=self._key)
        self._schedule()

    def hold(self, job_id: str) -> None:
        if job_id in self.held:
            return
        job = self._queued(job_id)
        self.queue.remove(job)
        self.held[job_id] = job
        job.state = JobState.HELD

    def release(self, job_id: str) -> None:
        job = self.held.pop(job_id, None)
        if job is not None:
            job.state = JobState.REQUEUED if job.attempts else JobState.QUEUED
            self.queue.append(job)
            self.queue.sort(key=self._key)
            self._schedule()

    def cancel(self, job_id: str) -> None:
        job = self._find(job_id)
        if job.state is JobState.CANCELLED:
            return
        if job.state.finished:
            raise BatchError(f"cancel: job {job_id} already {job.state.value}")
        if job_id in self.held:
            del self.held[job_id]
        elif job_id in self.running:
            del self.running[job_id]
            node = self.nodes.get(job.node or "")
            if node is not None:
                node.free += job.cores
                node.running -= 1
        else:
            self.queue.remove(job)
        job.state, job.finished_at = JobState.CANCELLED, self.sim.now
        self._schedule()

    def job(self, job_id: str) -> JobDetail:
        job = self._find(job_id)
        return JobDetail.of(job, native_state=job.state.value)

    def _find(self, job_id: str) -> Job:
        for job in self.jobs:
            if job.id == job_id:
                return job
        raise UnknownJob(f"no job {job_id!r} in the simulated batch system")

    def redirect(self, job_id: str, target: str) -> None:
        job = self._queued(job_id)
        if job.attributes.get(PARTITION, "") == target:
            return
        job.attributes = {**job.attributes, PARTITION: target}
        self._partitioned = True
        self._schedule()

    def preempt(self, job_id: str) -> None:
        job = self.running.get(job_id)
        if job is None:
            raise UnknownJob(f"no running job {job_id}")
        node = self.nodes.get(job.node or "")
        del self.running[job_id]
        job.state, job.node, job.started_at = JobState.REQUEUED, None, None
        job.reason = PREEMPTED
        if node is not None:
            node.free += job.cores
            node.running -= 1
        self.queue.insert(0, job)
        self._schedule()
