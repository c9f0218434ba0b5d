"""Money: what workers cost under their cloud's billing rule, what was spent, and a budget.

A cloud bills every started ``billing_increment`` in full (:func:`~elasticsite.model.
billed_cost`), from the instant the worker was asked for until it ended. So the money
one worker has cost by instant ``t`` is a step function that only grows,
``C(t) = billed_cost(min(t, end) - start)``, and what it cost within ``[lo, hi)`` is
``C(hi) - C(lo)``: the increments that *started* then. Spending is attributed to the
period in which each increment starts, so the periods add up to the total.

A budget period is a calendar day, week (from Monday 00:00) or month, in UTC.

The :class:`Ledger` keeps what finished workers cost as running sums (a driver adds a
worker's :class:`Bill` when it drops the worker's record); what a worker still on record
costs is computed from its lifetime when asked. The live manager persists the bills in
its store; the simulator keeps them in memory. :class:`BudgetWatch` is what the manager
remembers of its budget (the 80% warning given, the launches held back), and the
``*_text`` helpers say money the same way everywhere. Pure: no clock, no I/O.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from elasticsite.model import CloudSpec, Launch, Worker, WorkerState, billed_cost

__all__ = [
    "PERIODS",
    "WARN_SHARE",
    "WATCH_KEY",
    "Bill",
    "Budget",
    "BudgetWatch",
    "Ledger",
    "Period",
    "Refused",
    "Spent",
    "bill",
    "cost_between",
    "cost_by",
    "forecast",
    "money",
    "period_bounds",
    "refusal_text",
    "utc",
]

Period = Literal["day", "week", "month"]
PERIODS: tuple[Period, ...] = ("day", "week", "month")
_UTC = dt.UTC
_FINAL = frozenset(s for s in WorkerState if s.final)
_LIVE = frozenset(s for s in WorkerState if s.live)


@dataclass(frozen=True, slots=True)
class Budget:
    """Money the site may spend per calendar ``period`` (UTC).

    No launch is made whose forecast spend to the period's end would pass ``amount``;
    launches for urgent jobs may pass it by ``urgent_extra`` (0: the budget is hard for
    them too).
    """

    amount: float
    period: Period = "month"
    urgent_extra: float = 0.0


def period_bounds(at: float, period: Period) -> tuple[float, float]:
    """The calendar ``period`` (UTC) holding the instant ``at``: ``(start, end)``,
    start included, end excluded."""
    when = dt.datetime.fromtimestamp(at, _UTC)
    day = dt.datetime(when.year, when.month, when.day, tzinfo=_UTC)
    if period == "day":
        start, end = day, day + dt.timedelta(days=1)
    elif period == "week":
        start = day - dt.timedelta(days=when.weekday())
        end = start + dt.timedelta(days=7)
    elif period == "month":
        start = day.replace(day=1)
        end = (start + dt.timedelta(days=32)).replace(day=1)
    else:
        raise ValueError(f"unknown budget period {period!r}; choose day, week or month")
    return start.timestamp(), end.timestamp()


def cost_by(
    start: float, end: float | None, at: float, price_per_hour: float, increment: float
) -> float:
    """What a worker alive from ``start`` until ``end`` (None: still alive) has cost by
    the instant ``at``."""
    stop = at if end is None else min(at, end)
    return billed_cost(stop - start, price_per_hour, increment)


def cost_between(
    start: float,
    end: float | None,
    lo: float,
    hi: float,
    price_per_hour: float,
    increment: float,
) -> float:
    """What the billing increments of a worker alive ``[start, end)`` that start within
    ``[lo, hi)`` cost."""
    if hi <= lo:
        return 0.0
    return max(
        0.0,
        cost_by(start, end, hi, price_per_hour, increment)
        - cost_by(start, end, lo, price_per_hour, increment),
    )


@dataclass(frozen=True, slots=True)
class Bill:
    """What one finished worker cost, fixed at the price its cloud had when it ended."""

    worker_id: str
    cloud: str
    start: float
    end: float
    price_per_hour: float
    increment: float

    @property
    def cost(self) -> float:
        return billed_cost(self.end - self.start, self.price_per_hour, self.increment)


def _spec_of(cloud: str, specs: Mapping[str, CloudSpec]) -> tuple[float, float]:
    spec = specs.get(cloud)
    # A cloud no longer configured: its price is not known any more.
    return (spec.price_per_hour, spec.billing_increment) if spec else (0.0, 1.0)


def _end(worker: Worker) -> float | None:
    """When a worker stopped being billed: its move to a final state (None while live)."""
    return max(worker.state_since, worker.requested_at) if worker.state.final else None


def bill(worker: Worker, specs: Mapping[str, CloudSpec]) -> Bill:
    """The bill of a finished worker (its record is about to be dropped)."""
    price, increment = _spec_of(worker.cloud, specs)
    end = _end(worker)
    return Bill(
        worker.id,
        worker.cloud,
        worker.requested_at,
        worker.requested_at if end is None else end,
        price,
        increment,
    )


@dataclass(frozen=True, slots=True)
class Spent:
    """Money spent by instant ``at``, per cloud: since the site's first worker, and in
    the budget's current ``period`` (``(start, end)``; None without a budget)."""

    at: float
    by_cloud: Mapping[str, float] = field(default_factory=dict)
    period: tuple[float, float] | None = None
    period_by_cloud: Mapping[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.by_cloud.values())

    @property
    def period_total(self) -> float:
        return sum(self.period_by_cloud.values())


class Ledger:
    """What finished workers cost, per cloud, since the first one and in the current
    budget period; with the workers still on record, what the site has spent."""

    def __init__(self, period: Period | None = None) -> None:
        self.period = period
        self.totals: dict[str, float] = {}
        self._bounds: tuple[float, float] | None = None
        self._in_period: dict[str, float] = {}

    def restore(self, totals: Mapping[str, float], bills: Iterable[Bill], now: float) -> None:
        """Start from the sums of every bill (``totals``) and the bills that may fall in
        ``now``'s period (at least those ending after its start)."""
        self.totals = dict(totals)
        self._bounds = None
        self._roll(now)
        if self._bounds is not None:
            lo, hi = self._bounds
            for b in bills:
                self._count(b, lo, hi)

    def bounds(self, now: float) -> tuple[float, float] | None:
        """The budget period holding ``now`` (None without a budget)."""
        return None if self.period is None else period_bounds(now, self.period)

    def _roll(self, now: float) -> None:
        bounds = self.bounds(now)
        if bounds != self._bounds:
            # Every bill added so far ended before ``now``'s period began: nothing of
            # theirs falls in it.
            self._bounds = bounds
            self._in_period = {}

    def _count(self, b: Bill, lo: float, hi: float) -> None:
        part = cost_between(b.start, b.end, lo, hi, b.price_per_hour, b.increment)
        if part:
            self._in_period[b.cloud] = self._in_period.get(b.cloud, 0.0) + part

    def add(self, b: Bill, now: float) -> None:
        """Count a finished worker's bill (its end is at or before ``now``)."""
        self.totals[b.cloud] = self.totals.get(b.cloud, 0.0) + b.cost
        self._roll(now)
        if self._bounds is not None:
            self._count(b, *self._bounds)

    def spent(self, now: float, workers: Iterable[Worker], specs: Sequence[CloudSpec]) -> Spent:
        """The money spent by ``now``: the bills added, plus what each of ``workers``
        (every worker still on record, finished or not, none of them billed yet) has
        cost by then."""
        return self.later(now, list(workers), specs)()

    def later(
        self, now: float, workers: Sequence[Worker], specs: Sequence[CloudSpec]
    ) -> Callable[[], Spent]:
        """:meth:`spent`, counted when first asked (then kept): a pass over the workers
        that a step without a budget does not pay for. The bills are taken now; the
        workers may move on meanwhile, which changes nothing of what they cost by
        ``now``."""
        self._roll(now)
        totals, period, bounds = dict(self.totals), dict(self._in_period), self._bounds
        specs = tuple(specs)

        @functools.cache
        def count() -> Spent:
            _add_workers(totals, period, bounds, now, workers, specs)
            return Spent(now, totals, bounds, period)

        return count


def _add_workers(
    totals: dict[str, float],
    period: dict[str, float],
    bounds: tuple[float, float] | None,
    now: float,
    workers: Iterable[Worker],
    specs: Sequence[CloudSpec],
) -> None:
    """Add what each worker has cost by ``now`` (and since the period began) to the sums."""
    lo = bounds[0] if bounds is not None else None
    rates = _rates(specs)
    final, ceil = _FINAL, math.ceil
    # Over every worker on record: billed_cost inlined.
    for w in workers:
        rate = rates.get(w.cloud)
        if rate is None:  # free, or a cloud no longer configured
            continue
        inc, per = rate
        start = w.requested_at
        stop = min(now, max(w.state_since, start)) if w.state in final else now
        elapsed = stop - start
        n = ceil(elapsed / inc - 1e-9) if elapsed > 0 else 0
        if not n:
            continue
        cloud = w.cloud
        totals[cloud] = totals.get(cloud, 0.0) + n * per
        if lo is not None:
            before = min(lo, stop) - start
            n -= ceil(before / inc - 1e-9) if before > 0 else 0
            period[cloud] = period.get(cloud, 0.0) + n * per
    for spec in specs:  # every configured cloud is shown, even one never used
        totals.setdefault(spec.name, 0.0)
        if bounds is not None:
            period.setdefault(spec.name, 0.0)


def _rates(specs: Iterable[CloudSpec]) -> dict[str, tuple[float, float]]:
    """Each paying cloud's billing increment and what one increment costs."""
    return {
        c.name: (max(c.billing_increment, 1e-9), c.billing_increment * c.price_per_hour / 3600)
        for c in specs
        if c.price_per_hour > 0
    }


def forecast(
    spent_in_period: float,
    now: float,
    period_end: float,
    workers: Iterable[Worker],
    specs: Sequence[CloudSpec],
    launches: Iterable[Launch] = (),
    leaving: frozenset[str] = frozenset(),
) -> float:
    """What the period will have cost by ``period_end``: ``spent_in_period``, plus every
    live worker (but those terminating or in ``leaving``) and every launch running until
    then at its cloud's price, under its billing rule. An upper bound: a worker that
    goes earlier costs less."""
    rates = _rates(specs)
    total = spent_in_period
    ceil, live, leaving_state = math.ceil, _LIVE, WorkerState.TERMINATING
    for w in workers:
        st = w.state
        rate = rates.get(w.cloud)
        if rate is None or st not in live or st is leaving_state or w.id in leaving:
            continue
        inc, per = rate
        start = w.requested_at
        to_end, to_now = period_end - start, now - start
        n = ceil(to_end / inc - 1e-9) if to_end > 0 else 0
        n -= ceil(to_now / inc - 1e-9) if to_now > 0 else 0
        total += max(0, n) * per
    for x in launches:
        price, increment = _spec_of(x.cloud, {c.name: c for c in specs})
        total += x.count * billed_cost(period_end - now, price, increment)
    return total


WATCH_KEY = "budget"
"""The manager store's meta key holding its :class:`BudgetWatch` as JSON."""
WARN_SHARE = 0.8
"""The share of the budget whose spending is warned about, once per period."""


@dataclass(slots=True)
class Refused:
    """The budget's last run of refusals, as the manager keeps it: launches per cloud
    held back at the last step that refused, and the forecast that refused them."""

    since: float
    last: float
    launches: dict[str, int]
    forecast: float
    allowed: float
    until: float
    active: bool = True
    """Still refusing at the manager's last step (else launches were allowed since)."""


@dataclass(slots=True)
class BudgetWatch:
    """What the manager remembers of its budget across steps and restarts (kept in its
    store as JSON, read by ``status`` and the dashboard)."""

    warned: float | None = None
    """The start of the last period whose spending passed :data:`WARN_SHARE`."""
    refused: Refused | None = None

    def dump(self) -> str:
        r = self.refused
        return json.dumps(
            {
                "warned": self.warned,
                "refused": None
                if r is None
                else {
                    "since": r.since,
                    "last": r.last,
                    "launches": r.launches,
                    "forecast": r.forecast,
                    "allowed": r.allowed,
                    "until": r.until,
                    "active": r.active,
                },
            },
            sort_keys=True,
        )

    @classmethod
    def load(cls, text: str | None) -> BudgetWatch:
        """The watch saved as ``text``; an empty one when there is none or it is unreadable."""
        try:
            data = json.loads(text or "{}")
            warned = data.get("warned")
            r = data.get("refused")
            refused = None
            if r is not None:
                refused = Refused(
                    float(r["since"]),
                    float(r["last"]),
                    {str(k): int(v) for k, v in r["launches"].items()},
                    float(r["forecast"]),
                    float(r["allowed"]),
                    float(r["until"]),
                    bool(r["active"]),
                )
            return cls(None if warned is None else float(warned), refused)
        except (ValueError, TypeError, KeyError, AttributeError):
            return cls()


def money(amount: float, currency: str) -> str:
    """``12.34 USD``."""
    return f"{amount:,.2f} {currency}"


def utc(at: float) -> str:
    """``2025-02-01 00:00 UTC``: how budget periods are told."""
    return dt.datetime.fromtimestamp(at, _UTC).strftime("%Y-%m-%d %H:%M UTC")


def refusal_text(r: Refused, currency: str) -> str:
    """Why launches were held back, in one line."""
    n = sum(r.launches.values())
    where = ", ".join(f"{k} on {c}" for c, k in sorted(r.launches.items()))
    return (
        f"{n} launch{'es' if n != 1 else ''} held back ({where}): the forecast spend to "
        f"{utc(r.until)}, {money(r.forecast, currency)}, would pass the budget of "
        f"{money(r.allowed, currency)}"
    )
