"""Cloud Scheduler mode on the embedded site: VMs of the type each job names, shared
evenly by two users; a newcomer gets their half gracefully or at once.

The two users are real (jobs run as whom they are for), so the test runs as root."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tests.users import real_users

from elasticsite.batch.base import JobRequest
from elasticsite.batch.local import LocalBatch
from elasticsite.model import Cause, JobState, WorkerState

from .conftest import Running, fast_cloud, wait_for

TYPES = [{"name": "small", "cores": 1}, {"name": "large", "cores": 2}]


def submit(r: Running, user: str, vm_type: str, n: int, seconds: float) -> list[str]:
    cores = 2 if vm_type == "large" else 1
    request = JobRequest(
        ["sleep", str(seconds)], cores, 60.0, user, attributes={"vm_type": vm_type}
    )
    return [r.site.batch.submit(request) for _ in range(n)]


def serving(r: Running) -> dict[str, int]:
    """Busy workers per user (the user whose job each runs)."""
    batch = r.site.batch
    assert isinstance(batch, LocalBatch)
    by_node = {j.node: j.user for j in batch.jobs([JobState.RUNNING])}
    out: dict[str, int] = {}
    for rec in r.site.store.load():
        user = by_node.get(rec.worker.node)
        if user is not None and rec.worker.state is WorkerState.BUSY:
            out[user] = out.get(user, 0) + 1
    return out


@pytest.mark.parametrize("rebalance", ["graceful", "immediate"])
def test_a_second_user_gets_half_the_vms_of_the_type_they_ask_for(
    start_site: Callable[..., Running], rebalance: str
) -> None:
    cloud = {**fast_cloud("local", 4), "vm_types": TYPES}
    with real_users(2) as (ann, ben):
        shared(start_site, cloud, rebalance, ann.pw_name, ben.pw_name)


def shared(
    start_site: Callable[..., Running], cloud: dict, rebalance: str, ann: str, ben: str
) -> None:
    r = start_site("cloud_scheduler", clouds=[cloud], settings={"rebalance": rebalance})
    batch = r.site.batch
    assert isinstance(batch, LocalBatch)
    firsts = submit(r, ann, "small", 8, 3.0)
    wait_for(lambda: serving(r).get(ann) == 4, 30, "the first user to have every VM")
    seconds = submit(r, ben, "large", 3, 3.0)
    wait_for(
        lambda: serving(r).get(ben) == 2 and serving(r).get(ann, 0) <= 2,
        60,
        "the second user to get their half (2 of 4 VMs)",
    )
    store = r.site.store
    fair = [
        (rec.worker.id, t.to_state)
        for rec in store.load(include_done=True)
        for t in store.transitions(rec.worker.id)
        if t.cause == Cause.FAIR_SHARE
    ]
    expected = WorkerState.DRAINING if rebalance == "graceful" else WorkerState.TERMINATING
    assert fair and all(state is expected for _, state in fair), fair
    assert store.counters().get("jobs_held", 0) >= 1
    wait_for(
        lambda: all(batch.job(j).state is JobState.DONE for j in [*firsts, *seconds]),
        120,
        "every job to finish",
    )
    done = [batch.job(j) for j in [*firsts, *seconds]]
    assert all(j.exit_code == 0 for j in done)
    types = {rec.worker.node: rec.worker.vm_type for rec in store.load(include_done=True)}
    assert {types[j.node] for j in done if j.user == ann} == {"small"}
    assert {types[j.node] for j in done if j.user == ben} == {"large"}
    assert not store.held_jobs(), "a job is still held"
    r.stop()
