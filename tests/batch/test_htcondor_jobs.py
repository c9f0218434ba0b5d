"""HTCondor job states and one job's detail: the recorded job ad, and the fake schedd's
queue and history (ads copied from the recorded one, ended as the manual describes)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tests.batch.htcondor_fake import FakeCondorPool

from elasticsite.batch.base import BatchError, JobRequest, UnknownJob
from elasticsite.batch.htcondor import CondorBatch
from elasticsite.batch.htcondor_jobs import detail_from_ad
from elasticsite.batch.htcondor_output import parse_long
from elasticsite.batch.htcondor_states import ending, job_status
from elasticsite.model import JobState, state_text

FIXTURES = Path(__file__).parent / "fixtures" / "htcondor"


@pytest.mark.parametrize(
    ("status", "runs", "expected"),
    [
        (1, 0, JobState.QUEUED),
        (1, 2, JobState.REQUEUED),
        (2, 1, JobState.RUNNING),
        (3, 0, JobState.CANCELLED),
        (5, 1, JobState.HELD),
        (6, 1, JobState.RUNNING),
        (7, 1, JobState.RUNNING),
    ],
)
def test_every_job_status_translates(status: int, runs: int, expected: JobState) -> None:
    assert job_status(status, runs)[0] is expected


def test_an_unknown_job_status_is_unknown_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="elasticsite.batch.htcondor"):
        assert job_status(42)[0] is JobState.UNKNOWN
        assert job_status(42)[0] is JobState.UNKNOWN
    assert [r.getMessage() for r in caplog.records] == [
        "unknown HTCondor JobStatus 42: shown as unknown (see docs/jobs.md)"
    ]


def test_a_completed_job_ends_by_its_exit_code_or_signal() -> None:
    assert ending(False, None, 0) == (JobState.COMPLETED, 0, None, "")
    assert ending(False, None, 127) == (JobState.FAILED, 127, None, "command not found")
    assert ending(True, 9, None) == (JobState.FAILED, None, 9, "")


def test_the_recorded_running_job_ad() -> None:
    (ad,) = parse_long((FIXTURES / "7.4" / "condor_q-long.txt").read_text())
    job = detail_from_ad(ad)
    assert (job.state, job.attempts, job.node, job.user) == (
        JobState.RUNNING, 1, "fedora13vm0.localdomain", "fpierfed"
    )  # fmt: skip
    assert job.stdout == "/home/fpierfed/bcw/condor/bcw/dag/processMef.out"
    assert job.stderr == "/home/fpierfed/bcw/condor/bcw/dag/processMef.err"
    assert job.notes == ("its HTCondor event log: /home/fpierfed/bcw/condor/bcw/dag/DATASET.log",)


@pytest.fixture
def pool() -> FakeCondorPool:
    fake = FakeCondorPool()
    fake.startd_joins("w1", 2)
    return fake


def test_ended_jobs_come_from_the_history_with_how_they_ended(pool: FakeCondorPool) -> None:
    batch = CondorBatch(pool)
    missing = batch.submit(JobRequest(["es-no-such-command"]))
    killed = batch.submit(JobRequest(["sleep", "600"]))
    pool.job_ends(missing, 127)
    pool.job_ends(killed, signal=9)
    done = batch.job(missing)
    assert state_text(done) == "failed (exit 127: command not found)"
    assert (done.node, done.attempts) == ("w1", 1)
    assert done.notes[0] == "from the schedd's history (the job left the queue)"
    assert state_text(batch.job(killed)) == "failed (killed by signal 9 (SIGKILL))"
    assert batch.snapshot().running == []
    with pytest.raises(UnknownJob, match="queue or history"):
        batch.job("99.0")
    with pytest.raises(UnknownJob, match=r"ids are CLUSTER\.PROC"):
        batch.job("1; rm")


def test_cancel_removes_and_the_schedd_keeps_the_reason(pool: FakeCondorPool) -> None:
    batch = CondorBatch(pool)
    running = batch.submit(JobRequest(["sleep", "600"], cores=2))
    queued = batch.submit(JobRequest(["sleep", "600"], cores=2))
    batch.cancel(queued)
    batch.cancel(queued)  # removed already: no-op
    batch.cancel(running)
    for job_id in (queued, running):
        job = batch.job(job_id)
        assert (job.state, job.reason) == (JobState.CANCELLED, "cancelled through elasticsite")
    assert [c for c in pool.calls if c[:2] == ("act", "Remove")] == [
        ("act", "Remove", queued), ("act", "Remove", running)
    ]  # fmt: skip
    pool.job_ends(batch.submit(JobRequest(["true"])), 0)
    with pytest.raises(BatchError, match=r"already ended \(completed\)"):
        batch.cancel("3.0")


def test_a_refused_remove_says_so(pool: FakeCondorPool) -> None:
    batch = CondorBatch(pool)
    job_id = batch.submit(JobRequest(["sleep", "600"]))
    pool.denied.add(int(job_id.split(".")[0]))
    with pytest.raises(BatchError, match=r"the schedd refused \(permission denied"):
        batch.cancel(job_id)
    assert batch.job(job_id).state is JobState.RUNNING


def test_a_preempted_job_waits_again_as_requeued(pool: FakeCondorPool) -> None:
    batch = CondorBatch(pool)
    batch.drain("w1", "keep it queued")
    job_id = batch.submit(JobRequest(["sleep", "600"]))
    batch.undrain("w1")
    assert batch.job(job_id).state is JobState.RUNNING
    batch.drain("w1", "keep it queued")
    batch.preempt(job_id)
    job = batch.job(job_id)
    assert (job.state, job.attempts) == (JobState.REQUEUED, 1)
    assert [j.id for j in batch.snapshot().queued] == [job_id]
