"""The embedded batch system against its contract, on a real SQLite file."""

from __future__ import annotations

import logging
import os
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from elasticsite.batch import local_schema
from elasticsite.batch.base import (
    BatchError,
    BatchSystem,
    JobRequest,
    NodeState,
    UnknownJob,
    UnknownNode,
)
from elasticsite.batch.identity import own_account
from elasticsite.batch.local import LocalBatch
from elasticsite.model import JobState

from .conftest import FakeClock

ME = own_account()


def req(*argv: str, cores: int = 1, walltime: float = 60.0, priority: int = 0) -> JobRequest:
    return JobRequest(command=list(argv) or ["true"], cores=cores, walltime=walltime,
                      user=ME, priority=priority)  # fmt: skip


def states(batch: LocalBatch) -> dict[str, NodeState]:
    return {n.name: n.state for n in batch.snapshot().nodes}


def test_is_a_batch_system(batch: LocalBatch) -> None:
    assert isinstance(batch, BatchSystem)


def test_submit_queues_jobs_in_priority_then_submit_order(batch: LocalBatch) -> None:
    ids = [batch.submit(req("echo", str(i), priority=p)) for i, p in enumerate([0, 5, 0, 5])]
    assert ids == ["1", "2", "3", "4"]
    view = batch.snapshot()
    assert [j.id for j in view.queued] == ["2", "4", "1", "3"]
    assert view.running == [] and view.nodes == []
    first = view.queued[2]
    assert first.command == "echo 0" and first.user == ME and first.walltime == 60.0
    assert first.state is JobState.QUEUED and first.submitted_at == batch.clock()


def test_set_priority_and_move_to_front_reorder_the_queue(batch: LocalBatch) -> None:
    for p in (0, 0, 9, 0):
        batch.submit(req(priority=p))
    batch.set_priority("4", 10)
    assert [j.id for j in batch.snapshot().queued] == ["4", "3", "1", "2"]
    batch.move_to_front("2")  # ahead of every priority
    assert [j.id for j in batch.snapshot().queued] == ["2", "4", "3", "1"]
    batch.move_to_front("1")  # the latest move wins
    assert [j.id for j in batch.snapshot().queued] == ["1", "2", "4", "3"]
    assert batch.job("4").priority == 10


def test_jobs_start_on_registered_nodes_only(batch: LocalBatch) -> None:
    batch.add_node("w1", 2)
    batch.add_node("w1", 2)  # idempotent
    assert states(batch) == {"w1": NodeState.DOWN}
    batch.submit(req("sleep", "1"))
    assert batch.counts()["queued"] == 1  # a DOWN node takes nothing
    batch.register_node("w1", 2)
    view = batch.snapshot()
    assert [(j.id, j.node, j.started_at) for j in view.running] == [("1", "w1", batch.clock())]
    node = view.nodes[0]
    assert (node.state, node.running_jobs, node.free_cores) == (NodeState.BUSY, 1, 1)
    assert [j.id for j in batch.assigned("w1")] == ["1"]


def test_register_creates_an_undeclared_node(batch: LocalBatch) -> None:
    batch.register_node("w9", 4)
    node = batch.snapshot().nodes[0]
    assert (node.name, node.cores, node.state, node.free_cores) == ("w9", 4, NodeState.IDLE, 4)


def test_drain_keeps_running_jobs_and_undrain_takes_new_ones(
    batch: LocalBatch, clock: FakeClock
) -> None:
    batch.register_node("w1", 1)
    batch.submit(req())
    batch.drain("w1", "idle too long")
    batch.drain("w1", "idle too long")  # idempotent
    batch.submit(req())
    view = batch.snapshot()
    assert view.nodes[0].state is NodeState.DRAINING and view.nodes[0].reason == "idle too long"
    assert [j.id for j in view.running] == ["1"] and [j.id for j in view.queued] == ["2"]
    clock.advance(5)
    assert batch.finish_job("1", "w1", 0)
    assert states(batch) == {"w1": NodeState.DRAINED}
    assert batch.counts()["queued"] == 1  # a drained node takes nothing
    batch.undrain("w1")
    assert [(j.id, j.node) for j in batch.snapshot().running] == [("2", "w1")]
    done = batch.job("1")
    assert (done.state, done.exit_code, done.runtime) == (JobState.DONE, 0, 5.0)


def test_remove_node_requeues_its_jobs_and_is_idempotent(batch: LocalBatch) -> None:
    batch.register_node("w1", 1)
    batch.submit(req())
    batch.remove_node("w1")
    batch.remove_node("w1")
    view = batch.snapshot()
    assert view.nodes == [] and view.running == []
    job = view.queued[0]
    assert (job.id, job.node, job.started_at) == ("1", None, None)
    batch.register_node("w2", 1)  # it runs elsewhere
    assert [(j.id, j.node) for j in batch.snapshot().running] == [("1", "w2")]


def test_leave_is_remove_node(batch: LocalBatch) -> None:
    batch.register_node("w1", 1)
    batch.submit(req())
    batch.leave("w1")
    assert batch.counts()["requeued"] == 1 and batch.snapshot().nodes == []
    job = batch.job("1")
    assert (job.state, job.attempts, job.reason) == (JobState.REQUEUED, 1, "node w1 removed")


def test_preempt_requeues_and_a_late_finish_is_ignored(batch: LocalBatch) -> None:
    batch.register_node("w1", 1)
    batch.submit(req("sleep", "100"))
    (old,) = batch.worker_poll("w1")
    batch.submit(req("urgent"))
    batch.move_to_front("2")
    batch.preempt("1")
    batch.preempt("1")  # already queued: no-op
    view = batch.snapshot()
    assert [(j.id, j.node) for j in view.running] == [("2", "w1")]
    assert [j.id for j in view.queued] == ["1"]
    assert [a.job_id for a in batch.worker_poll("w1")] == ["2"]  # the worker kills job 1
    assert not batch.finish_job("1", "w1", 137, attempt=old.attempt)
    job = batch.job("1")
    assert (job.state, job.attempts, job.reason) == (JobState.REQUEUED, 1, "preempted")


def test_a_requeued_job_restarting_on_the_same_node_is_a_new_attempt(batch: LocalBatch) -> None:
    batch.register_node("w1", 1)
    batch.submit(req())
    (first,) = batch.worker_poll("w1")
    batch.preempt("1")  # nothing else queued: it goes straight back to w1
    (second,) = batch.worker_poll("w1")
    assert second.job_id == first.job_id and second.attempt == first.attempt + 1
    assert not batch.finish_job("1", "w1", 1, attempt=first.attempt)
    assert batch.finish_job("1", "w1", 0, attempt=second.attempt)


def test_finish_from_the_wrong_node_is_ignored(batch: LocalBatch) -> None:
    batch.register_node("w1", 1)
    batch.submit(req())
    assert not batch.finish_job("1", "w2", 0)
    assert batch.job("1").state is JobState.RUNNING


def test_a_stale_heartbeat_makes_a_node_down_and_unschedulable(
    batch: LocalBatch, clock: FakeClock
) -> None:
    batch.register_node("w1", 1)
    clock.advance(31)
    assert states(batch) == {"w1": NodeState.DOWN}
    batch.submit(req())
    assert batch.counts()["queued"] == 1
    batch.heartbeat("w1")
    assert states(batch) == {"w1": NodeState.IDLE}
    assert batch.schedule_pass() == [("1", "w1")]


def test_worker_poll_runs_a_pass_only_when_one_is_due(batch: LocalBatch, clock: FakeClock) -> None:
    batch.register_node("w1", 1)
    clock.advance(31)
    batch.submit(req())  # w1 is stale: nothing starts
    batch.heartbeat("w1")
    assert batch.worker_poll("w1", want_jobs=False) == []
    assert [a.job_id for a in batch.worker_poll("w1", want_jobs=True, pass_interval=60)] == []
    clock.advance(61)
    batch.heartbeat("w1")
    assert [a.job_id for a in batch.worker_poll("w1", want_jobs=True, pass_interval=60)] == ["1"]


def test_worker_poll_reports_finished_jobs_and_refills(batch: LocalBatch) -> None:
    batch.register_node("w1", 1)
    for _ in range(2):
        batch.submit(req())
    (a,) = batch.worker_poll("w1", heartbeat=True)
    (b,) = batch.worker_poll("w1", finished=[(a.job_id, a.attempt, 3)])
    assert (a.job_id, b.job_id) == ("1", "2")
    assert batch.job("1").exit_code == 3


def test_commands_round_trip_exactly(batch: LocalBatch) -> None:
    argv = ["python3", "-c", "print('a b')", "", "it's", "new\nline", "$HOME", "*"]
    batch.register_node("w1", 1)
    batch.submit(JobRequest(command=argv))
    (a,) = batch.worker_poll("w1")
    assert a.argv == argv
    assert shlex.split(batch.job("1").command) == argv


def test_cancel_removes_queued_and_running_jobs(batch: LocalBatch) -> None:
    batch.register_node("w1", 1)
    batch.submit(req())
    batch.submit(req())
    batch.cancel("2")
    batch.cancel("1")  # running: the worker kills it, the next job may start
    batch.cancel("1")  # idempotent
    assert {state: n for state, n in batch.counts().items() if n} == {"cancelled": 2}
    assert set(batch.counts()) == {s.value for s in JobState} - {"unknown"}
    assert batch.worker_poll("w1") == []
    assert {j.id for j in batch.jobs(["cancelled"])} == {"1", "2"}


def test_errors_name_the_job_or_node(batch: LocalBatch) -> None:
    with pytest.raises(UnknownJob, match="'42'"):
        batch.preempt("42")
    with pytest.raises(UnknownJob, match="'x'"):
        batch.set_priority("x", 1)
    with pytest.raises(UnknownNode, match="'ghost'"):
        batch.drain("ghost", "why")
    with pytest.raises(UnknownNode, match="'ghost'"):
        batch.undrain("ghost")
    with pytest.raises(BatchError, match="cores must be >= 1"):
        batch.submit(req(cores=0))
    with pytest.raises(BatchError, match="walltime"):
        batch.submit(req(walltime=0))
    with pytest.raises(BatchError, match="non-empty list of strings"):
        batch.submit(JobRequest(command=[]))
    batch.register_node("w1", 1)
    batch.submit(req())
    batch.finish_job("1", "w1", 0)
    with pytest.raises(BatchError, match="already completed"):
        batch.move_to_front("1")
    with pytest.raises(BatchError, match=r"job 1 already ended \(completed\)"):
        batch.cancel("1")


def test_jobs_lists_everything_with_times(batch: LocalBatch, clock: FakeClock) -> None:
    batch.register_node("w1", 1)
    batch.submit(req())
    clock.advance(2)
    batch.submit(req())
    clock.advance(3)
    batch.finish_job("1", "w1", 0)
    jobs = batch.jobs()
    assert [(j.id, j.state) for j in jobs] == [("1", JobState.DONE), ("2", JobState.RUNNING)]
    assert jobs[0].finished_at - jobs[0].submitted_at == 5.0
    assert jobs[1].started_at - jobs[1].submitted_at == 3.0
    assert [j.id for j in batch.jobs([JobState.RUNNING])] == ["2"]


def test_the_scheduler_is_stored_in_the_file(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "b.db"
    LocalBatch(path, scheduler="fcfs", clock=clock)
    other = LocalBatch(path, clock=clock)
    assert other.scheduler == "fcfs"
    other.register_node("w1", 2)
    other.submit(req("x", cores=1, walltime=1000))  # runs: 1 core left
    other.submit(req("head", cores=2))
    other.submit(req("short", cores=1, walltime=1))
    assert [j.id for j in other.snapshot().running] == ["1"]  # FCFS: no backfill
    LocalBatch(path, scheduler="easy", clock=clock)
    assert [j.id for j in other.snapshot().running] == ["1"]
    other.schedule_pass()
    assert [j.id for j in other.snapshot().running] == ["1", "3"]  # EASY backfills
    with pytest.raises(ValueError, match="easy, fcfs"):
        LocalBatch(path, scheduler="sjf")


def test_two_processes_submitting_at_once_lose_no_job(tmp_path: Path) -> None:
    path = tmp_path / "batch.db"
    LocalBatch(path).register_node("w1", 4)
    script = (
        "import sys\n"
        "from elasticsite.batch.base import JobRequest\n"
        "from elasticsite.batch.local import LocalBatch\n"
        "b = LocalBatch(sys.argv[1])\n"
        "for i in range(150):\n"
        "    b.submit(JobRequest(['echo', sys.argv[2], str(i)]))\n"
        "    if i % 10 == 0:\n"
        "        b.heartbeat('w1')\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), tag]) for tag in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    jobs = LocalBatch(path).jobs()
    assert sorted(int(j.id) for j in jobs) == list(range(1, 301))
    assert sorted(j.command for j in jobs) == sorted(
        f"echo {tag} {i}" for tag in ("a", "b") for i in range(150)
    )
    assert sum(j.state is JobState.RUNNING for j in jobs) == 4  # w1's four cores, no more


def test_the_worker_side_imports_stay_light() -> None:
    heavy = ("pydantic", "numpy", "matplotlib", "rich", "typer")
    code = (
        "import sys, elasticsite.batch.local, elasticsite.clouds.local_worker\n"
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert out.stdout.strip() == "[]"


# -- BatchError and nothing else ------------------------------------------------------


def _damage(path: Path, *statements: str) -> None:
    """Change the file behind the batch system's back, as a bad edit or a bug would."""
    db = sqlite3.connect(path)
    with db:
        for statement in statements:
            db.execute(statement)
    db.close()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda b: b.add_node("n", "2"), r"^add_node: need a name and cores >= 1, got 'n', '2'$"),
        (lambda b: b.add_node("n", 1.5), r"^add_node: need a name and cores >= 1"),
        (lambda b: b.register_node("n", "x"), r"^register_node: need a name and cores >= 1"),
        (lambda b: b.drain("w1", None), r"^drain: reason must be a string, got None$"),
        (lambda b: b.submit(JobRequest(["x"], cores="2")), r"^submit: cores must be an integer"),
        (lambda b: b.submit(JobRequest(["x"], walltime="60")), r"^submit: walltime must be a"),
        (lambda b: b.submit(JobRequest(["x"], priority="high")), r"^submit: priority must be"),
        (lambda b: b.submit("echo hi"), r"^submit: need a JobRequest, got 'echo hi'$"),
        (lambda b: b.submit(JobRequest(None)), r"^local batch .*batch\.db: submit: "),
        (lambda b: b.set_priority("1", "high"), r"^set_priority: priority must be an integer"),
        (lambda b: b.jobs(["bogus"]), r"^local batch .*batch\.db: jobs: 'bogus' is not a valid"),
        (lambda b: b.jobs(5), r"^local batch .*batch\.db: jobs: "),
        (
            lambda b: b.worker_poll("w1", [("1", 0)]),
            r"^local batch .*: worker_poll: expected \(",
        ),
        (
            lambda b: b.record_pids("w1", [("1", 2)]),
            r"^local batch .*: record_pids: expected \(",
        ),
    ],
)
def test_a_bad_argument_is_a_batch_error_naming_the_call(
    batch: LocalBatch, call: Callable[[LocalBatch], object], message: str
) -> None:
    # Before, these raised TypeError or ValueError (which a worker, catching BatchError,
    # died of), or stored a value of the wrong type for every later read to trip on.
    batch.register_node("w1", 1)
    batch.submit(req())
    before = (batch.jobs(), batch.snapshot().nodes)
    with pytest.raises(BatchError, match=message):
        call(batch)
    assert (batch.jobs(), batch.snapshot().nodes) == before  # nothing half done


def test_a_damaged_row_is_a_batch_error_naming_the_file_and_the_call(batch: LocalBatch) -> None:
    batch.register_node("w1", 1)
    batch.submit(req())
    _damage(batch.path, "UPDATE jobs SET command = 'not json' WHERE id = 1")
    for call, name in ((batch.snapshot, "snapshot"), (batch.jobs, "jobs")):
        with pytest.raises(BatchError, match=rf"^local batch .*batch\.db: {name}: Expecting value"):
            call()
    with pytest.raises(BatchError, match=r": assigned: ") as caught:
        batch.assigned("w1")
    assert isinstance(caught.value.__cause__, ValueError)  # the cause is kept
    _damage(
        batch.path,
        "UPDATE jobs SET command = '[\"true\"]', state = 'queued', node = NULL",
        "INSERT OR REPLACE INTO meta VALUES ('last_pass', 'soon')",
    )
    with pytest.raises(BatchError, match=r": worker_poll: could not convert string to float"):
        batch.worker_poll("w1", want_jobs=True)


def test_a_scheduler_this_version_does_not_know_is_a_batch_error(batch: LocalBatch) -> None:
    batch.register_node("w1", 1)
    _damage(batch.path, "INSERT OR REPLACE INTO meta VALUES ('scheduler', 'sjf')")  # newer?
    with pytest.raises(BatchError, match=r": submit: unknown scheduling policy 'sjf'"):
        batch.submit(req())
    assert batch.jobs() == []  # the submit was rolled back whole


@pytest.mark.parametrize("job_id", [" 1", "+1", "1_0", "01 ", 1.5, True])
def test_a_job_id_that_int_would_take_names_no_job(batch: LocalBatch, job_id: object) -> None:
    for _ in range(10):
        batch.submit(req())
    with pytest.raises(UnknownJob, match="no job"):
        batch.job(job_id)  # type: ignore[arg-type]
    with pytest.raises(UnknownJob, match="no job"):
        batch.cancel(job_id)  # type: ignore[arg-type]
    assert {j.state for j in batch.jobs()} == {JobState.QUEUED}  # job 1 or 10 untouched


def test_a_state_this_version_does_not_know_is_unknown_with_one_warning(
    batch: LocalBatch, caplog: pytest.LogCaptureFixture
) -> None:
    batch.submit(req())
    with sqlite3.connect(batch.path) as conn:  # as a newer elasticsite might write it
        conn.execute("UPDATE jobs SET state = 'teleported' WHERE id = 1")
    with caplog.at_level(logging.WARNING, logger="elasticsite.batch.local"):
        assert [j.state for j in batch.jobs()] == [JobState.UNKNOWN]
        job = batch.job("1")
    assert (job.state, job.native_state) == (JobState.UNKNOWN, "teleported")
    assert batch.counts()["unknown"] == 1
    assert [r.getMessage() for r in caplog.records] == [
        "local batch: unknown job state 'teleported': shown as unknown"
    ]


def test_a_version_2_file_keeps_its_ended_jobs_as_completed_or_failed(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        for statement in filter(str.strip, local_schema._SCHEMA.split(";")):
            conn.execute(statement)
        for column in ("signal", "reason", "workdir", "worker_log"):
            conn.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
        conn.execute("ALTER TABLE nodes DROP COLUMN owner")
        rows = [(0, "done"), (3, "done"), (-9, "done"), (None, "cancelled")]
        for code, state in rows:
            conn.execute(
                "INSERT INTO jobs (command, cores, walltime, state, submitted_at, exit_code) "
                "VALUES ('[\"true\"]', 1, 60, ?, 1, ?)",
                (state, code),
            )
        conn.execute("PRAGMA user_version = 2")
    jobs = LocalBatch(path).jobs()
    assert [(j.state, j.exit_code, j.signal) for j in jobs] == [
        (JobState.COMPLETED, 0, None),
        (JobState.FAILED, 3, None),
        (JobState.FAILED, None, 9),
        (JobState.CANCELLED, None, None),
    ]


def test_a_requeued_job_says_why_its_run_ended(batch: LocalBatch, clock: FakeClock) -> None:
    batch.register_node("w1", 1)
    batch.submit(req())
    batch.register_node("w1", 1)  # its worker started again: the job's process is gone
    job = batch.job("1")  # requeued, and started again at once on the one node there is
    assert (job.state, job.attempts) == (JobState.RUNNING, 2)
    assert job.reason == "node lost (w1 started again without its jobs)"  # its last run
    clock.advance(31)  # the worker stops reporting
    batch.remove_node("w1")
    job = batch.job("1")
    assert (job.state, job.attempts, job.reason) == (
        JobState.REQUEUED, 2, "node lost (w1 stopped reporting)"
    )  # fmt: skip
    batch.register_node("w2", 1)
    batch.register_node("w2", 1)
    assert batch.job("1").attempts == 4


def test_a_job_that_ends_records_its_signal_reason_and_outcome(batch: LocalBatch) -> None:
    batch.register_node("w1", 3)
    for _ in range(3):
        batch.submit(req())
    batch.worker_poll("w1", [("1", 1, 0), ("2", 1, -9, "walltime exceeded"), ("3", 1, 126)])
    ended = {j.id: (j.state, j.exit_code, j.signal, j.reason) for j in batch.jobs()}
    assert ended == {
        "1": (JobState.COMPLETED, 0, None, ""),
        "2": (JobState.FAILED, None, 9, "walltime exceeded"),
        "3": (JobState.FAILED, 126, None, "command cannot run"),
    }
