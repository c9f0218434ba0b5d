"""The Slurm adapter against a real Slurm 22.05: jobs, nodes, dynamic nodes, drains."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.integration.slurm.conftest import (
    TrackedSlurm,
    fresh_node_name,
    node,
    powered_down_cloud_node,
    tracked,
    wait_for,
)

from elasticsite.batch.base import (
    BatchError,
    BatchView,
    JobRequest,
    NodeState,
    UnknownJob,
    UnknownNode,
)
from elasticsite.batch.slurm import SlurmBatch
from elasticsite.model import JobState

pytestmark = pytest.mark.slow

SLEEP = ["sleep", "60"]


def running_job(batch: SlurmBatch, job_id: str) -> bool:
    return any(j.id == job_id for j in batch.snapshot().running)


def test_job_runs_on_localhost_and_the_snapshot_says_so_exactly(
    slurm: SlurmBatch, local_cores: int
) -> None:
    job_id = slurm.submit(JobRequest(SLEEP, cores=1, walltime=120))
    wait_for(lambda: running_job(slurm, job_id), what=f"job {job_id} to run")

    def busy() -> BatchView | None:
        # On a loaded machine slurmd may answer slurmctld's ping late for a while:
        # localhost then reads as not responding (down), rightly. Wait it out.
        view = slurm.snapshot()
        local = node(view, "localhost")
        return view if local is not None and local.state is NodeState.BUSY else None

    view = wait_for(busy, 120, "localhost to read busy with the job")
    job = next(j for j in view.running if j.id == job_id)
    assert (job.state, job.cores, job.walltime, job.node, job.user) == (
        JobState.RUNNING, 1, 120.0, "localhost", "root"
    )  # fmt: skip
    assert job.started_at is not None and job.submitted_at <= job.started_at <= view.taken_at + 1
    info = job.attributes
    assert (info["partition"], info["nodes"], info["name"]) == ("debug", "localhost", "sleep")
    local = node(view, "localhost")
    assert local is not None
    assert (local.running_jobs, local.free_cores) == (1, local_cores - 1)
    assert local.registered_at is not None


def test_queued_jobs_in_slurm_priority_order(slurm: SlurmBatch, local_cores: int) -> None:
    blocker = slurm.submit(JobRequest(SLEEP, cores=local_cores, walltime=300))
    wait_for(lambda: running_job(slurm, blocker), what="the blocker to run")
    first = slurm.submit(JobRequest(["true"], cores=local_cores, walltime=60))
    second = slurm.submit(JobRequest(["true"], cores=1, walltime=3600))
    queued = [j for j in slurm.snapshot().queued if j.id in TrackedSlurm.submitted]
    assert [(j.id, j.cores, j.walltime, j.state) for j in queued] == [
        (first, local_cores, 60.0, JobState.QUEUED),
        (second, 1, 3600.0, JobState.QUEUED),
    ]
    assert queued[0].priority > queued[1].priority


def test_dynamic_node_add_drain_undrain_remove_idempotent(slurm: SlurmBatch) -> None:
    name = fresh_node_name("dyn")
    slurm.add_node(name, 3)
    slurm.add_node(name, 3)  # exists: no-op
    created = node(slurm.snapshot(), name)
    assert created is not None
    assert (created.cores, created.state, created.registered_at) == (3, NodeState.DOWN, None)
    slurm.drain(name, "scale in")
    slurm.drain(name, "scale in")
    drained = node(slurm.snapshot(), name)
    assert drained is not None and (drained.state, drained.reason) == (
        NodeState.DRAINED, "scale in"
    )  # fmt: skip
    slurm.undrain(name)
    slurm.undrain(name)
    assert getattr(node(slurm.snapshot(), name), "state", None) is NodeState.DOWN
    slurm.remove_node(name)
    slurm.remove_node(name)
    assert node(slurm.snapshot(), name) is None


def test_real_dynamic_node_runs_a_job_drain_keeps_it_remove_requeues_it(
    slurm: SlurmBatch, slurm_cluster: Path
) -> None:
    name = fresh_node_name("dyn")
    slurm.add_node(name, 1)
    started = subprocess.run(
        ["bash", str(slurm_cluster / "dynnode.sh"), "start", name, "elastic", "1"],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    up = wait_for(
        lambda: (n := node(slurm.snapshot(), name)) and n.state is NodeState.IDLE and n,
        what="the slurmd -Z node to register",
    )
    assert up.registered_at is not None and up.free_cores == 1
    elastic = tracked("elastic")
    job_id = elastic.submit(JobRequest(SLEEP, cores=1, walltime=300))
    wait_for(lambda: running_job(slurm, job_id), what=f"the job to run on {name}")
    view = slurm.snapshot()
    job = next(j for j in view.running if j.id == job_id)
    assert job.node == name
    assert getattr(node(view, name), "state", None) is NodeState.BUSY

    slurm.drain(name, "scale in")
    view = slurm.snapshot()
    still = next((j for j in view.running if j.id == job_id), None)
    assert still is not None and still.started_at == job.started_at  # not interrupted
    assert getattr(node(view, name), "state", None) is NodeState.DRAINING

    slurm.remove_node(name)  # the job goes back to the queue first
    view = slurm.snapshot()
    assert node(view, name) is None
    assert job_id in {j.id for j in view.queued}


def test_drain_never_interrupts_a_running_job(slurm: SlurmBatch, local_cores: int) -> None:
    job_id = slurm.submit(JobRequest(["sleep", "3"], cores=local_cores, walltime=60))
    wait_for(lambda: running_job(slurm, job_id), what="the job to run")
    slurm.drain("localhost", "maintenance")
    waiting = slurm.submit(JobRequest(["true"], cores=1, walltime=60))
    view = slurm.snapshot()
    assert getattr(node(view, "localhost"), "state", None) is NodeState.DRAINING
    assert job_id in {j.id for j in view.running}
    # the job ends by itself; nothing new starts on the drained node
    wait_for(
        lambda: getattr(node(slurm.snapshot(), "localhost"), "state", None) is NodeState.DRAINED,
        what="localhost to be drained",
    )
    assert waiting in {j.id for j in slurm.snapshot().queued}
    slurm.undrain("localhost")
    wait_for(
        lambda: waiting not in {j.id for j in slurm.snapshot().queued},
        what="the waiting job to start after undrain",
    )


def test_unknown_jobs_and_nodes(slurm: SlurmBatch) -> None:
    with pytest.raises(UnknownNode):
        slurm.drain("t-nosuch", "x")
    with pytest.raises(UnknownNode):
        slurm.undrain("t-nosuch")
    slurm.remove_node("t-nosuch")  # already gone: no-op
    for call in (
        lambda: slurm.set_priority("987654", 5),
        lambda: slurm.move_to_front("987654"),
        lambda: slurm.preempt("987654"),
    ):
        with pytest.raises(UnknownJob, match="987654"):
            call()
    with pytest.raises(BatchError, match="node name"):
        slurm.add_node("bad name", 1)


def test_submit_to_a_missing_partition_is_a_clear_error(slurm: SlurmBatch) -> None:
    with pytest.raises(BatchError, match="nosuchpart"):
        tracked("nosuchpart").submit(JobRequest(["true"]))


@pytest.mark.skipif(os.environ.get("ELASTICSITE_SLURM_SKIP_POWER") == "1", reason="asked")
def test_native_power_saving_starts_a_cloud_node_for_a_job(slurm: SlurmBatch) -> None:
    """power.sh (no power.env: it starts ``slurmd -b -N cloudN`` itself) powers a node up.

    Needs a powered-down cloud node: one powered up by an earlier test is powered down
    after SuspendTime (30 s) idle, then SuspendTimeout (30 s) later is powered down
    (``idle~``); while it is powering down (``idle%``) Slurm cannot give it a job.
    """

    cloud = powered_down_cloud_node()
    assert getattr(node(slurm.snapshot(), cloud), "state", None) is NodeState.DOWN
    sbatch = ["sbatch", "--parsable", "--partition=cloud", f"--nodelist={cloud}",
              "--time=10", "--output=/dev/null", "--wrap", "sleep 600"]  # fmt: skip
    job_id = subprocess.run(sbatch, capture_output=True, text=True, check=True).stdout.strip()
    TrackedSlurm.submitted.add(job_id)

    def waiting_for_node() -> str | None:
        """The node Slurm gave the job while it boots (CONFIGURING: still queued)."""
        view = slurm.snapshot()
        job = next((j for j in view.queued if j.id == job_id), None)
        if job is not None and job.attributes.get("slurm.state") == "CONFIGURING":
            return job.attributes["nodes"].split(",")[0]
        return None

    # The job outlives the test (cleanup cancels it): it is still running when looked at
    # however slowly the node came up.
    booting = wait_for(waiting_for_node, what="the job to be given a powered-down cloud node")
    assert booting == cloud  # (the node may have registered already: its boot is quick)
    # slurmctld runs ResumeProgram at once and re-checks configuring jobs every 30 s: a
    # node that registers just before ResumeTimeout (60 s) runs the job up to 30 s later.
    wait_for(lambda: running_job(slurm, job_id), 100, "the cloud node to power up and run it")
    view = slurm.snapshot()
    job = next(j for j in view.running if j.id == job_id)
    assert job.node == booting
    powered = node(view, booting)
    assert powered is not None and powered.state is NodeState.BUSY
    assert powered.registered_at is not None and powered.running_jobs == 1


def test_both_job_readers_agree_on_a_live_queue(slurm: SlurmBatch, local_cores: int) -> None:
    """The default formatted squeue and ``squeue --json`` see the same jobs, field for field."""
    blocker = slurm.submit(JobRequest(SLEEP, cores=local_cores, walltime=300))
    wait_for(lambda: running_job(slurm, blocker), what="the blocker to run")
    waiting = [slurm.submit(JobRequest(["true"], cores=c, walltime=60 * c)) for c in (1, 2)]
    fast = SlurmBatch(include_held=True, jobs_from="format").snapshot()
    slow = SlurmBatch(include_held=True, jobs_from="json").snapshot()
    mine = {blocker, *waiting}
    assert [j for j in fast.queued if j.id in mine] == [j for j in slow.queued if j.id in mine]
    assert [j for j in fast.running if j.id in mine] == [j for j in slow.running if j.id in mine]
    assert [j.id for j in fast.queued if j.id in mine] == waiting
    assert {n.name for n in fast.nodes} == {n.name for n in slow.nodes}
