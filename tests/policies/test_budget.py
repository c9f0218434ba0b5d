"""The budget: no launch whose forecast spend to the period's end would pass it."""

from __future__ import annotations

import calendar
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elasticsite.model import Cause, Job, Launch, Refusal
from elasticsite.policies import PolicySettings, evaluate, get
from elasticsite.policies.power_save import decide_power
from elasticsite.snapshot import SiteSnapshot
from elasticsite.spend import Budget, forecast, period_bounds

from .conftest import S, cloud, job, jobs, run, snap, worker
from .test_properties import POLICIES, common, policy_settings, sites

NIGHT = float(calendar.timegm((2025, 1, 31, 20, 0, 0)))
"""Four hours before the month ends: an hourly worker launched now costs 4 hours."""
FEB = float(calendar.timegm((2025, 2, 1, 0, 0, 0)))
HOURLY = cloud(price=1.0, billing=3600.0)
MONTH = Budget(10.0, "month")


def at_night(queued: list[Job], workers: list | None = None, spent: float = 0.0) -> SiteSnapshot:
    s = snap(queued, workers or [], [HOURLY], now=NIGHT)
    s.spent_in_period = spent
    return s


def test_launches_stop_where_the_forecast_would_pass_the_budget() -> None:
    d = run("on_demand", at_night(jobs(5)), budget=MONTH)
    assert d.launch == [Launch("a", "small", 2, Cause.DEMAND)]  # 2 x 4 h = 8 <= 10
    assert d.refused == [
        Refusal(Launch("a", "small", 3, Cause.DEMAND), "budget", 8.0 + 3 * 4.0, 10.0, FEB)
    ]


def test_what_was_spent_in_the_period_counts() -> None:
    assert run("on_demand", at_night(jobs(5), spent=2.0), budget=MONTH).launched() == 2
    assert run("on_demand", at_night(jobs(5), spent=2.01), budget=MONTH).launched() == 1
    d = run("on_demand", at_night(jobs(5), spent=7.0), budget=MONTH)
    assert d.launch == [] and d.refused[0].forecast == 7.0 + 5 * 4.0


def test_live_workers_are_counted_to_the_period_end_and_leaving_ones_are_not() -> None:
    # Asked for at 19:30: its hours start at 20:30, 21:30, 22:30 and 23:30 (4 more).
    busy = worker("w1", S.BUSY, requested_at=NIGHT - 1800)
    d = run("on_demand", at_night(jobs(3), [busy], spent=1.0), budget=MONTH)
    assert d.launched() == 1  # 1 + 4 + 4 = 9; a second would make 13
    gone = worker("w2", S.TERMINATING, requested_at=NIGHT - 1800)
    d = run("on_demand", at_night(jobs(3), [busy, gone], spent=1.0), budget=MONTH)
    assert d.launched() == 1


def test_a_stalled_worker_being_replaced_counts_only_what_it_cost() -> None:
    stalled = worker("w1", S.BOOTING, requested_at=NIGHT - 700)
    d = run("on_demand", at_night([job()], [stalled], spent=1.0), budget=MONTH)
    assert d.launch == [Launch("a", "small", 1, Cause.REPLACEMENT)]  # 1 + 4 <= 10


def test_free_clouds_are_never_refused() -> None:
    s = snap(jobs(5), [], [replace(HOURLY, name="paid"), cloud("free", max_instances=3)], now=NIGHT)
    s.spent_in_period = 50.0
    d = run("on_demand", s, budget=MONTH)
    assert d.launch == [Launch("free", "small", 3, Cause.DEMAND)]
    assert [r.launch.count for r in d.refused] == [2]


def test_a_day_budget_looks_to_the_end_of_the_day() -> None:
    morning = NIGHT - 12 * 3600  # 08:00: sixteen hours left
    s = snap(jobs(2), [], [HOURLY], now=morning)
    assert run("on_demand", s, budget=Budget(20.0, "day")).launched() == 1
    assert run("on_demand", s, budget=Budget(40.0, "week")).launched() == 0  # to Monday


def urgent_job() -> Job:
    return replace(job(), attributes={"urgency": "red"})


def test_the_budget_is_hard_for_urgent_jobs_unless_it_has_an_urgent_extra() -> None:
    s = at_night([urgent_job()], [worker("w1", S.BUSY, requested_at=NIGHT - 1800)], spent=3.0)
    cap = {"budget": MONTH, "urgent_extra_instances": 2}
    # 3 spent + 4 to come for the busy worker: an urgent launch would make 11.
    d = run("on_demand", s, **cap)
    assert d.launch == [] and d.refused[0].launch.urgency == "red"
    assert d.refused[0].allowed == 10.0
    d = run("on_demand", s, **{**cap, "budget": replace(MONTH, urgent_extra=1.0)})
    assert d.launch == [Launch("a", "small", 1, Cause.DEMAND, (), "red")]
    assert d.refused == []


def test_urgent_launches_go_first_and_others_stay_within_the_amount() -> None:
    s = at_night([urgent_job(), *jobs(3)], spent=2.0)
    d = run("on_demand", s, budget=replace(MONTH, urgent_extra=4.0), urgent_extra_instances=1)
    # The urgent launch takes 2 + 4 = 6; one more within 10; the rest is held back.
    assert [(x.count, x.urgency) for x in d.launch] == [(1, "red"), (1, "")]
    assert sum(r.launch.count for r in d.refused) == 2


def test_power_saving_nodes_past_the_budget_are_refused_by_name() -> None:
    s = at_night([], spent=3.0)
    out = decide_power(s, PolicySettings(budget=MONTH), ["n1", "n2", "n3"], [])
    assert [x.nodes for x in out.decision.launch] == [("n1",)]
    assert out.refused == ["n2", "n3"]


# -- in random scenarios, no launch passes the budget ----------------------------------

budgets = st.builds(
    Budget,
    amount=st.sampled_from([0.5, 2.0, 10.0, 100.0, 1000.0]),
    period=st.sampled_from(["day", "week", "month"]),
)


@pytest.mark.parametrize("policy", POLICIES)
@common
@given(site=sites(), cfg=policy_settings, budget=budgets, spent=st.floats(0, 1200))
def test_launches_never_push_the_forecast_past_the_budget(policy, site, cfg, budget, spent):
    site.spent_in_period = spent
    cfg = replace(cfg, budget=budget)
    d = evaluate(get(policy), site, cfg)
    _, end = period_bounds(site.now, budget.period)
    leaving = frozenset(t.worker_id for t in d.terminate)
    paid = [x for x in d.launch if site.cloud(x.cloud).price_per_hour > 0]
    ahead = forecast(spent, site.now, end, site.workers, site.clouds, d.launch, leaving)
    assert not paid or ahead <= budget.amount + 1e-6
    # Whatever is held back would have passed it, and nothing else is dropped.
    for r in d.refused:
        assert r.forecast > r.allowed - 1e-6 and r.until == end
    without = evaluate(get(policy), site, replace(cfg, budget=None))
    assert d.launched() + sum(r.launch.count for r in d.refused) == without.launched()
