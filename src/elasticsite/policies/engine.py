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
  urgent allowance (:mod:`elasticsite.policies.urgent`);
* holds back every launch that would push the forecast spend to the end of the
  budget's period past the budget (:mod:`elasticsite.policies.budget`).

The policy decides on the queued jobs that can be served (:mod:`elasticsite.feasibility`):
those no open cloud (and no worker the site has) could run are left out and marked with
the reason (``Decision.unservable``). Idle, pending and draining workers no servable job
could use are shown to it as no capacity for the queue; the idle ones among them are
released as the policy releases idle workers when nothing is queued.
"""

from __future__ import annotations

from dataclasses import replace

from elasticsite import feasibility
from elasticsite.model import Cause, Decision, Drain, Launch, Terminate, Worker, WorkerState
from elasticsite.policies.base import Policy, PolicySettings
from elasticsite.policies.budget import within_budget
from elasticsite.policies.redirect import redirect_target
from elasticsite.policies.urgent import enabled as urgent_enabled
from elasticsite.policies.urgent import urgent_burst, urgent_jobs
from elasticsite.servable import QueueVerdict, split
from elasticsite.snapshot import SiteSnapshot

__all__ = ["evaluate"]


def evaluate(policy: Policy, snapshot: SiteSnapshot, settings: PolicySettings) -> Decision:
    lifecycle = Decision()
    now = snapshot.now
    stall = settings.stall_timeout
    drained = []
    stalled: dict[str, Worker] = {}
    spare: list[Worker] = []  # idle, pending and draining: what the queue may or may not use
    REQUESTED, BOOTING, DRAINING = WorkerState.REQUESTED, WorkerState.BOOTING, WorkerState.DRAINING
    IDLE = WorkerState.IDLE
    # One pass over every worker on every decision: plain identity tests, no properties.
    for w in snapshot.workers:
        st = w.state
        if st is REQUESTED or st is BOOTING:
            if now - w.requested_at > stall:
                lifecycle.terminate.append(Terminate(w.id, Cause.STALLED))
                # Still holds its instance (and its cloud's quota) until the cloud says gone.
                stalled[w.id] = replace(w, state=WorkerState.TERMINATING, history=[])
            else:
                spare.append(w)
        elif st is IDLE:
            spare.append(w)
        elif st is DRAINING:
            spare.append(w)
            if w.running_jobs == 0:
                drained.append(w.id)
    view = snapshot
    if stalled:
        view = snapshot.with_workers([stalled.get(w.id, w) for w in snapshot.workers])
    seen, verdict = _servable(policy, view, settings, spare)
    lifecycle.unservable = verdict.unservable
    decision = policy(seen, settings)
    if seen is not view and seen.workers is not view.workers:
        _release_useless(policy, view, seen, settings, decision)

    # The policy sees drained workers as draining ones, so demand puts them back
    # (undrain before launch); the rest are terminated.
    if drained:
        back = {u.worker_id for u in decision.undrain}
        gone = {wid for wid in drained if wid not in back}
        lifecycle.terminate.extend(Terminate(wid, Cause.DRAINED) for wid in drained if wid in gone)
        if gone:
            # The spend cap below counts only the workers that stay.
            view = view.with_workers([w for w in view.workers if w.id not in gone])
            seen = seen.with_workers([w for w in seen.workers if w.id not in gone])

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
        urgent_jobs(seen.queued) or urgent_jobs(view.running)
    )
    if cap is not None:
        # While urgent jobs wait or run, their allowance is spent, not drained away.
        _enforce_cap(view, cap + (settings.urgent_extra_spend_per_hour if urgent else 0), decision)
    if urgent:
        urgent_burst(seen, settings, decision)
    lifecycle.extend(decision)
    within_budget(view, settings, lifecycle)
    return lifecycle


def _servable(
    policy: Policy, view: SiteSnapshot, settings: PolicySettings, spare: list[Worker]
) -> tuple[SiteSnapshot, QueueVerdict]:
    """What the policy is shown: the queued jobs some open cloud (or some worker of the
    site) could run, and the idle, pending and draining workers none of them could use
    as no capacity for the queue: busy (still counted against every cap and floor), or
    leaving for a draining one (never put back for a job it cannot run). With nothing
    servable queued, idle workers are idle as far as any policy knows: nothing to hide."""
    redirect = redirect_target(settings) if policy.redirects else None
    extra = settings.urgent_extra_instances if urgent_enabled(settings) else 0
    judged = feasibility.judge(view.clouds, view.closed, redirect, extra)
    verdict = split(view, judged)
    seen = view.with_queue(verdict.feasible)
    if not verdict.feasible:
        return seen, verdict
    S = WorkerState
    # Jobs the site holds will run once released: a draining worker one of them could
    # use stays draining, or the policy would see its user's share change step by step.
    held = split(view.with_queue(view.held), judged) if view.held else None
    shown: dict[str, Worker] = {}
    for w in spare:
        if verdict.usable(w):
            continue
        if w.state is S.DRAINING:
            if held is not None and held.usable(w):
                continue
            shown[w.id] = replace(w, state=S.TERMINATING, history=[])
        else:
            shown[w.id] = replace(w, state=S.BUSY, free_cores=0, history=[])
    if shown:
        seen = seen.with_workers([shown.get(w.id, w) for w in view.workers])
    return seen, verdict


def _release_useless(
    policy: Policy,
    view: SiteSnapshot,
    seen: SiteSnapshot,
    settings: PolicySettings,
    decision: Decision,
) -> None:
    """Release the idle workers no queued job could use as the policy releases idle
    workers when nothing is queued: its own rule (a floor, a fixed pool, the billing
    margin of paid hourly workers) decides, on a view where every other worker serves
    the queue and the decision already taken has been carried out."""
    S = WorkerState
    hidden = {w.id for w in seen.workers if w.state is S.BUSY}
    idle = {w.id: w for w in view.workers if w.state is S.IDLE and w.id in hidden}
    if not idle:
        return
    leaving = {d.worker_id for d in decision.drain}
    ended = {t.worker_id for t in decision.terminate}
    back = {u.worker_id for u in decision.undrain}
    workers: list[Worker] = []
    for w in seen.workers:
        if w.id in ended:
            workers.append(replace(w, state=S.TERMINATING, history=[]))
        elif w.id in leaving:
            workers.append(replace(w, state=S.DRAINING, history=[]))
        elif w.id in idle:
            workers.append(idle[w.id])
        elif w.state is S.IDLE or (w.state is S.DRAINING and w.id in back):
            workers.append(replace(w, state=S.BUSY, free_cores=0, history=[]))
        else:
            workers.append(w)
    released = policy(seen.with_workers(workers).with_queue(()), settings)
    decision.drain.extend(d for d in released.drain if d.worker_id in idle)


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
