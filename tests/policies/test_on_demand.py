"""On demand (paper 000): one worker per queued job; idle workers go once the queue is empty."""

from __future__ import annotations

import pytest

from elasticsite.model import Cause, Decision, Drain, Launch, Undrain

from .conftest import S, cloud, decide, jobs, snap, worker


def test_boots_one_worker_per_queued_job():
    d = decide("on_demand", snap(jobs(3)))
    assert d == Decision(launch=[Launch("a", "small", 3, Cause.DEMAND)])


def test_idle_and_pending_workers_each_take_a_queued_job():
    site = snap(
        jobs(4),
        [worker("i", S.IDLE), worker("r", S.REQUESTED), worker("b", S.BOOTING)],
    )
    assert decide("on_demand", site) == Decision(launch=[Launch("a", "small", 1, Cause.DEMAND)])


def test_busy_workers_do_not_count_towards_queued_jobs():
    site = snap(jobs(2), [worker("b1", S.BUSY), worker("b2", S.BUSY)])
    assert decide("on_demand", site) == Decision(launch=[Launch("a", "small", 2, Cause.DEMAND)])


def test_enough_idle_workers_means_no_launch_and_no_release_while_jobs_wait():
    site = snap(jobs(2), [worker("i1"), worker("i2"), worker("i3")])
    assert decide("on_demand", site) == Decision()


@pytest.mark.parametrize("policy", ["on_demand", "bursts"])  # bursts releases alike
def test_empty_queue_releases_every_idle_worker_and_no_busy_one(policy: str):
    site = snap([], [worker("i1"), worker("b", S.BUSY), worker("i2"), worker("p", S.BOOTING)])
    assert decide(policy, site) == Decision(
        drain=[Drain("i1", Cause.IDLE), Drain("i2", Cause.IDLE)]
    )


def test_empty_queue_and_nothing_idle_decides_nothing():
    site = snap([], [worker("b", S.BUSY), worker("p", S.REQUESTED)])
    assert decide("on_demand", site) == Decision()


def test_draining_worker_is_put_back_before_a_new_launch():
    site = snap(jobs(2), [worker("d", S.DRAINING)])
    assert decide("on_demand", site) == Decision(
        launch=[Launch("a", "small", 1, Cause.DEMAND)],
        undrain=[Undrain("d", Cause.DEMAND_RETURNED)],
    )


def test_launches_stop_at_max_instances():
    site = snap(jobs(5), [worker("b", S.BUSY)], [cloud(max_instances=3)])
    assert decide("on_demand", site) == Decision(launch=[Launch("a", "small", 2, Cause.DEMAND)])


def test_paid_idle_worker_on_hourly_cloud_is_kept_until_its_billing_boundary():
    hourly = cloud(billing=3600.0, price=1.0)
    fresh = worker("fresh", requested_at=0.0)  # 2600 s of its hour left at t=1000
    ending = worker("ending", requested_at=-2500.0)  # 100 s left
    site = snap([], [fresh, ending], [hourly])
    assert decide("on_demand", site) == Decision(drain=[Drain("ending", Cause.BILLING_BOUNDARY)])
