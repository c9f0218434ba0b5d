"""One full decision: the worker lifecycle rules every policy shares, then the policy.

:func:`evaluate` is what both drivers call, the live manager on the wall clock and
the simulator on its virtual one. Around the policy it:

* terminates workers that have not joined within ``stall_timeout``; the policy
  sees them as terminating, so it launches their replacements at once where a
  cloud has room, and never counts a leaving instance as room;
* terminates draining workers whose last job has finished, unless the policy put
  them back into service (a draining worker is reused before any new launch);
* drains idle workers (dearest first, paid time ignored) while the site spends
  more per hour than ``spend_cap_per_hour`` (plus the urgent allowance while urgent
  jobs wait or run);
* launches past the normal limits for queued urgent jobs, when the site has an
  urgent allowance (:mod:`elasticsite.policies.urgent`).
"""

from __future__ import annotations

from dataclasses import replace

from elasticsite.model import Cause, Decision, Drain, Launch, Terminate, Worker, WorkerState
from elasticsite.policies.base import Policy, PolicySettings
from elasticsite.policies.urgent import enabled as urgent_enabled
from elasticsite.policies.urgent import urgent_burst, urgent_jobs
from elasticsite.snapshot import SiteSnapshot

__all__ = ["evaluate"]


def evaluate(policy: Policy, snapshot: SiteSnapshot, settings: PolicySettings) -> Decision:
    lifecycle = Decision()
    now = snapshot.now
    stall = settings.stall_timeout
    drained = []
    stalled: dict[str, Worker] = {}
    REQUESTED, BOOTING, DRAINING = WorkerState.REQUESTED, WorkerState.BOOTING, WorkerState.DRAINING
    # One pass over every worker on every decision: plain identity tests, no properties.
    for w in snapshot.workers:
        st = w.state
        if st is REQUESTED or st is BOOTING:
            if now - w.requested_at > stall:
                lifecycle.terminate.append(Terminate(w.id, Cause.STALLED))
                # Still holds its instance (and its cloud's quota) until the cloud says gone.
                stalled[w.id] = replace(w, state=WorkerState.TERMINATING, history=[])
        elif st is DRAINING and w.running_jobs == 0:
            drained.append(w.id)
    view = snapshot
    if stalled:
        view = snapshot.with_workers([stalled.get(w.id, w) for w in snapshot.workers])
    decision = policy(view, settings)

    # The policy sees drained workers as draining ones, so demand puts them back
    # (undrain before launch); the rest are terminated.
    if drained:
        back = {u.worker_id for u in decision.undrain}
        gone = {wid for wid in drained if wid not in back}
        lifecycle.terminate.extend(Terminate(wid, Cause.DRAINED) for wid in drained if wid in gone)
        if gone:
            # The spend cap below counts only the workers that stay.
            view = view.with_workers([w for w in view.workers if w.id not in gone])

    if stalled and decision.launch:
        left = len(stalled)
        # Label the launches that stand in for stalled workers.
        relabelled: list[Launch] = []
        for launch in decision.launch:
            n = min(left, launch.count)
            if n:  # whatever else it carries (the user it is for) stays
                relabelled.append(replace(launch, count=n, cause=Cause.REPLACEMENT))
            if launch.count - n:
                relabelled.append(replace(launch, count=launch.count - n))
            left -= n
        decision.launch = relabelled

    cap = settings.spend_cap_per_hour
    urgent = urgent_enabled(settings) and bool(
        urgent_jobs(view.queued) or urgent_jobs(view.running)
    )
    if cap is not None:
        # While urgent jobs wait or run, their allowance is spent, not drained away.
        _enforce_cap(view, cap + (settings.urgent_extra_spend_per_hour if urgent else 0), decision)
    if urgent:
        urgent_burst(view, settings, decision)
    lifecycle.extend(decision)
    return lifecycle


def _enforce_cap(snapshot: SiteSnapshot, cap: float, decision: Decision) -> None:
    prices = {c.name: c.price_per_hour for c in snapshot.clouds}
    leaving = {d.worker_id for d in decision.drain}
    spend = 0.0
    idle = []
    for w in snapshot.workers:
        if not w.state.live or w.state is WorkerState.TERMINATING or w.id in leaving:
            continue
        price = prices.get(w.cloud, 0.0)
        spend += price
        if w.state is WorkerState.IDLE:
            idle.append((-price, w.id))
    spend += sum(prices.get(x.cloud, 0.0) * x.count for x in decision.launch)
    if spend <= cap + 1e-9:
        return
    idle.sort()
    for neg_price, wid in idle:
        if spend <= cap + 1e-9:
            break
        decision.drain.append(Drain(wid, Cause.SPEND_CAP))
        spend += neg_price
