"""A hundred real workers through the manager on this machine: the embedded site scales."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from elasticsite.batch.base import JobRequest
from elasticsite.model import WorkerState

from .conftest import Running, fast_cloud, wait_for


@pytest.mark.slow
@pytest.mark.serial  # a hundred worker processes: a load of its own
@pytest.mark.load
def test_hundred_workers_run_a_burst_and_leave(start_site: Callable[..., Running]) -> None:
    r = start_site(
        "on_demand",
        clouds=[fast_cloud("local", 100, boot_jitter=0.25, seed=11, poll_interval=0.5)],
        manager={"interval": 0.5, "heartbeat_timeout": 30.0},
    )
    # The first hundred jobs run until the gate exists: each of the hundred workers gets
    # one, however slow the machine; the other 150 queue behind them.
    gate = r.site.state_dir / "gate"
    job = ["sh", "-c", 'while [ ! -e "$1" ]; do sleep 0.2; done', "job", str(gate)]
    for _ in range(100):
        r.site.batch.submit(JobRequest(job, 1, 300.0))
    r.submit(1.0, n=150, walltime=300.0)

    def busy() -> int:
        return sum(rec.worker.state is WorkerState.BUSY for rec in r.site.store.load())

    wait_for(lambda: busy() == 100, 240, "100 busy workers", every=0.5)
    assert sum(rec.worker.state.live for rec in r.site.store.load()) == 100  # never more
    gate.touch()
    wait_for(lambda: r.site.batch.counts()["completed"] == 250, 240, "250 jobs", every=0.5)
    wait_for(
        lambda: not any(rec.worker.state.live for rec in r.site.store.load()),
        120,
        "all 100 workers to be released",
        every=0.5,
    )
    r.stop()
    records = r.site.store.load(include_done=True)
    # If more were launched: why the last one was, and why an earlier one went.
    last = max(records, key=lambda rec: rec.worker.requested_at).worker.id
    unusual = [t for t in r.site.store.transitions() if t.worker_id == last or t.cause not in (
        "demand", "joined", "job-started", "job-finished", "idle", "drained", "booted", "shutdown",
        "cloud-reported",
    )]  # fmt: skip
    assert len(records) == 100, unusual
    assert all(rec.worker.state is WorkerState.TERMINATED for rec in records)
    jobs = r.site.batch.jobs()
    assert all(j.exit_code == 0 for j in jobs)
    assert len({j.node for j in jobs}) == 100  # work spread over the whole pool
