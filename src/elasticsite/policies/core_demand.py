"""Core demand (paper 001): launch for the cores queued jobs ask for, less what is coming.

deficit = cores requested by queued jobs - (free cores of joined workers + cores of
pending instances); it is converted to workers of the chosen cloud's default size,
rounding up. Idle workers whose cores no queued job needs are released.
"""

from __future__ import annotations

from elasticsite.model import Cause, Decision, WorkerState
from elasticsite.policies.base import PolicySettings, register
from elasticsite.policies.planning import census, preferred_cloud, scale_down, scale_up
from elasticsite.snapshot import SiteSnapshot


@register("core_demand")
def decide(snapshot: SiteSnapshot, settings: PolicySettings) -> Decision:
    cen = census(snapshot)
    deficit = snapshot.queued_cores - (cen.free_cores + cen.pending_cores)
    if deficit > 0:
        cloud = preferred_cloud(snapshot, settings, counted=cen)
        per = cloud.default_vm.cores if cloud is not None else 1
        return scale_up(snapshot, settings, -(-deficit // per), Cause.DEMAND, counted=cen)
    surplus = cen.free_cores - snapshot.queued_cores
    if surplus <= 0 or not cen.idle:
        return Decision()
    # Release whole idle workers while their cores are not needed, smallest first.
    idle = sorted(
        (w.free_cores or w.cores, w.id) for w in snapshot.workers if w.state is WorkerState.IDLE
    )
    spare: set[str] = set()
    for cores, wid in idle:
        if cores > surplus:
            break
        surplus -= cores
        spare.add(wid)
    if not spare:
        return Decision()
    # scale_down picks by billing boundary and price, not by size: show it only the
    # spare workers so it cannot release one whose cores a queued job needs.
    view = snapshot.with_workers(
        [w for w in snapshot.workers if w.state is not WorkerState.IDLE or w.id in spare]
    )
    cause = Cause.IDLE if not snapshot.queued else Cause.SURPLUS
    return scale_down(view, settings, len(spare), cause, counted=cen)
