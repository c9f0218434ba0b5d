"""What the site has spent, kept by the manager, and its budget watched.

Every worker whose record the manager drops (terminated, or failed with its instance
gone) leaves a bill in the store (``bills``: its cloud, lifetime and price then), in the
same transaction: what was spent survives restarts and later price changes. What the
site has spent at an instant is those bills plus what every worker still on record has
cost so far (:class:`~elasticsite.spend.Ledger`). A store from before bills were kept
has its finished workers billed at the configured prices when the manager opens it.

Each step gives the snapshot what was spent in the budget's period (the budget itself
is enforced by the pure :mod:`elasticsite.policies.budget`), then :meth:`Spending.review`
logs a WARNING once per period when the spending passes 80% of the budget, and one when
the budget starts (and stops) holding launches back, remembering both in the store for
``status`` and the dashboard.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from elasticsite.manager.store import StateStore
from elasticsite.model import CloudSpec, Decision, Worker, WorkerState
from elasticsite.snapshot import SiteSnapshot
from elasticsite.spend import (
    WARN_SHARE,
    WATCH_KEY,
    Bill,
    Budget,
    BudgetWatch,
    Ledger,
    Refused,
    Spent,
    bill,
    forecast,
    money,
    refusal_text,
    utc,
)

__all__ = ["Spending", "SpendingView", "spending_view"]

log = logging.getLogger("elasticsite.manager.budget")


def _ledger(
    store: StateStore, specs: Sequence[CloudSpec], budget: Budget | None, now: float
) -> Ledger:
    """The ledger of every bill in the store (finished workers without one counted at
    the configured prices: ``billed``)."""
    ledger = Ledger(budget.period if budget else None)
    lo = ledger.bounds(now)
    ledger.restore(store.bill_totals(), store.bills_ending_after(lo[0]) if lo else (), now)
    by_name = {c.name: c for c in specs}
    for w in store.unbilled_done():
        ledger.add(bill(w, by_name), now)
    return ledger


class Spending:
    """The manager's ledger and budget watch (used on the loop's thread only)."""

    def __init__(
        self,
        store: StateStore,
        specs: Sequence[CloudSpec],
        budget: Budget | None,
        currency: str,
        now: float,
    ) -> None:
        self.store = store
        self.specs = list(specs)
        self._by_name = {c.name: c for c in specs}
        self.budget = budget
        self.currency = currency
        unbilled = store.unbilled_done()
        if unbilled:  # finished before this version kept bills: at today's prices
            store.add_bills(bill(w, self._by_name) for w in unbilled)
            log.info("billed %d finished workers kept from before at the configured prices",
                     len(unbilled))  # fmt: skip
        self.ledger = _ledger(store, specs, budget, now)
        self.watch = BudgetWatch.load(store.get_meta(WATCH_KEY))

    def spent(self, now: float, workers: Iterable[Worker]) -> Spent:
        """What the site has spent by ``now``; ``workers``: every record still kept."""
        return self.ledger.spent(now, workers, self.specs)

    def later(self, now: float, workers: Sequence[Worker]) -> Callable[[], Spent]:
        """:meth:`spent`, counted when first asked."""
        return self.ledger.later(now, workers, self.specs)

    def bills_for(self, gone: Iterable[Worker]) -> list[Bill]:
        """The bills of workers whose records are being dropped (to store, then count)."""
        return [bill(w, self._by_name) for w in gone]

    def count(self, bills: Iterable[Bill], now: float) -> None:
        """Count bills once they are stored."""
        for b in bills:
            self.ledger.add(b, now)

    def review(
        self,
        now: float,
        spent_by_now: Callable[[], Spent],
        snapshot: SiteSnapshot,
        decision: Decision,
    ) -> Callable[[], float] | None:
        """After a decision: warn at 80% of the budget (once per period), tell when the
        budget starts or stops holding launches back, and keep both in the store.
        Returns the period's forecast spend with the decision's launches, counted when
        first asked (None without a budget)."""
        budget = self.budget
        if budget is None:
            return None
        spent = spent_by_now()
        if spent.period is None:
            return None
        start, end = spent.period
        leaving = frozenset(t.worker_id for t in decision.terminate)
        specs, workers, planned = self.specs, snapshot.workers, decision.launch

        @functools.cache
        def ahead() -> float:  # a pass over the workers: only when someone asks
            return forecast(spent.period_total, now, end, workers, specs, planned, leaving)

        watch = self.watch
        changed = False
        cur = self.currency
        if spent.period_total >= WARN_SHARE * budget.amount and watch.warned != start:
            watch.warned = start
            changed = True
            log.warning(
                "budget: %.0f%% of %s per %s spent: %s since %s (the period ends %s)",
                100 * spent.period_total / budget.amount, money(budget.amount, cur),
                budget.period, money(spent.period_total, cur), utc(start), utc(end),
            )  # fmt: skip
        if decision.refused:
            launches: dict[str, int] = {}
            for r in decision.refused:
                launches[r.launch.cloud] = launches.get(r.launch.cloud, 0) + r.launch.count
            worst = max(decision.refused, key=lambda r: r.forecast)
            before = watch.refused
            fresh = before is None or not before.active
            since = now if fresh or before is None else before.since
            watch.refused = Refused(since, now, launches, worst.forecast, worst.allowed, end)
            if fresh or before is None or before.launches != launches:
                changed = True
                level = logging.WARNING if fresh else logging.INFO
                log.log(level, "budget: %s", refusal_text(watch.refused, cur))
        elif watch.refused is not None and watch.refused.active:
            watch.refused.active = False
            changed = True
            log.info("budget: no launch held back any more (forecast %s of %s to %s)",
                     money(ahead(), cur), money(budget.amount, cur), utc(end))  # fmt: skip
        if changed:
            self.store.set_meta(WATCH_KEY, watch.dump())
        return ahead


@dataclass(frozen=True, slots=True)
class SpendingView:
    """What ``status`` shows of the site's money."""

    currency: str
    spent: Spent
    rate: float
    """What the workers on record cost per hour now (those not yet terminating)."""
    budget: Budget | None
    forecast: float | None
    """The period's forecast spend with the workers on record (no launch)."""
    watch: BudgetWatch


def spending_view(
    store: StateStore,
    specs: Sequence[CloudSpec],
    budget: Budget | None,
    currency: str,
    now: float,
) -> SpendingView:
    """The site's money read from its store at ``now`` (without writing to it)."""
    ledger = _ledger(store, specs, budget, now)
    workers = [r.worker for r in store.load()]
    spent = ledger.spent(now, workers, specs)
    ahead = None
    if budget is not None and spent.period is not None:
        ahead = forecast(spent.period_total, now, spent.period[1], workers, specs)
    prices = {c.name: c.price_per_hour for c in specs}
    rate = sum(
        prices.get(w.cloud, 0.0)
        for w in workers
        if w.state.live and w.state is not WorkerState.TERMINATING
    )
    watch = BudgetWatch.load(store.get_meta(WATCH_KEY))
    return SpendingView(currency, spent, rate, budget, ahead, watch)
