"""Core demand (paper 001): launch = queued cores - (free worker cores + pending cores)."""

from __future__ import annotations

from elasticsite.model import Cause, Decision, Drain, Launch, Undrain

from .conftest import S, cloud, decide, job, jobs, snap, worker

QUAD = cloud(cores=4)
"""The default cloud with four-core workers."""


def test_launches_for_the_cores_queued_jobs_ask_for():
    site = snap(jobs(3, cores=4), clouds=[QUAD])
    assert decide("core_demand", site) == Decision(launch=[Launch("a", "small", 3, Cause.DEMAND)])


def test_one_core_workers_means_one_worker_per_core():
    site = snap([job(cores=2, nodes=2), job(cores=3, nodes=3)])
    assert decide("core_demand", site).launched() == 5


def test_core_deficit_is_rounded_up_to_whole_workers():
    site = snap([job(cores=10, nodes=3)], clouds=[QUAD])  # 4, 3 and 3 cores
    assert decide("core_demand", site).launched() == 3


def test_free_cores_of_idle_and_busy_workers_and_pending_cores_are_subtracted():
    site = snap(
        jobs(3, cores=4),  # 12 cores
        [
            worker("i", S.IDLE, cores=4),  # 4 free
            worker("b", S.BUSY, cores=4, free=2),  # 2 free
            worker("p", S.BOOTING, cores=4),  # 4 coming
            worker("d", S.DRAINING, cores=4, free=4),  # takes no new job: not counted
        ],
        [QUAD],
    )
    # deficit 12 - 10 = 2 cores -> one more worker; the draining one is it.
    assert decide("core_demand", site) == Decision(undrain=[Undrain("d", Cause.DEMAND_RETURNED)])


def test_no_deficit_no_surplus_decides_nothing():
    site = snap([job(cores=4)], [worker("i", cores=4)], [QUAD])
    assert decide("core_demand", site) == Decision()


def test_empty_queue_releases_every_idle_worker():
    site = snap([], [worker("i1", cores=4), worker("b", S.BUSY, cores=4), worker("i2", cores=2)])
    assert decide("core_demand", site) == Decision(
        drain=[Drain("i1", Cause.IDLE), Drain("i2", Cause.IDLE)]
    )


def test_releases_only_the_idle_workers_whose_cores_no_queued_job_needs():
    # 9 free cores for an 8-core job: only the one-core worker is surplus. The
    # eight-core one sorts first by id and must still be kept for the job.
    site = snap(
        [job(cores=8)],
        [worker("a-big", cores=8), worker("b-small", cores=1)],
        [cloud(cores=8)],
    )
    assert decide("core_demand", site) == Decision(drain=[Drain("b-small", Cause.SURPLUS)])


def test_releases_smallest_idle_workers_first_while_cores_are_surplus():
    site = snap(
        [job(cores=3)],
        [worker("w4", cores=4), worker("w1", cores=1), worker("w2", cores=2)],
        [QUAD],
    )
    # free 7, needed 3, surplus 4: the 1- and 2-core workers go, the 4-core one stays.
    assert decide("core_demand", site) == Decision(
        drain=[Drain("w1", Cause.SURPLUS), Drain("w2", Cause.SURPLUS)]
    )


def test_surplus_release_still_waits_for_the_billing_boundary():
    hourly = cloud(price=1.0, billing=3600.0)
    site = snap(
        [], [worker("fresh", requested_at=0.0), worker("ending", requested_at=-2550.0)], [hourly]
    )
    assert decide("core_demand", site) == Decision(drain=[Drain("ending", Cause.BILLING_BOUNDARY)])
