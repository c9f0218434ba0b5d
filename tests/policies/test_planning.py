"""The shared planning every built-in policy goes through: cloud rules, caps, undrain
first, the billing-boundary hold and forced release."""

from __future__ import annotations

import pytest

from elasticsite.model import Cause, Decision, Drain, Launch, Undrain
from elasticsite.policies import CLOUD_RULES, PolicySettings
from elasticsite.policies.planning import (
    census,
    paid_time_left,
    preferred_cloud,
    scale_down,
    scale_up,
)

from .conftest import S, cloud, snap, worker

RULES = sorted(CLOUD_RULES)


def up(site, count, cause=Cause.DEMAND, **settings):
    return scale_up(site, PolicySettings(**settings), count, cause)


def down(site, count, cause=Cause.IDLE, **kw):
    settings = {k: kw.pop(k) for k in list(kw) if k in PolicySettings.__slots__}
    return scale_down(site, PolicySettings(**settings), count, cause, **kw)


def launches(decision):
    return [(x.cloud, x.count) for x in decision.launch]


# -- cloud rules -----------------------------------------------------------------


def test_cheapest_fills_the_cheapest_cloud_then_spills_over():
    site = snap(clouds=[cloud("dear", price=1.0), cloud("cheap", price=0.1, max_instances=2)])
    # Launches are listed in configuration order.
    assert up(site, 5, cloud_rule="cheapest") == Decision(
        launch=[Launch("dear", "small", 3, Cause.DEMAND), Launch("cheap", "small", 2, Cause.DEMAND)]
    )


def test_cheapest_breaks_price_ties_by_waste_time_then_configuration_order():
    slow = cloud("slow", price=0.1, boot=500.0)
    fast = cloud("fast", price=0.1)
    twin = cloud("twin", price=0.1)
    assert launches(up(snap(clouds=[slow, fast]), 1, cloud_rule="cheapest")) == [("fast", 1)]
    assert launches(up(snap(clouds=[twin, fast]), 1, cloud_rule="cheapest")) == [("twin", 1)]


def test_fastest_prefers_the_lowest_waste_time_then_the_lowest_price():
    slow_cheap = cloud("slow", price=0.0, boot=300.0)
    fast_dear = cloud("fast", price=2.0, boot=20.0, shutdown=5.0)
    fast_cheap = cloud("fast2", price=1.0, boot=20.0, shutdown=5.0)
    site = snap(clouds=[slow_cheap, fast_dear])
    assert launches(up(site, 2, cloud_rule="fastest")) == [("fast", 2)]
    site = snap(clouds=[slow_cheap, fast_dear, fast_cheap])
    assert launches(up(site, 2, cloud_rule="fastest")) == [("fast2", 2)]


def test_ordered_fills_clouds_in_configuration_order():
    private = cloud("private", price=0.0, max_instances=2, boot=600.0)
    public = cloud("public", price=1.0)
    site = snap([], [worker("w", S.BUSY, cloud="private")], [private, public])
    assert up(site, 4, cloud_rule="ordered") == Decision(
        launch=[
            Launch("private", "small", 1, Cause.DEMAND),
            Launch("public", "small", 3, Cause.DEMAND),
        ]
    )


def test_balanced_spreads_over_free_capacity_and_breaks_ties_by_price():
    site = snap(
        clouds=[cloud("a", price=0.5, max_instances=3), cloud("b", price=0.1, max_instances=3)]
    )
    assert launches(up(site, 1, cloud_rule="balanced")) == [("b", 1)]
    assert launches(up(site, 3, cloud_rule="balanced")) == [("a", 1), ("b", 2)]
    assert launches(up(site, 4, cloud_rule="balanced")) == [("a", 2), ("b", 2)]


def test_balanced_counts_live_workers_against_free_capacity():
    site = snap(
        [],
        [worker(f"a{k}", S.BUSY, cloud="a") for k in range(3)],
        [cloud("a", max_instances=5), cloud("b", max_instances=4)],
    )
    # a has 2 free, b 4: b takes two, then they alternate from a tie at 2 each.
    assert launches(up(site, 4, cloud_rule="balanced")) == [("a", 1), ("b", 3)]


def test_balanced_batch_matches_launching_one_at_a_time():
    # After one worker on "dear" both clouds have 4 free: the tie goes to the
    # cheaper cloud, just as it would if the second worker were launched alone.
    clouds = [cloud("dear", price=1.0, max_instances=5), cloud("cheap", price=0.1, max_instances=4)]
    assert launches(up(snap(clouds=clouds), 2, cloud_rule="balanced")) == [
        ("dear", 1),
        ("cheap", 1),
    ]
    after_one = snap([], [worker("d1", S.BOOTING, cloud="dear")], clouds)
    assert launches(up(after_one, 1, cloud_rule="balanced")) == [("cheap", 1)]


@pytest.mark.parametrize("rule", RULES)
def test_every_rule_skips_a_full_cloud(rule):
    site = snap(
        [],
        [worker("c1", S.BUSY, cloud="cheap"), worker("c2", S.IDLE, cloud="cheap")],
        [cloud("cheap", price=0.0, max_instances=2, boot=1.0), cloud("dear", price=1.0)],
    )
    assert launches(up(site, 3, cloud_rule=rule)) == [("dear", 3)]


@pytest.mark.parametrize("rule", RULES)
def test_no_launch_when_every_cloud_is_full(rule):
    site = snap(
        [],
        [worker("a1", S.BUSY, cloud="a"), worker("b1", S.BOOTING, cloud="b")],
        [cloud("a", max_instances=1), cloud("b", max_instances=1)],
    )
    assert up(site, 2, cloud_rule=rule) == Decision()


def test_workers_leaving_still_hold_their_cloud_slot():
    site = snap(
        [],
        [worker("t", S.TERMINATING), worker("d", S.DRAINING), worker("b", S.BUSY)],
        [cloud(max_instances=4)],
    )
    assert up(site, 3) == Decision(
        launch=[Launch("a", "small", 1, Cause.DEMAND)],
        undrain=[Undrain("d", Cause.DEMAND_RETURNED)],
    )


def test_unknown_cloud_rule_is_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="unknown cloud rule 'nearest'; choose one of cheapest"):
        up(snap(), 1, cloud_rule="nearest")


def test_preferred_cloud():
    cheap = cloud("cheap", price=0.1, max_instances=1)
    dear = cloud("dear", price=1.0)
    assert preferred_cloud(snap(clouds=[]), PolicySettings()) is None
    assert preferred_cloud(snap(clouds=[dear, cheap]), PolicySettings()) is cheap
    full = snap([], [worker("c", S.BUSY, cloud="cheap")], [dear, cheap])
    assert preferred_cloud(full, PolicySettings()) is dear
    all_full = snap([], [worker("c", S.BUSY, cloud="cheap")], [cheap])
    assert preferred_cloud(all_full, PolicySettings()) is cheap


# -- spend cap ---------------------------------------------------------------------


def test_spend_cap_limits_launches_to_what_is_left_of_it():
    site = snap([], [worker("b1", S.BUSY), worker("b2", S.BUSY)], [cloud(price=0.25)])
    # 0.50 spent of 1.00: two more at 0.25.
    assert launches(up(site, 5, spend_cap_per_hour=1.0)) == [("a", 2)]


def test_spend_cap_spills_over_to_a_dearer_cloud_only_as_far_as_it_allows():
    site = snap(clouds=[cloud("cheap", price=0.1, max_instances=3), cloud("dear", price=0.5)])
    # 3 x 0.1 = 0.3, then one at 0.5 = 0.8; a second would reach 1.3.
    assert launches(up(site, 5, spend_cap_per_hour=1.0)) == [("cheap", 3), ("dear", 1)]


def test_spend_cap_with_balanced_rule():
    site = snap(
        clouds=[cloud("a", price=0.5, max_instances=5), cloud("b", price=0.5, max_instances=5)]
    )
    assert launches(up(site, 4, cloud_rule="balanced", spend_cap_per_hour=1.0)) == [
        ("a", 1),
        ("b", 1),
    ]


@pytest.mark.parametrize("rule", RULES)
def test_free_cloud_is_not_limited_by_the_spend_cap(rule):
    site = snap(clouds=[cloud("dear", price=1.0), cloud("free", price=0.0, max_instances=3)])
    assert launches(up(site, 5, cloud_rule=rule, spend_cap_per_hour=0.0)) == [("free", 3)]


def test_no_priced_launch_once_over_the_cap():
    site = snap([], [worker(f"b{k}", S.BUSY) for k in range(3)], [cloud(price=0.5)])
    assert up(site, 2, spend_cap_per_hour=1.0) == Decision()


def test_no_cap_means_only_max_instances_limits():
    site = snap(clouds=[cloud(price=100.0, max_instances=7)])
    assert launches(up(site, 9)) == [("a", 7)]


# -- undrain first ---------------------------------------------------------------------


def test_draining_workers_are_put_back_before_any_launch():
    site = snap([], [worker("d1", S.DRAINING), worker("b", S.BUSY), worker("d2", S.DRAINING)])
    assert up(site, 3) == Decision(
        launch=[Launch("a", "small", 1, Cause.DEMAND)],
        undrain=[Undrain("d1", Cause.DEMAND_RETURNED), Undrain("d2", Cause.DEMAND_RETURNED)],
    )
    assert up(site, 1, Cause.BASELINE) == Decision(undrain=[Undrain("d1", Cause.DEMAND_RETURNED)])


def test_draining_workers_are_put_back_even_when_every_cloud_is_full():
    site = snap([], [worker("d", S.DRAINING)], [cloud(max_instances=1)])
    assert up(site, 2) == Decision(undrain=[Undrain("d", Cause.DEMAND_RETURNED)])


def test_nothing_wanted_nothing_done():
    site = snap([], [worker("d", S.DRAINING)])
    assert up(site, 0) == Decision()
    assert up(site, -3) == Decision()


# -- billing boundary hold and forced release --------------------------------------------

HOURLY = cloud("h", price=1.0, billing=3600.0)
SECOND = cloud("s", price=1.0, billing=1.0)


def test_paid_time_left_counts_from_the_request():
    w = worker("w", cloud="h", requested_at=100.0)
    assert paid_time_left(w, HOURLY, 100.0) == 3600.0
    assert paid_time_left(w, HOURLY, 1100.0) == 2600.0
    assert paid_time_left(w, HOURLY, 3650.0) == 50.0
    assert paid_time_left(w, HOURLY, 3700.0) == 3600.0  # second hour just started
    assert paid_time_left(w, cloud(billing=0.0), 500.0) == 0.0


@pytest.mark.parametrize(
    ("now", "drained"),
    [
        (1000.0, False),
        (3479.0, False),
        (3480.0, True),
        (3599.0, True),
        (3601.0, False),
        (7150.0, True),
    ],
)
def test_idle_paid_worker_is_kept_until_billing_margin_before_its_boundary(now, drained):
    site = snap([], [worker("w", cloud="h", requested_at=0.0)], [HOURLY], now=now)
    expected = Decision(drain=[Drain("w", Cause.BILLING_BOUNDARY)]) if drained else Decision()
    assert down(site, 1) == expected


def test_billing_margin_setting():
    site = snap([], [worker("w", cloud="h", requested_at=0.0)], [HOURLY], now=1000.0)
    assert down(site, 1, billing_margin=2600.0) == Decision(
        drain=[Drain("w", Cause.BILLING_BOUNDARY)]
    )
    assert down(site, 1, billing_margin=2599.0) == Decision()


@pytest.mark.parametrize(("increment", "held"), [(1.0, False), (599.0, False), (600.0, True)])
def test_only_clouds_billing_in_increments_of_ten_minutes_or_more_hold_workers(increment, held):
    spec = cloud("c", price=1.0, billing=increment)
    site = snap([], [worker("w", cloud="c", requested_at=990.0)], [spec], now=1000.0)
    expected = Decision() if held else Decision(drain=[Drain("w", Cause.IDLE)])
    assert down(site, 1) == expected


def test_a_cause_other_than_idle_is_kept_at_the_boundary():
    site = snap([], [worker("w", cloud="h", requested_at=0.0)], [HOURLY], now=3500.0)
    assert down(site, 1, Cause.SURPLUS) == Decision(drain=[Drain("w", Cause.SURPLUS)])


def test_forced_release_ignores_paid_time_and_keeps_the_callers_cause():
    site = snap([], [worker("w", cloud="h", requested_at=0.0)], [HOURLY], now=1000.0)
    assert down(site, 1, force=True) == Decision(drain=[Drain("w", Cause.IDLE)])
    assert down(site, 1, Cause.SURPLUS, force=True) == Decision(drain=[Drain("w", Cause.SURPLUS)])


def test_release_order_closest_to_boundary_then_dearest_then_id():
    cheap_sec = cloud("cs", price=0.1, billing=1.0)
    site = snap(
        [],
        [
            worker("h-late", cloud="h", requested_at=-2500.0),  # 100 s left of its hour
            worker("s-b", cloud="s"),
            worker("cheap", cloud="cs"),
            worker("s-a", cloud="s"),
        ],
        [HOURLY, SECOND, cheap_sec],
    )
    assert [d.worker_id for d in down(site, 4).drain] == ["s-a", "s-b", "cheap", "h-late"]
    assert down(site, 1) == Decision(drain=[Drain("s-a", Cause.IDLE)])


def test_release_keeps_the_requested_number_serving():
    site = snap([], [worker("b", S.BUSY), worker("p", S.BOOTING), worker("i1"), worker("i2")])
    assert down(site, 10, keep=3) == Decision(drain=[Drain("i1", Cause.IDLE)])
    assert down(site, 10, keep=4) == Decision()


def test_only_idle_workers_are_released():
    states = [S.REQUESTED, S.BOOTING, S.BUSY, S.DRAINING, S.TERMINATING, S.TERMINATED, S.FAILED]
    site = snap([], [worker(s.value, s) for s in states])
    assert down(site, 10, force=True) == Decision()


def test_census_counts_each_state_and_the_spend():
    site = snap(
        [],
        [
            worker("r", S.REQUESTED, cores=2),
            worker("bo", S.BOOTING, cores=4),
            worker("i", S.IDLE, cores=2),
            worker("i0", S.IDLE, cores=3, free=0),  # unreported free cores: all of them
            worker("bu", S.BUSY, cores=4, free=1),
            worker("d", S.DRAINING, cores=8, free=8),
            worker("t", S.TERMINATING),
            worker("x", S.TERMINATED),
            worker("f", S.FAILED),
        ],
        [cloud(price=0.5)],
    )
    c = census(site)
    assert (c.pending, c.booting, c.idle, c.busy, c.draining, c.terminating) == (2, 1, 2, 1, 1, 1)
    assert (c.free_cores, c.pending_cores, c.serving) == (6, 6, 5)
    assert c.live_by_cloud == {"a": 7}
    assert c.spend_per_hour == pytest.approx(3.5)
