"""The shared contract every :class:`~elasticsite.batch.base.BatchSystem` adapter passes.

A concrete test class inherits :class:`BatchContract` and provides:

- a ``batch`` fixture: a fresh adapter in which a submitted job stays queued until the
  test brings a node up (no node accepts jobs yet);
- :meth:`BatchContract.bring_up`: make a declared node report in, as a booted worker
  would. A system that cannot do that here leaves it alone: the tests that need a live
  node are then skipped, with the reason;
- optionally :attr:`BatchContract.settle_timeout`: seconds to wait for an asynchronous
  system (a real scheduler) to reach the expected state; fakes and the embedded system
  act synchronously and keep the default 0 (a single look); with it,
  :attr:`BatchContract.watch_time`, how long to watch for what must not happen;
- optionally :meth:`BatchContract.node_name` and :meth:`BatchContract.request`, when a
  system needs particular node names or job scripts;
- optionally :attr:`BatchContract.cancel_recorded`: False for a system whose record of
  a cancelled running job tells only the signal that ended it (Torque).

Every rule here is something :mod:`elasticsite.batch.base` promises in a docstring; the
tests use only the contract's methods, never the adapter's extras.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from elasticsite.batch.base import (
    BatchError,
    BatchSystem,
    BatchView,
    JobDetail,
    JobRequest,
    Node,
    NodeState,
    UnknownJob,
    UnknownNode,
)
from elasticsite.model import Job, JobState

__all__ = ["BatchContract"]

UNKNOWN_JOB = "987654"
"""A job id no fresh system knows (numeric, so every adapter's id syntax accepts it)."""


class BatchContract:
    """Tests inherited by ``TestXxxContract`` classes; see the module docstring."""

    settle_timeout: ClassVar[float] = 0.0
    """Seconds a state change may take to show in ``snapshot()``."""
    settle_poll: ClassVar[float] = 0.5
    watch_time: ClassVar[float] = 0.0
    """Seconds to watch for what must not happen, long enough for the system to have
    done it if it would (a real scheduler's passes); 0: a single look."""
    redirect_target: ClassVar[str | None] = "cloud"
    """A partition or queue :meth:`BatchSystem.redirect` may send jobs to; ``None`` for
    a system without such targets (its ``redirect`` must then raise BatchError)."""
    owners: ClassVar[bool] = True
    """Whether the system can keep a node for one user's jobs (else ``set_owner`` must
    refuse any user with a BatchError, and take ``""``)."""
    cancel_recorded: ClassVar[bool] = True
    """Whether a cancelled running job's record says cancelled (else: failed by the
    signal that ended it, all Torque keeps)."""

    # -- hooks ---------------------------------------------------------------------------

    def bring_up(self, batch: Any, name: str, cores: int) -> None:
        """Make the declared node ``name`` report in and accept jobs."""
        pytest.skip(f"{type(batch).__name__}: no node can be brought up in this test setup")

    def node_name(self, index: int) -> str:
        """The name of the ``index``-th node a test declares."""
        return f"es-contract-{index}"

    def request(self, cores: int = 1, walltime: float = 600.0, priority: int = 0) -> JobRequest:
        """A job request; walltimes are whole minutes so every system keeps them exactly."""
        return JobRequest(
            command=["sleep", "3600"], cores=cores, walltime=walltime, priority=priority
        )

    # -- helpers -------------------------------------------------------------------------

    def settle(self, batch: BatchSystem, check: Callable[[BatchView], bool]) -> BatchView:
        """The first snapshot for which ``check`` holds, or the last one after the timeout."""
        deadline = time.monotonic() + self.settle_timeout
        while True:
            view = batch.snapshot()
            if check(view) or time.monotonic() >= deadline:
                return view
            time.sleep(self.settle_poll)

    def watch(self, batch: BatchSystem) -> BatchView:
        """The snapshot after :attr:`watch_time` seconds of watching for what must not
        happen (a job starting where it may not)."""
        deadline = time.monotonic() + self.watch_time
        while True:
            view = batch.snapshot()
            if time.monotonic() >= deadline:
                return view
            time.sleep(self.settle_poll)

    @staticmethod
    def queued_ids(view: BatchView) -> list[str]:
        return [j.id for j in view.queued]

    @staticmethod
    def node(view: BatchView, name: str) -> Node | None:
        found = [n for n in view.nodes if n.name == name]
        assert len(found) <= 1, f"node {name} listed {len(found)} times"
        return found[0] if found else None

    @staticmethod
    def job(jobs: list[Job], job_id: str) -> Job | None:
        return next((j for j in jobs if j.id == job_id), None)

    def settle_job(
        self, batch: BatchSystem, job_id: str, check: Callable[[JobDetail], bool]
    ) -> JobDetail:
        """The first detail of ``job_id`` for which ``check`` holds, or the last one."""
        deadline = time.monotonic() + self.settle_timeout
        while True:
            detail = batch.job(job_id)
            if check(detail) or time.monotonic() >= deadline:
                return detail
            time.sleep(self.settle_poll)

    def queue(self, batch: BatchSystem, priorities: list[int]) -> list[str]:
        ids = [batch.submit(self.request(priority=p)) for p in priorities]
        self.settle(batch, lambda v: set(ids) <= set(self.queued_ids(v)))
        return ids

    def live_node(self, batch: BatchSystem, cores: int = 2) -> str:
        """A declared node that reported in and is IDLE."""
        name = self.node_name(1)
        batch.add_node(name, cores)
        self.bring_up(batch, name, cores)
        view = self.settle(batch, lambda v: self._state(v, name) is NodeState.IDLE)
        assert self._state(view, name) is NodeState.IDLE
        return name

    def _state(self, view: BatchView, name: str) -> NodeState | None:
        node = self.node(view, name)
        return None if node is None else node.state

    def running_job(self, batch: BatchSystem) -> tuple[str, str]:
        """A job running on a live node: ``(job_id, node)``."""
        name = self.live_node(batch, cores=1)
        job_id = batch.submit(self.request(cores=1))
        view = self.settle(batch, lambda v: self.job(v.running, job_id) is not None)
        job = self.job(view.running, job_id)
        assert job is not None, f"job {job_id} never started on {name}"
        return job_id, name

    # -- what any adapter promises -------------------------------------------------------

    def test_is_a_batch_system(self, batch: BatchSystem) -> None:
        assert isinstance(batch, BatchSystem)

    def test_a_fresh_system_is_empty_of_our_work(self, batch: BatchSystem) -> None:
        view = batch.snapshot()
        assert view.queued == [] and view.running == []
        assert isinstance(view.taken_at, float)

    def test_submit_queues_the_job_with_its_shape(self, batch: BatchSystem) -> None:
        job_id = batch.submit(self.request(cores=2, walltime=1200.0))
        assert isinstance(job_id, str) and job_id
        view = self.settle(batch, lambda v: self.job(v.queued, job_id) is not None)
        job = self.job(view.queued, job_id)
        assert job is not None, f"submitted job {job_id} not in the queue: {view.queued}"
        assert job.state is JobState.QUEUED
        assert job.cores == 2
        assert job.walltime == pytest.approx(1200.0)
        assert job.submitted_at > 0
        assert view.running == []

    def test_submit_returns_distinct_ids(self, batch: BatchSystem) -> None:
        ids = self.queue(batch, [0, 0, 0])
        assert len(set(ids)) == 3

    def test_queue_order_follows_priority_then_submission(self, batch: BatchSystem) -> None:
        ids = self.queue(batch, [0, 5, 0, 5])
        expected = [ids[1], ids[3], ids[0], ids[2]]
        view = self.settle(batch, lambda v: self.queued_ids(v) == expected)
        assert self.queued_ids(view) == expected

    def test_set_priority_reorders_the_queue(self, batch: BatchSystem) -> None:
        ids = self.queue(batch, [0, 0, 0])
        batch.set_priority(ids[2], 10)
        expected = [ids[2], ids[0], ids[1]]
        view = self.settle(batch, lambda v: self.queued_ids(v) == expected)
        assert self.queued_ids(view) == expected
        job = self.job(view.queued, ids[2])
        assert job is not None and job.priority > (self.job(view.queued, ids[0]) or job).priority
        batch.set_priority(ids[2], 0)  # and back: submission order again
        view = self.settle(batch, lambda v: self.queued_ids(v) == ids)
        assert self.queued_ids(view) == ids

    def test_move_to_front_beats_every_priority_and_the_latest_wins(
        self, batch: BatchSystem
    ) -> None:
        ids = self.queue(batch, [0, 7, 0])
        batch.move_to_front(ids[2])
        view = self.settle(batch, lambda v: self.queued_ids(v)[:1] == [ids[2]])
        assert self.queued_ids(view)[0] == ids[2]
        batch.move_to_front(ids[0])
        view = self.settle(batch, lambda v: self.queued_ids(v)[:2] == [ids[0], ids[2]])
        assert self.queued_ids(view)[:2] == [ids[0], ids[2]]
        assert set(self.queued_ids(view)) == set(ids)

    def test_unknown_jobs_raise_unknown_job(self, batch: BatchSystem) -> None:
        for call in (
            lambda: batch.set_priority(UNKNOWN_JOB, 1),
            lambda: batch.move_to_front(UNKNOWN_JOB),
            lambda: batch.preempt(UNKNOWN_JOB),
            lambda: batch.cancel(UNKNOWN_JOB),
            lambda: batch.job(UNKNOWN_JOB),
        ):
            with pytest.raises(UnknownJob, match=UNKNOWN_JOB):
                call()

    def test_redirect_moves_a_queued_job_and_is_idempotent(self, batch: BatchSystem) -> None:
        (job_id,) = self.queue(batch, [0])
        target = self.redirect_target
        if target is None:
            with pytest.raises(BatchError, match="redirect"):
                batch.redirect(job_id, "cloud")
            return
        batch.redirect(job_id, target)
        batch.redirect(job_id, target)

        def moved(view: BatchView) -> bool:
            job = self.job([*view.queued, *view.running], job_id)
            return job is not None and job.attributes.get("partition") == target

        assert moved(self.settle(batch, moved))
        with pytest.raises(UnknownJob, match=UNKNOWN_JOB):
            batch.redirect(UNKNOWN_JOB, target)

    @staticmethod
    def waiting(view: BatchView, job_id: str) -> bool:
        """Queued and not held: a pass may start it."""
        job = next((j for j in view.queued if j.id == job_id), None)
        return job is not None and job.attributes.get("held") != "true"

    def test_hold_and_release_are_idempotent(self, batch: BatchSystem) -> None:
        (job_id,) = self.queue(batch, [0])
        batch.hold(job_id)
        batch.hold(job_id)
        view = self.settle(batch, lambda v: not self.waiting(v, job_id))
        assert not self.waiting(view, job_id), "a held job is still waiting to run"
        assert self.job(view.running, job_id) is None
        batch.release(job_id)
        batch.release(job_id)
        assert self.waiting(self.settle(batch, lambda v: self.waiting(v, job_id)), job_id)
        with pytest.raises(UnknownJob, match=UNKNOWN_JOB):
            batch.hold(UNKNOWN_JOB)

    def test_a_held_job_waits_on_a_free_node_until_released(self, batch: BatchSystem) -> None:
        (job_id,) = self.queue(batch, [0])
        batch.hold(job_id)
        self.settle(batch, lambda v: not self.waiting(v, job_id))
        self.live_node(batch)
        view = batch.snapshot()
        assert self.job(view.running, job_id) is None, "a held job started"
        batch.release(job_id)
        view = self.settle(batch, lambda v: self.job(v.running, job_id) is not None)
        assert self.job(view.running, job_id) is not None

    def test_holding_a_running_job_raises_unknown_job(self, batch: BatchSystem) -> None:
        job_id, _ = self.running_job(batch)
        with pytest.raises(UnknownJob):
            batch.hold(job_id)

    def test_a_node_can_be_declared_for_a_vm_type(self, batch: BatchSystem) -> None:
        name = self.node_name(7)
        batch.add_node(name, 1, pool="m1.small")
        view = self.settle(batch, lambda v: self.node(v, name) is not None)
        node = self.node(view, name)
        assert node is not None and node.state is NodeState.DOWN

    def test_a_node_kept_for_a_user_starts_no_one_elses_job(self, batch: BatchSystem) -> None:
        if not self.owners:
            with pytest.raises(BatchError, match="cannot keep a node for one user"):
                batch.set_owner(self.node_name(1), "nobody")
            return
        name = self.live_node(batch, cores=1)
        batch.set_owner(name, "nobody")  # the contract's jobs are the caller's own
        batch.set_owner(name, "nobody")  # no-op
        job_id = batch.submit(self.request(cores=1))
        view = self.settle(batch, lambda v: job_id in self.queued_ids(v))
        assert job_id in self.queued_ids(view), "the job is not queued"
        assert self.job(self.watch(batch).running, job_id) is None, (
            "another user's job started on a node kept for nobody"
        )
        batch.set_owner(name, "")  # anyone's again: the waiting job starts
        view = self.settle(batch, lambda v: self.job(v.running, job_id) is not None)
        assert self.job(view.running, job_id) is not None

    def test_unknown_nodes_raise_unknown_node(self, batch: BatchSystem) -> None:
        name = self.node_name(99)
        with pytest.raises(UnknownNode, match=name):
            batch.drain(name, "contract")
        with pytest.raises(UnknownNode, match=name):
            batch.undrain(name)

    def test_bad_requests_raise_batch_errors(self, batch: BatchSystem) -> None:
        for bad in (
            JobRequest(command=[], cores=1, walltime=600.0),
            JobRequest(command=["true"], cores=0, walltime=600.0),
            JobRequest(command=["true"], cores=1, walltime=0.0),
        ):
            with pytest.raises(BatchError):
                batch.submit(bad)
        with pytest.raises(BatchError):
            batch.add_node(self.node_name(1), 0)
        assert batch.snapshot().queued == []

    def test_add_node_lists_it_down_until_it_reports(self, batch: BatchSystem) -> None:
        name = self.node_name(1)
        batch.add_node(name, 4)
        batch.add_node(name, 4)  # idempotent
        view = self.settle(batch, lambda v: self.node(v, name) is not None)
        node = self.node(view, name)
        assert node is not None, f"declared node {name} not listed"
        assert node.state is NodeState.DOWN
        assert node.cores == 4
        assert node.running_jobs == 0

    def test_remove_node_forgets_it_and_is_idempotent(self, batch: BatchSystem) -> None:
        name = self.node_name(1)
        batch.add_node(name, 2)
        self.settle(batch, lambda v: self.node(v, name) is not None)
        batch.remove_node(name)
        view = self.settle(batch, lambda v: self.node(v, name) is None)
        assert self.node(view, name) is None
        batch.remove_node(name)  # a removed node: no-op
        batch.remove_node(self.node_name(98))  # never known: no-op too

    def test_a_declared_node_can_be_drained_before_it_reports(self, batch: BatchSystem) -> None:
        name = self.node_name(1)
        batch.add_node(name, 2)
        self.settle(batch, lambda v: self.node(v, name) is not None)
        batch.drain(name, "contract: not needed after all")
        batch.undrain(name)
        view = self.settle(batch, lambda v: self._state(v, name) is NodeState.DOWN)
        assert self._state(view, name) is NodeState.DOWN

    def test_a_queued_job_waits_while_no_node_reports(self, batch: BatchSystem) -> None:
        name = self.node_name(1)
        batch.add_node(name, 4)
        job_id = batch.submit(self.request(cores=1))
        view = self.settle(batch, lambda v: self.job(v.queued, job_id) is not None)
        assert self.job(view.queued, job_id) is not None
        assert view.running == []

    # -- with a live node ----------------------------------------------------------------

    def test_a_reporting_node_is_idle_then_busy(self, batch: BatchSystem) -> None:
        name = self.live_node(batch, cores=2)
        job_id = batch.submit(self.request(cores=1))
        view = self.settle(batch, lambda v: self.job(v.running, job_id) is not None)
        job = self.job(view.running, job_id)
        assert job is not None and job.state is JobState.RUNNING
        assert job.node == name and job.cores == 1
        node = self.node(view, name)
        assert node is not None and node.state is NodeState.BUSY
        assert node.running_jobs == 1 and node.free_cores == 1

    def test_drain_and_undrain_are_idempotent(self, batch: BatchSystem) -> None:
        name = self.live_node(batch)
        batch.drain(name, "contract drain")
        batch.drain(name, "contract drain")
        view = self.settle(batch, lambda v: self._state(v, name) is NodeState.DRAINED)
        assert self._state(view, name) is NodeState.DRAINED
        job_id = batch.submit(self.request(cores=1))
        view = self.settle(batch, lambda v: self.job(v.queued, job_id) is not None)
        assert self.job(view.queued, job_id) is not None, "a drained node took a job"
        batch.undrain(name)
        batch.undrain(name)
        # a batch system may report the job running a moment before the node busy
        view = self.settle(
            batch,
            lambda v: (
                self.job(v.running, job_id) is not None and self._state(v, name) is NodeState.BUSY
            ),
        )
        assert self.job(view.running, job_id) is not None, "the undrained node took no job"
        assert self._state(view, name) is NodeState.BUSY

    def test_drain_lets_running_jobs_go_on(self, batch: BatchSystem) -> None:
        job_id, name = self.running_job(batch)
        batch.drain(name, "contract drain")
        view = self.settle(batch, lambda v: self._state(v, name) is NodeState.DRAINING)
        assert self._state(view, name) is NodeState.DRAINING
        assert self.job(view.running, job_id) is not None

    def test_preempt_puts_a_running_job_back_in_the_queue(self, batch: BatchSystem) -> None:
        job_id, name = self.running_job(batch)
        batch.drain(name, "contract: keep the preempted job queued")
        batch.preempt(job_id)
        view = self.settle(batch, lambda v: self.job(v.queued, job_id) is not None)
        assert self.job(view.queued, job_id) is not None
        assert self.job(view.running, job_id) is None
        assert self._state(view, name) is NodeState.DRAINED

    def test_remove_node_requeues_its_jobs(self, batch: BatchSystem) -> None:
        job_id, name = self.running_job(batch)
        batch.remove_node(name)
        view = self.settle(
            batch,
            lambda v: self.node(v, name) is None and self.job(v.queued, job_id) is not None,
        )
        assert self.node(view, name) is None
        assert self.job(view.queued, job_id) is not None
        batch.remove_node(name)

    # -- one job's detail, and cancelling -------------------------------------------------

    def test_job_tells_a_queued_job_with_its_shape(self, batch: BatchSystem) -> None:
        (job_id,) = self.queue(batch, [0])
        job = self.settle_job(batch, job_id, lambda j: j.state is JobState.QUEUED)
        assert isinstance(job, JobDetail)
        assert job.state is JobState.QUEUED and job.state.waiting
        assert job.id.split(".")[0] == job_id.split(".")[0]
        assert (job.cores, job.attempts, job.exit_code, job.signal) == (1, 0, None, None)
        assert job.submitted_at > 0 and job.started_at is None and job.finished_at is None

    def test_job_tells_a_held_job(self, batch: BatchSystem) -> None:
        (job_id,) = self.queue(batch, [0])
        batch.hold(job_id)
        job = self.settle_job(batch, job_id, lambda j: j.state is JobState.HELD)
        assert job.state is JobState.HELD

    def test_job_tells_a_running_job_where_it_runs(self, batch: BatchSystem) -> None:
        job_id, name = self.running_job(batch)
        job = self.settle_job(batch, job_id, lambda j: j.state is JobState.RUNNING)
        assert (job.state, job.node) == (JobState.RUNNING, name)
        assert job.started_at is not None and job.attempts >= 1

    def test_a_preempted_job_is_requeued_and_counts_its_run(self, batch: BatchSystem) -> None:
        job_id, name = self.running_job(batch)
        batch.drain(name, "contract: keep the preempted job waiting")
        batch.preempt(job_id)
        job = self.settle_job(batch, job_id, lambda j: j.state is JobState.REQUEUED)
        assert job.state is JobState.REQUEUED, job
        assert job.attempts >= 1 and job.node is None

    def test_cancel_removes_a_queued_job_and_is_idempotent(self, batch: BatchSystem) -> None:
        ids = self.queue(batch, [0, 0])
        batch.cancel(ids[0])
        view = self.settle(batch, lambda v: self.queued_ids(v) == ids[1:])
        assert self.queued_ids(view) == ids[1:]
        job = self.settle_job(batch, ids[0], lambda j: j.state is JobState.CANCELLED)
        assert job.state is JobState.CANCELLED and job.state.finished
        batch.cancel(ids[0])  # cancelled already: no-op
        assert batch.job(ids[1]).state is JobState.QUEUED

    def test_cancel_removes_a_held_job(self, batch: BatchSystem) -> None:
        (job_id,) = self.queue(batch, [0])
        batch.hold(job_id)
        self.settle_job(batch, job_id, lambda j: j.state is JobState.HELD)
        batch.cancel(job_id)
        job = self.settle_job(batch, job_id, lambda j: j.state is JobState.CANCELLED)
        assert job.state is JobState.CANCELLED

    def test_cancel_stops_a_running_job_and_frees_its_node(self, batch: BatchSystem) -> None:
        job_id, name = self.running_job(batch)
        batch.cancel(job_id)
        view = self.settle(
            batch,
            lambda v: (
                self.job(v.running, job_id) is None and self._state(v, name) is NodeState.IDLE
            ),
        )
        assert self.job([*view.running, *view.queued], job_id) is None
        assert self._state(view, name) is NodeState.IDLE
        job = self.settle_job(batch, job_id, lambda j: j.state.finished)
        if self.cancel_recorded:
            assert job.state is JobState.CANCELLED, job
            batch.cancel(job_id)  # cancelled already: no-op
        else:
            assert job.state is JobState.FAILED and job.signal is not None, job
