"""Steady stream (paper 000): always one worker; grow one at a time above 5x waste, shrink below 3x.

The default cloud's waste time is 60 s: grow above 300 s of queued walltime,
shrink below 180 s.
"""

from __future__ import annotations

import pytest

from elasticsite.model import Cause, Decision, Drain, Launch, Undrain

from .conftest import S, cloud, decide, job, jobs, snap, worker


def test_empty_site_boots_its_baseline_worker():
    assert decide("steady_stream", snap()) == Decision(
        launch=[Launch("a", "small", 1, Cause.BASELINE)]
    )


def test_keeps_its_last_idle_worker_with_an_empty_queue():
    assert decide("steady_stream", snap([], [worker("only")])) == Decision()


def test_a_pending_worker_counts_as_the_baseline():
    assert decide("steady_stream", snap([], [worker("p", S.BOOTING)])) == Decision()


def test_draining_worker_is_not_the_baseline_and_is_put_back():
    assert decide("steady_stream", snap([], [worker("d", S.DRAINING)])) == Decision(
        undrain=[Undrain("d", Cause.DEMAND_RETURNED)]
    )


def test_min_workers_setting_sets_the_baseline():
    site = snap([], [worker("i")])
    assert decide("steady_stream", site, steady_min_workers=3) == Decision(
        launch=[Launch("a", "small", 2, Cause.BASELINE)]
    )


def test_boots_one_more_when_queued_walltime_exceeds_five_waste_times():
    site = snap([job(301)], [worker("b", S.BUSY)])
    assert decide("steady_stream", site) == Decision(launch=[Launch("a", "small", 1, Cause.DEMAND)])


def test_boots_only_one_however_large_the_queue():
    site = snap(jobs(50, walltime=3600), [worker("b", S.BUSY)])
    assert decide("steady_stream", site).launched() == 1


def test_exactly_five_waste_times_is_not_above_the_threshold():
    site = snap([job(300)], [worker("b", S.BUSY)])
    assert decide("steady_stream", site) == Decision()


@pytest.mark.parametrize("pending", [S.REQUESTED, S.BOOTING])
def test_waits_for_the_pending_worker_before_booting_another(pending):
    site = snap(jobs(50, walltime=3600), [worker("b", S.BUSY), worker("p", pending)])
    assert decide("steady_stream", site) == Decision()


def test_between_three_and_five_waste_times_nothing_changes():
    site = snap([job(250)], [worker("b", S.BUSY), worker("i1"), worker("i2")])
    assert decide("steady_stream", site) == Decision()


def test_below_three_waste_times_releases_idle_workers_beyond_the_baseline():
    site = snap([job(179)], [worker("b", S.BUSY), worker("i1"), worker("i2")])
    assert decide("steady_stream", site) == Decision(
        drain=[Drain("i1", Cause.SURPLUS), Drain("i2", Cause.SURPLUS)]
    )


def test_empty_queue_releases_all_idle_workers_but_one():
    site = snap([], [worker("i1"), worker("i2"), worker("i3")])
    assert decide("steady_stream", site) == Decision(
        drain=[Drain("i1", Cause.IDLE), Drain("i2", Cause.IDLE)]
    )


def test_busy_workers_are_never_released():
    site = snap([], [worker("b1", S.BUSY), worker("b2", S.BUSY)])
    assert decide("steady_stream", site) == Decision()


def test_draining_worker_is_put_back_when_demand_rises():
    site = snap([job(400)], [worker("b", S.BUSY), worker("d", S.DRAINING)])
    assert decide("steady_stream", site) == Decision(undrain=[Undrain("d", Cause.DEMAND_RETURNED)])


def test_thresholds_use_the_waste_time_of_the_cloud_the_next_worker_goes_to():
    slow_cheap = cloud("slow", price=0.1, boot=500.0, shutdown=100.0)  # waste 600: up at 3000
    fast_dear = cloud("fast", price=1.0, boot=50.0, shutdown=10.0)  # waste 60: up at 300
    site = snap([job(1000)], [worker("b", S.BUSY, cloud="fast")], [slow_cheap, fast_dear])
    assert decide("steady_stream", site, cloud_rule="cheapest") == Decision()
    assert decide("steady_stream", site, cloud_rule="fastest") == Decision(
        launch=[Launch("fast", "small", 1, Cause.DEMAND)]
    )


def test_custom_factors():
    site = snap([job(150)], [worker("b", S.BUSY)])
    faster = decide("steady_stream", site, steady_up_factor=2.0, steady_down_factor=2.0)
    assert faster.launched() == 1
    site = snap([job(150)], [worker("b", S.BUSY), worker("i")])
    assert decide("steady_stream", site, steady_down_factor=3.0).drain == [
        Drain("i", Cause.SURPLUS)
    ]
    assert decide("steady_stream", site, steady_down_factor=2.0) == Decision()
