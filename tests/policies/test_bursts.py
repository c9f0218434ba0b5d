"""Bursts (paper 000): boot queued walltime // (2 x waste time) workers, at least one.

The default cloud's waste time is 60 s, so one worker per 120 s of queued walltime.
Idle workers go as on demand's do: test_on_demand.py checks both policies for that.
"""

from __future__ import annotations

from elasticsite.model import Cause, Decision, Launch, Undrain

from .conftest import S, cloud, decide, job, jobs, snap, worker


def test_sizes_the_burst_by_queued_walltime_over_twice_the_waste_time():
    site = snap(jobs(5, walltime=100))  # 500 // 120 = 4
    assert decide("bursts", site) == Decision(launch=[Launch("a", "small", 4, Cause.DEMAND)])


def test_integer_division_giving_zero_still_boots_one():
    site = snap([job(119)])
    assert decide("bursts", site) == Decision(launch=[Launch("a", "small", 1, Cause.DEMAND)])


def test_idle_and_pending_workers_count_towards_the_burst():
    site = snap(
        jobs(5, walltime=100),
        [worker("i"), worker("r", S.REQUESTED), worker("b", S.BOOTING)],
    )
    assert decide("bursts", site) == Decision(launch=[Launch("a", "small", 1, Cause.DEMAND)])


def test_busy_workers_do_not_count_towards_the_burst():
    site = snap(jobs(5, walltime=100), [worker("b1", S.BUSY), worker("b2", S.BUSY)])
    assert decide("bursts", site).launched() == 4


def test_more_idle_workers_than_wanted_are_kept_while_jobs_wait():
    site = snap([job(100)], [worker(f"i{k}") for k in range(5)])
    assert decide("bursts", site) == Decision()


def test_bursts_factor_setting():
    site = snap(jobs(10, walltime=50))  # 500 // 60 = 8 (factor 1), 500 // 120 = 4 (factor 2)
    assert decide("bursts", site, bursts_factor=1.0).launched() == 8
    assert decide("bursts", site).launched() == 4


def test_never_more_workers_than_the_queued_jobs_can_fill():
    # 5 jobs of 10,000 s would want 50,000 // 60 = 833 workers; 5 can be used.
    site = snap(jobs(5, walltime=10_000))
    assert decide("bursts", site, bursts_factor=1.0).launched() == 5
    wide = snap(jobs(3, walltime=10_000, cores=4, nodes=4), clouds=[cloud(max_instances=100)])
    assert decide("bursts", wide).launched() == 12  # 3 jobs of 4 nodes on 1-core VMs


def test_cloud_without_waste_time_gets_one_worker_per_job():
    site = snap(jobs(3, walltime=10_000), clouds=[cloud(boot=0.0, shutdown=0.0)])
    assert decide("bursts", site).launched() == 3


def test_draining_workers_come_back_first():
    site = snap(jobs(3, walltime=100), [worker("d", S.DRAINING)])  # 300 // 120 = 2
    assert decide("bursts", site) == Decision(
        launch=[Launch("a", "small", 1, Cause.DEMAND)],
        undrain=[Undrain("d", Cause.DEMAND_RETURNED)],
    )


def test_burst_is_cut_at_max_instances():
    site = snap(jobs(10, walltime=1000), [worker("b", S.BUSY)], [cloud(max_instances=4)])
    assert decide("bursts", site) == Decision(launch=[Launch("a", "small", 3, Cause.DEMAND)])


def test_waste_time_is_that_of_the_preferred_cloud():
    cheap_slow = cloud("cheap", price=0.1, boot=200.0, shutdown=50.0)  # 500 // 500 = 1
    dear_fast = cloud("dear", price=0.5)  # 500 // 120 = 4
    site = snap(jobs(5, walltime=100), clouds=[cheap_slow, dear_fast])
    assert decide("bursts", site, cloud_rule="cheapest") == Decision(
        launch=[Launch("cheap", "small", 1, Cause.DEMAND)]
    )
    assert decide("bursts", site, cloud_rule="fastest") == Decision(
        launch=[Launch("dear", "small", 4, Cause.DEMAND)]
    )
