"""The budget: no launch whose forecast spend to the period's end would pass it.

With ``[policy] budget = { amount = 500, period = "month" }`` every decision is checked
after the policy, the spend cap and the urgent allowance (:func:`~elasticsite.policies.
engine.evaluate`). The forecast for the calendar period (UTC) holding ``snapshot.now``
is what was spent in it so far (``snapshot.spent_in_period``, from the driver), plus
every live worker running until the period's end, plus every launch running until
then, each at its cloud's hourly price under its billing rule
(:func:`elasticsite.spend.forecast`). It is an upper bound: a worker that goes earlier
costs less, so a launch refused now may be allowed later in the period.

Launches for urgent jobs (those carrying an urgency) are counted first, against the
amount plus ``urgent_extra`` (0 by default: the budget is hard for them too); then the
others against the amount, in the decision's order. A launch that does not fit whole is
cut to what fits, and what is cut goes into ``decision.refused`` with the forecast it
would have made. Free clouds are never refused. The budget never drains or terminates
a worker (the hourly ``spend_cap_per_hour`` does that).
"""

from __future__ import annotations

import math
from dataclasses import replace

from elasticsite.model import Decision, Launch, Refusal, billed_cost
from elasticsite.policies.base import PolicySettings
from elasticsite.snapshot import SiteSnapshot
from elasticsite.spend import forecast, period_bounds

__all__ = ["within_budget"]


def within_budget(snapshot: SiteSnapshot, settings: PolicySettings, decision: Decision) -> None:
    """Cut ``decision``'s launches to what the budget allows; record what was cut."""
    budget = settings.budget
    if budget is None or not decision.launch:
        return
    now = snapshot.now
    _, end = period_bounds(now, budget.period)
    leaving = frozenset(t.worker_id for t in decision.terminate)
    total = forecast(
        snapshot.spent_in_period, now, end, snapshot.workers, snapshot.clouds, (), leaving
    )
    specs = {c.name: c for c in snapshot.clouds}
    launches = decision.launch
    kept: dict[int, Launch] = {}
    # Urgent launches first (a stable sort keeps the decision's order within each group).
    for i in sorted(range(len(launches)), key=lambda k: not launches[k].urgency):
        x = launches[i]
        spec = specs.get(x.cloud)
        each = (
            0.0
            if spec is None
            else billed_cost(end - now, spec.price_per_hour, spec.billing_increment)
        )
        if each <= 0:
            kept[i] = x
            continue
        allowed = budget.amount + (budget.urgent_extra if x.urgency else 0.0)
        room = (allowed - total) / each
        n = min(x.count, max(0, math.floor(room + 1e-9)))
        if n:
            kept[i] = x if n == x.count else replace(x, count=n, nodes=x.nodes[:n])
            total += n * each
        if n < x.count:
            cut = replace(x, count=x.count - n, nodes=x.nodes[n:])
            decision.refused.append(Refusal(cut, "budget", total + cut.count * each, allowed, end))
    decision.launch = [kept[i] for i in sorted(kept)]
