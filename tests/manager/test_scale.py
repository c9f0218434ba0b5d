"""A hundred real workers through the manager on this machine: the embedded site scales."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from elasticsite.model import WorkerState

from .conftest import Running, fast_cloud, wait_for


@pytest.mark.slow
def test_hundred_workers_run_a_burst_and_leave(start_site: Callable[..., Running]) -> None:
    r = start_site(
        "on_demand",
        clouds=[fast_cloud("local", 100, boot_jitter=0.25, seed=11, poll_interval=0.5)],
        manager={"interval": 0.5, "heartbeat_timeout": 30.0},
    )
    r.submit(1.0, n=250, walltime=30.0)
    peak = 0

    def done() -> bool:
        nonlocal peak
        live = sum(rec.worker.state.live for rec in r.site.store.load())
        peak = max(peak, live)
        return r.site.batch.counts()["completed"] == 250

    wait_for(done, 120, "250 jobs on up to 100 workers", every=0.5)
    wait_for(
        lambda: not any(rec.worker.state.live for rec in r.site.store.load()),
        60,
        "all 100 workers to be released",
        every=0.5,
    )
    r.stop()
    records = r.site.store.load(include_done=True)
    assert peak == 100 and len(records) == 100
    assert all(rec.worker.state is WorkerState.TERMINATED for rec in records)
    jobs = r.site.batch.jobs()
    assert all(j.exit_code == 0 for j in jobs)
    # Work spread over the pool (late boots may find the queue already empty).
    assert len({j.node for j in jobs}) >= 50
