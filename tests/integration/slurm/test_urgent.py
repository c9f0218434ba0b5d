"""Urgent jobs on a real Slurm: a higher priority, next-to-run, and preemption.

The static node ``localhost`` is filled by a blocker so the jobs under test wait;
the order in which they start afterwards is what a user would see.
"""

from __future__ import annotations

import pytest
from tests.integration.slurm.conftest import TrackedSlurm, tracked, wait_for

from elasticsite.batch.base import BatchError, JobRequest
from elasticsite.batch.slurm import SlurmBatch

pytestmark = pytest.mark.slow


def fill_localhost(slurm: SlurmBatch, cores: int) -> str:
    blocker = slurm.submit(JobRequest(["sleep", "120"], cores=cores, walltime=300))
    wait_for(lambda: blocker in {j.id for j in slurm.snapshot().running}, what="the blocker")
    return blocker


def queued_ids(slurm: SlurmBatch) -> list[str]:
    """This test's queued jobs, in queue order (another user's jobs may wait too)."""
    return [j.id for j in slurm.snapshot().queued if j.id in TrackedSlurm.submitted]


def next_started(slurm: SlurmBatch, candidates: set[str]) -> str:
    started = wait_for(
        lambda: candidates & {j.id for j in slurm.snapshot().running},
        what=f"one of {sorted(candidates)} to start",
    )
    assert len(started) == 1, f"several started at once: {started}"
    return started.pop()


def test_higher_priority_reorders_the_queue_and_runs_first(
    slurm: SlurmBatch, local_cores: int
) -> None:
    blocker = fill_localhost(slurm, local_cores)
    jobs = [
        slurm.submit(JobRequest(["sleep", "30"], cores=local_cores, walltime=60)) for _ in range(3)
    ]
    assert queued_ids(slurm) == jobs
    slurm.set_priority(jobs[2], 10)
    assert queued_ids(slurm) == [jobs[2], jobs[0], jobs[1]]
    slurm.cancel(blocker)
    assert next_started(slurm, set(jobs)) == jobs[2]


def test_move_to_front_makes_a_job_the_next_to_run(slurm: SlurmBatch, local_cores: int) -> None:
    blocker = fill_localhost(slurm, local_cores)
    jobs = [
        slurm.submit(JobRequest(["sleep", "30"], cores=local_cores, walltime=60)) for _ in range(3)
    ]
    slurm.move_to_front(jobs[1])
    assert queued_ids(slurm)[0] == jobs[1]
    slurm.move_to_front(jobs[1])  # already first: no-op
    assert queued_ids(slurm)[0] == jobs[1]
    slurm.cancel(blocker)
    assert next_started(slurm, set(jobs)) == jobs[1]
    slurm.move_to_front(jobs[1])  # running: no-op


def test_urgent_partition_preempts_and_requeues_the_running_job(
    slurm: SlurmBatch, local_cores: int
) -> None:
    victim = fill_localhost(slurm, local_cores)
    urgent = tracked("urgent")
    job = urgent.submit(JobRequest(["sleep", "30"], cores=local_cores, walltime=60))
    wait_for(lambda: job in {j.id for j in slurm.snapshot().running}, what="the urgent job")
    view = slurm.snapshot()
    assert [j.id for j in view.running if j.id in TrackedSlurm.submitted] == [job]
    assert victim in {j.id for j in view.queued}  # requeued, not killed for good
    started = next(j for j in view.running if j.id == job)
    assert started.attributes["partition"] == "urgent"


def test_preempt_puts_a_running_job_back_in_the_queue(slurm: SlurmBatch, local_cores: int) -> None:
    job = fill_localhost(slurm, local_cores)
    slurm.preempt(job)
    # the job is killed (COMPLETING, still running for a moment), then queued again
    view = wait_for(
        lambda: (v := slurm.snapshot()) and job in {j.id for j in v.queued} and v,
        what="the preempted job to be queued again",
    )
    assert job not in {j.id for j in view.running}
    slurm.preempt(job)  # queued: no-op
    slurm.cancel(job)
    with pytest.raises(BatchError):
        slurm.set_priority(job, 5)  # finished jobs refuse
