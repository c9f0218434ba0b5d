"""Urgent jobs on a real Slurm: a higher priority, next-to-run, and preemption, through
the adapter's hooks and through the urgent policies that call them.

The static node ``localhost`` is filled by a blocker so the jobs under test wait;
the order in which they start afterwards is what a user would see.
"""

from __future__ import annotations

import pytest
from tests.integration.slurm.conftest import TrackedSlurm, node, tracked, wait_for

from elasticsite.batch.base import BatchError, JobRequest
from elasticsite.batch.slurm import SlurmBatch
from elasticsite.batch.urgency import elevate

pytestmark = pytest.mark.slow


def fill_localhost(slurm: SlurmBatch, cores: int) -> str:
    blocker = slurm.submit(JobRequest(["sleep", "120"], cores=cores, walltime=300))

    def full() -> bool:  # slurmctld counts the node's allocated cores a moment after
        view = slurm.snapshot()
        here = node(view, "localhost")
        return blocker in {j.id for j in view.running} and here is not None and not here.free_cores

    wait_for(full, what="the blocker running and localhost full")
    return blocker


def queue_behind(slurm: SlurmBatch, cores: int, n: int) -> list[str]:
    """``n`` jobs of ``cores`` cores each, which wait while localhost is full."""
    return [slurm.submit(JobRequest(["sleep", "30"], cores=cores, walltime=60)) for _ in range(n)]


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
    jobs = queue_behind(slurm, local_cores, 3)
    assert queued_ids(slurm) == jobs
    slurm.set_priority(jobs[2], 10)
    assert queued_ids(slurm) == [jobs[2], jobs[0], jobs[1]]
    slurm.cancel(blocker)
    assert next_started(slurm, set(jobs)) == jobs[2]


def test_move_to_front_makes_a_job_the_next_to_run(slurm: SlurmBatch, local_cores: int) -> None:
    blocker = fill_localhost(slurm, local_cores)
    jobs = queue_behind(slurm, local_cores, 3)
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


def test_an_urgent_job_next_to_run_goes_ahead_of_every_waiting_job(
    slurm: SlurmBatch, local_cores: int
) -> None:
    blocker = fill_localhost(slurm, local_cores)
    waiting = queue_behind(slurm, local_cores, 2)
    job = slurm.submit(
        JobRequest(["sleep", "5"], local_cores, 60, attributes={"urgency": "orange"})
    )
    done = elevate(slurm, job, local_cores, "next_to_run")
    assert done.preempted == [] and queued_ids(slurm)[0] == job
    slurm.cancel(blocker)
    assert next_started(slurm, {job, *waiting}) == job


def test_an_urgent_job_with_preemption_starts_at_once_and_the_victim_waits(
    slurm: SlurmBatch, local_cores: int
) -> None:
    victim = fill_localhost(slurm, local_cores)
    waiting = slurm.submit(JobRequest(["sleep", "30"], cores=local_cores, walltime=60))
    job = slurm.submit(JobRequest(["sleep", "5"], local_cores, 60, attributes={"urgency": "red"}))
    done = elevate(slurm, job, local_cores, "preemption")
    assert [j.id for j in done.preempted] == [victim]
    # Within a scheduling pass: the urgent job runs, the victim is queued again (not lost).
    assert next_started(slurm, {job, waiting}) == job
    view = slurm.snapshot()
    assert victim in {j.id for j in view.queued}
    assert victim not in {j.id for j in view.running}


def test_a_job_for_another_user_runs_as_that_user(slurm: SlurmBatch) -> None:
    # The urgent gate submits as root for the Unix user the kernel named.
    job = slurm.submit(JobRequest(["sleep", "30"], cores=1, walltime=60, user="nobody"))
    found = wait_for(lambda: next((j for j in slurm.snapshot().queued + slurm.snapshot().running
                                   if j.id == job), None), what="the job")  # fmt: skip
    assert found.user == "nobody"
    slurm.cancel(job)
    with pytest.raises(BatchError, match="not a valid user name"):
        slurm.submit(JobRequest(["true"], user="-x"))
