"""A spot worker on the embedded site: the cloud gives notice, the worker is drained,
then taken back; its job is requeued and finishes on another worker."""

from __future__ import annotations

from collections.abc import Callable

from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.base import InstanceState
from elasticsite.clouds.local import LocalCloud
from elasticsite.model import Cause, JobState, WorkerState

from .conftest import Running, fast_cloud, wait_for


def test_a_spot_interruption_drains_then_requeues_and_the_job_still_finishes(
    start_site: Callable[..., Running],
) -> None:
    spot = {**fast_cloud("spot", 2), "spot": True}
    r = start_site("on_demand", clouds=[spot])
    store = r.site.store
    cloud = r.site.clouds["spot"]
    batch = r.site.batch
    assert isinstance(cloud, LocalCloud) and isinstance(batch, LocalBatch)
    (job,) = r.submit(3.0)

    def busy() -> str | None:
        found = [x.worker for x in store.load() if x.worker.state is WorkerState.BUSY]
        return found[0].id if found else None

    wait_for(lambda: busy() is not None, 30, "the job to start on a spot worker")
    first = busy()
    assert first is not None
    [rec] = [x for x in store.load() if x.worker.id == first]
    assert cloud.interrupt(str(rec.worker.instance_id), notice=1.0)

    def taken_back() -> bool:
        return any(t.cause == Cause.SPOT_INTERRUPTED for t in store.transitions(first))

    wait_for(taken_back, 30, "the spot worker to be taken back")
    path = [(t.to_state, t.cause) for t in store.transitions(first)]
    assert (WorkerState.DRAINING, Cause.SPOT_NOTICE) in path, path
    assert path[-1][0] in (WorkerState.FAILED, WorkerState.TERMINATED), path
    wait_for(
        lambda: batch.job(job).state is JobState.DONE, 60, "the requeued job to finish elsewhere"
    )
    done = batch.job(job)
    assert done.exit_code == 0 and done.node != first
    gone = {i.name: i for i in cloud.describe()}[first]
    assert gone.state is InstanceState.TERMINATED and gone.reclaimed
    assert store.counters().get("spot_notices") == 1
    r.stop()
