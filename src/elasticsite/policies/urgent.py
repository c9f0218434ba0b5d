"""The site's elastic capacity for urgent jobs: bursting past the normal limits.

A queued job whose ``urgency`` attribute is ``red``, ``orange`` or ``yellow`` (set by
``elasticsite urgent submit`` once the urgent services said yes) may have workers
launched for it past every cloud's ``max_instances`` and past the spending cap, up to
the site's urgent allowance (``urgent_extra_instances`` workers and
``urgent_extra_spend_per_hour``). Such launches, and as many of the policy's own as the
urgent jobs need, carry the job's urgency, so a finite cloud gives them its urgent
policy (:mod:`elasticsite.clouds.local_capacity`, :mod:`elasticsite.sim.cloud_slots`).

A cloud's ``quota`` (the provider's hard limit) still holds. When every cloud that
serves the job is at its quota, the site makes room from its own non-urgent
workers: draining ones first, then busy ones (the batch system requeues their jobs),
those running the fewest cores first. Idle workers are not taken: they already count
as room for the urgent jobs. Workers running an urgent job are never taken.

With no allowance configured (the default) nothing here runs: the policies' decision
is left exactly as it was.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from elasticsite import feasibility
from elasticsite.decision import URGENCIES
from elasticsite.feasibility import Judge, Shape
from elasticsite.model import (
    Cause,
    CloudSpec,
    Decision,
    Job,
    Launch,
    Terminate,
    VMType,
    WorkerState,
)
from elasticsite.policies.base import PolicySettings
from elasticsite.policies.planning import census, rank_clouds
from elasticsite.snapshot import SiteSnapshot

__all__ = ["URGENCIES", "enabled", "urgent_burst", "urgent_jobs"]

_RANK = {u: k for k, u in enumerate(URGENCIES)}


def urgent_jobs(jobs: Iterable[Job]) -> list[Job]:
    """The jobs among ``jobs`` that carry an urgency, most urgent first."""
    found = [j for j in jobs if j.attributes.get("urgency") in _RANK]
    found.sort(key=lambda j: (_RANK[j.attributes["urgency"]], j.submitted_at))
    return found


def enabled(settings: PolicySettings) -> bool:
    return settings.urgent_extra_instances > 0 or settings.urgent_extra_spend_per_hour > 0


def urgent_burst(snapshot: SiteSnapshot, settings: PolicySettings, decision: Decision) -> None:
    """Add to ``decision`` the launches (and the room) the queued urgent jobs need."""
    if not enabled(settings) or not snapshot.clouds:
        return
    waiting = urgent_jobs(snapshot.queued)
    if not waiting:
        return
    cen = census(snapshot)
    live = dict(cen.live_by_cloud or {})
    for launch in decision.launch:
        live[launch.cloud] = live.get(launch.cloud, 0) + launch.count
    usable = [c for c in snapshot.clouds if c.name not in snapshot.closed]
    ranked = rank_clouds(usable, settings.cloud_rule, live)
    if not ranked:
        return
    judged = feasibility.judge(snapshot.clouds, snapshot.closed)
    keys = [judged.key(j) for j in waiting]
    wanted = sum(judged.need(k).nodes for k in keys)
    urgency = waiting[0].attributes["urgency"]
    idle = sum(1 for w in snapshot.workers if w.state is WorkerState.IDLE)
    # Urgent jobs head the queue: the workers idle or on their way serve them first.
    _tag(decision, wanted - cen.pending - idle, urgency)
    coming = cen.pending + sum(x.count for x in decision.launch)
    short = wanted - coming - idle
    if short <= 0:
        return
    over = sum(max(0, live.get(c.name, 0) - c.max_instances) for c in snapshot.clouds)
    extra = max(0, settings.urgent_extra_instances - over)
    cap = settings.spend_cap_per_hour
    budget = None if cap is None else cap + settings.urgent_extra_spend_per_hour
    spend = cen.spend_per_hour + sum(
        c.price_per_hour * x.count for x in decision.launch for c in usable if c.name == x.cloud
    )
    blocked: list[str] = []
    for c in ranked:
        if short <= 0:
            break
        room = c.max_instances - live.get(c.name, 0)
        allowed = max(0, room) + extra
        if c.quota is not None:
            allowed = min(allowed, c.quota - live.get(c.name, 0))
        if budget is not None and c.price_per_hour > 0:
            allowed = min(allowed, int((budget - spend) / c.price_per_hour + 1e-9))
        n = max(0, min(short, allowed))
        vm = _urgent_type(judged, c, keys)
        if vm is None:
            continue
        if n:
            decision.launch.append(Launch(c.name, vm.name, n, Cause.URGENT, (), urgency))
            extra -= max(0, n - max(0, room))
            live[c.name] = live.get(c.name, 0) + n
            spend += n * c.price_per_hour
            short -= n
        if short > 0 and c.quota is not None and live.get(c.name, 0) >= c.quota:
            blocked.append(c.name)
    if short > 0 and blocked:
        _make_room(snapshot, decision, blocked, short)


def _urgent_type(judged: Judge, cloud: CloudSpec, keys: list[Shape]) -> VMType | None:
    """The type urgent workers on ``cloud`` take: the one launched for the most demanding
    urgent job the cloud can run (the default when it fits); None when it runs none."""
    runs = [k for k in keys if judged.launch_type(k, cloud) is not None]
    if not runs:
        return None
    return judged.launch_type(max(runs, key=lambda k: judged.need(k).cores), cloud)


def _tag(decision: Decision, wanted: int, urgency: str) -> None:
    """Mark the policy's own first ``wanted`` launches as urgent, so a finite cloud gives
    them its urgent policy even within the normal limits."""
    tagged = 0
    marked: list[Launch] = []
    for x in decision.launch:
        n = min(x.count, wanted - tagged)
        if n <= 0 or x.urgency:
            marked.append(x)
            continue
        marked.append(replace(x, count=n, urgency=urgency))
        if x.count > n:
            marked.append(replace(x, count=x.count - n))
        tagged += n
    decision.launch = marked


def _make_room(snapshot: SiteSnapshot, decision: Decision, clouds: list[str], count: int) -> None:
    """Terminate up to ``count`` non-urgent workers on ``clouds``: draining, then busy."""
    urgent_nodes = {j.node for j in urgent_jobs(snapshot.running) if j.node}
    going = {t.worker_id for t in decision.terminate} | {d.worker_id for d in decision.drain}
    candidates = [
        w
        for w in snapshot.workers
        if w.cloud in clouds
        and w.state in (WorkerState.BUSY, WorkerState.DRAINING)
        and w.id not in going
        and (w.node or w.id) not in urgent_nodes
    ]
    candidates.sort(key=lambda w: (w.state is WorkerState.BUSY, w.cores - w.free_cores, w.id))
    # (Idle workers are not taken: they are already counted as room for the urgent jobs.)
    leaving = sum(
        1 for w in snapshot.workers if w.cloud in clouds and w.state is WorkerState.TERMINATING
    )  # room already on its way, from this step's predecessors
    for w in candidates[: max(0, count - leaving)]:
        decision.terminate.append(Terminate(w.id, Cause.URGENT))
