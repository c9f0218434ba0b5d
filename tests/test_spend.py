"""What workers cost under the billing rule, what a site has spent, and budget periods."""

from __future__ import annotations

import calendar
import datetime as dt
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.model import CloudSpec, Worker, WorkerState, billed_cost
from elasticsite.spend import (
    Bill,
    BudgetWatch,
    Ledger,
    Refused,
    bill,
    cost_between,
    cost_by,
    forecast,
    money,
    period_bounds,
    refusal_text,
    utc,
)

S = WorkerState
HOURLY = CloudSpec("hourly", price_per_hour=0.5, billing_increment=3600)
SECONDLY = CloudSpec("secondly", price_per_hour=3.6, billing_increment=1)
FREE = CloudSpec("free")


def at(y: int, m: int, d: int, hh: int = 0, mm: int = 0, ss: int = 0) -> float:
    return calendar.timegm((y, m, d, hh, mm, ss))


def worker(wid: str, cloud: str, start: float, end: float | None = None) -> Worker:
    w = Worker(wid, cloud, "small", 1, requested_at=start, state=S.BUSY)
    if end is not None:
        w.state, w.state_since = S.TERMINATED, end
    return w


# -- periods -------------------------------------------------------------------------


def test_periods_are_calendar_days_weeks_and_months_in_utc() -> None:
    t = at(2024, 2, 29, 23, 59, 59)  # a Thursday in a leap year
    assert period_bounds(t, "day") == (at(2024, 2, 29), at(2024, 3, 1))
    assert period_bounds(t, "week") == (at(2024, 2, 26), at(2024, 3, 4))  # Monday to Monday
    assert period_bounds(t, "month") == (at(2024, 2, 1), at(2024, 3, 1))
    assert period_bounds(at(2024, 12, 31, 12), "month") == (at(2024, 12, 1), at(2025, 1, 1))
    # The first instant of a period is in it; the period's end is the next one's start.
    assert period_bounds(at(2024, 3, 1), "month") == (at(2024, 3, 1), at(2024, 4, 1))
    assert utc(at(2025, 2, 1)) == "2025-02-01 00:00 UTC"


@given(st.integers(0, 4_000_000_000), st.sampled_from(["day", "week", "month"]))
def test_every_instant_lies_in_exactly_one_period(t: int, period: str) -> None:
    lo, hi = period_bounds(t, period)  # type: ignore[arg-type]
    assert lo <= t < hi
    assert period_bounds(hi, period)[0] == hi  # type: ignore[arg-type]
    assert period_bounds(lo - 1, period)[1] == lo  # type: ignore[arg-type]
    start = dt.datetime.fromtimestamp(lo, dt.UTC)
    assert (start.hour, start.minute, start.second) == (0, 0, 0)


# -- the billing rule ------------------------------------------------------------------


def test_every_started_increment_is_paid_when_it_starts() -> None:
    assert cost_by(0, None, 0, 0.5, 3600) == 0.0
    assert cost_by(0, None, 1, 0.5, 3600) == 0.5
    assert cost_by(0, None, 3600, 0.5, 3600) == 0.5
    assert cost_by(0, None, 3601, 0.5, 3600) == 1.0
    assert cost_by(0, 10, 9000, 0.5, 3600) == 0.5  # ended after 10 s: one hour
    # The second hour of a worker alive 5000 s starts within [3600, 7200).
    assert cost_between(0, 5000, 3600, 7200, 0.5, 3600) == 0.5
    assert cost_between(0, 5000, 0, 3600, 0.5, 3600) == 0.5
    assert cost_between(0, 5000, 7200, 9000, 0.5, 3600) == 0.0


@settings(max_examples=300, deadline=None)
@given(
    start=st.floats(0, 1e6),
    life=st.floats(0, 5e5),
    cuts=st.lists(st.floats(-1e5, 2e6), max_size=6),
    increment=st.sampled_from([1.0, 60.0, 3600.0]),
)
def test_periods_add_up_to_the_whole_bill(
    start: float, life: float, cuts: list[float], increment: float
) -> None:
    """Spending is attributed to the period its increments start in: any partition of
    time into periods shares out exactly the whole bill."""
    edges = sorted({-1e6, *cuts, 3e6})
    parts = sum(
        cost_between(start, start + life, lo, hi, 2.0, increment)
        for lo, hi in itertools.pairwise(edges)
    )
    assert parts == pytest.approx(billed_cost(life, 2.0, increment), abs=1e-9)


# -- the ledger ------------------------------------------------------------------------


def test_spent_counts_finished_and_live_workers_per_cloud() -> None:
    t0 = at(2025, 3, 10, 8)
    ledger = Ledger("day")
    done = worker("w1", "hourly", t0 - 3 * 86400, t0 - 3 * 86400 + 7000)  # 2 h, days ago
    ledger.add(bill(done, {"hourly": HOURLY}), t0)
    live = [worker("w2", "hourly", t0 - 60), worker("w3", "secondly", t0 - 100)]
    spent = ledger.spent(t0, live, [HOURLY, SECONDLY, FREE])
    assert spent.by_cloud == {"hourly": 1.5, "secondly": pytest.approx(0.1), "free": 0.0}
    assert spent.total == pytest.approx(1.6)
    # Today holds the live workers' increments only.
    assert spent.period == (at(2025, 3, 10), at(2025, 3, 11))
    assert spent.period_by_cloud == {"hourly": 0.5, "secondly": pytest.approx(0.1), "free": 0.0}


def test_a_new_period_starts_from_nothing_but_the_increments_started_in_it() -> None:
    ledger = Ledger("day")
    night = at(2025, 3, 10, 23, 30)
    w = worker("w1", "hourly", night)
    assert ledger.spent(night + 1, [w], [HOURLY]).period_total == 0.5
    morning = at(2025, 3, 11, 0, 45)  # its second hour started at 00:30
    assert ledger.spent(morning, [w], [HOURLY]).period_total == 0.5
    w.state, w.state_since = S.TERMINATED, morning
    ledger.add(bill(w, {"hourly": HOURLY}), morning)
    spent = ledger.spent(morning + 10, [], [HOURLY])
    assert spent.total == 1.0 and spent.period_total == 0.5


def test_a_bill_keeps_the_price_its_cloud_had() -> None:
    ledger = Ledger()
    ledger.add(bill(worker("w1", "hourly", 0, 10), {"hourly": HOURLY}), 10)
    dearer = CloudSpec("hourly", price_per_hour=5.0, billing_increment=3600)
    assert ledger.spent(20, [], [dearer]).by_cloud == {"hourly": 0.5}


def test_restoring_gives_what_counting_gave() -> None:
    now = at(2025, 3, 10, 12)
    bills = [
        Bill("a", "hourly", now - 86400 * 2, now - 86400 * 2 + 10, 0.5, 3600),
        Bill("b", "hourly", at(2025, 3, 9, 23, 50), at(2025, 3, 10, 0, 30), 0.5, 3600),
        Bill("c", "secondly", now - 500, now - 100, 3.6, 1),
    ]
    counted = Ledger("day")
    for b in bills:
        counted.add(b, now)
    restored = Ledger("day")
    totals: dict[str, float] = {}
    for b in bills:
        totals[b.cloud] = totals.get(b.cloud, 0.0) + b.cost
    restored.restore(totals, bills, now)
    specs = [HOURLY, SECONDLY]
    assert restored.spent(now, [], specs) == counted.spent(now, [], specs)


@st.composite
def lives(draw: st.DrawFn) -> list[tuple[str, float, float]]:
    """Workers as (cloud, start, length)."""
    return draw(
        st.lists(
            st.tuples(
                st.sampled_from(["hourly", "secondly", "free", "gone"]),
                st.floats(0, 3 * 86400),
                st.floats(0, 86400),
            ),
            max_size=12,
        )
    )


@settings(max_examples=200, deadline=None)
@given(lives(), st.lists(st.floats(0, 5 * 86400), min_size=1, max_size=20))
def test_spent_never_goes_down(workers: list[tuple[str, float, float]], times: list[float]) -> None:
    """Stepping through time as a driver does (workers asked for, ended, their records
    dropped into the ledger), what was spent, in total, per cloud and within a period,
    only grows."""
    specs = [HOURLY, SECONDLY, FREE]
    by_name = {c.name: c for c in specs}
    ledger = Ledger("day")
    records: dict[str, Worker] = {}
    pending = [(s, f"w{i}", c, s + n) for i, (c, s, n) in enumerate(workers)]
    last = None
    for now in sorted(times):
        for s, wid, c, end in pending:
            if s <= now and wid not in records and end > now:
                records[wid] = worker(wid, c, s)
        for wid, w in list(records.items()):
            end = next(e for _, i, _, e in pending if i == wid)
            if w.state.live and end <= now:
                w.state, w.state_since = S.TERMINATED, now
            elif w.state.final:  # dropped a step after it ended, as the drivers do
                ledger.add(bill(records.pop(wid), by_name), now)
        spent = ledger.spent(now, records.values(), specs)
        if last is not None:
            for cloud, amount in last.by_cloud.items():
                assert spent.by_cloud.get(cloud, 0.0) >= amount - 1e-9
            if spent.period == last.period:
                assert spent.period_total >= last.period_total - 1e-9
        last = spent


def test_forecast_runs_live_workers_and_launches_to_the_period_end() -> None:
    from elasticsite.model import Cause, Launch

    now, end = 1000.0, 1000.0 + 3 * 3600
    live = [
        worker("w1", "hourly", 0.0),  # paid up to 3600; hours start at 3600, 7200, 10800
        worker("w2", "hourly", 0.0),
    ]
    live[1].state = S.TERMINATING
    total = forecast(4.0, now, end, live, [HOURLY], [Launch("hourly", "small", 2, Cause.DEMAND)])
    assert total == 4.0 + 3 * 0.5 + 2 * 3 * 0.5
    assert forecast(4.0, now, end, live, [HOURLY], (), frozenset({"w1"})) == 4.0


# -- what is remembered and said -------------------------------------------------------


def test_the_budget_watch_survives_its_json_and_bad_json_is_an_empty_watch() -> None:
    watch = BudgetWatch(10.0, Refused(1.0, 2.0, {"a": 2}, 612.5, 500.0, 3.0, False))
    assert BudgetWatch.load(watch.dump()) == watch
    assert BudgetWatch.load("{not json") == BudgetWatch()
    assert BudgetWatch.load(None) == BudgetWatch()


def test_a_refusal_is_said_in_one_line_with_the_currency() -> None:
    r = Refused(0.0, 0.0, {"public": 2, "cheap": 1}, 612.5, 500.0, at(2025, 2, 1))
    assert refusal_text(r, "EUR") == (
        "3 launches held back (1 on cheap, 2 on public): the forecast spend to "
        "2025-02-01 00:00 UTC, 612.50 EUR, would pass the budget of 500.00 EUR"
    )
    assert money(1234.5, "USD") == "1,234.50 USD"
