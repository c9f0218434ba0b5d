"""A redirection policy bursts selected jobs live: the site keeps what it can run, the
rest is redirected to the cloud workers' partition and runs there."""

from __future__ import annotations

import threading
from collections.abc import Callable

from elasticsite.batch.base import JobRequest
from elasticsite.model import JobState

from .conftest import Running, wait_for


def test_shortest_queue_redirects_waiting_jobs_to_cloud_workers(
    start_site: Callable[..., Running],
) -> None:
    r = start_site(
        "shortest_queue",
        run=False,
        batch={"type": "local", "node_partition": "cloud"},
        settings={"redirect_to": "cloud"},
    )
    batch = r.site.batch
    batch.register_node("site1", 1)  # the site's own node: one core, kept alive here
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.5):
            batch.heartbeat("site1")

    beating = threading.Thread(target=beat, daemon=True)
    beating.start()
    try:
        blocker = batch.submit(JobRequest(["sleep", "600"], 1, 900.0))
        assert batch.job(blocker).node == "site1"
        waiting = r.submit(0.3, n=3, walltime=5.0)
        assert {j.id for j in batch.snapshot().queued} == set(waiting)
        r.thread.start()
        wait_for(lambda: all(batch.job(j).state is JobState.DONE for j in waiting), 60, "3 jobs")
        r.stop()
    finally:
        stop.set()
        beating.join(5)
    workers = {rec.worker.node for rec in r.site.store.load(include_done=True)}
    for job_id in waiting:
        job = batch.job(job_id)
        assert job.attributes["partition"] == "cloud" and job.node in workers
    assert batch.job(blocker).node == "site1"  # the site's job was never touched
    batch.cancel(blocker)
