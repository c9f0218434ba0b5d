"""Dedicated: a fixed pool, whatever the queue holds."""

from __future__ import annotations

from elasticsite.model import Cause, Decision, Drain, Launch, Undrain

from .conftest import S, cloud, decide, jobs, snap, worker


def test_empty_site_boots_the_default_pool_of_ten():
    assert decide("dedicated", snap()) == Decision(
        launch=[Launch("a", "small", 10, Cause.BASELINE)]
    )


def test_tops_up_to_the_configured_size_counting_pending_and_busy():
    site = snap([], [worker("b", S.BUSY), worker("p", S.BOOTING)])
    assert decide("dedicated", site, dedicated_workers=4) == Decision(
        launch=[Launch("a", "small", 2, Cause.BASELINE)]
    )


def test_full_pool_ignores_the_queue():
    site = snap(jobs(100, walltime=3600), [worker("b1", S.BUSY), worker("b2", S.BUSY)])
    assert decide("dedicated", site, dedicated_workers=2) == Decision()


def test_full_idle_pool_is_kept_with_an_empty_queue():
    site = snap([], [worker("i1"), worker("i2")])
    assert decide("dedicated", site, dedicated_workers=2) == Decision()


def test_surplus_idle_workers_are_released_even_when_paid_for():
    hourly = cloud(price=1.0, billing=3600.0)
    site = snap(
        [],
        [worker("b", S.BUSY), worker("i1"), worker("i2"), worker("i3")],
        [hourly],
    )
    assert decide("dedicated", site, dedicated_workers=2) == Decision(
        drain=[Drain("i1", Cause.SURPLUS), Drain("i2", Cause.SURPLUS)]
    )


def test_surplus_busy_workers_are_never_released():
    site = snap([], [worker(f"b{k}", S.BUSY) for k in range(4)])
    assert decide("dedicated", site, dedicated_workers=2) == Decision()


def test_draining_pool_member_is_put_back_before_a_launch():
    site = snap([], [worker("b", S.BUSY), worker("d", S.DRAINING)])
    assert decide("dedicated", site, dedicated_workers=3) == Decision(
        launch=[Launch("a", "small", 1, Cause.BASELINE)],
        undrain=[Undrain("d", Cause.DEMAND_RETURNED)],
    )


def test_pool_is_cut_at_max_instances():
    site = snap(clouds=[cloud(max_instances=4)])
    assert decide("dedicated", site).launched() == 4
