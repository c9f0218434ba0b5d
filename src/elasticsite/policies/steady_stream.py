"""Steady stream (paper 000): always keep a worker; grow one at a time under sustained load.

* fewer than ``steady_min_workers`` serving: launch up to that minimum;
* queued walltime above ``steady_up_factor`` x waste time and no worker booting:
  launch one more;
* queued walltime below ``steady_down_factor`` x waste time: release the idle
  workers beyond the minimum.

The waste time is that of the cloud the next worker would go to.
"""

from __future__ import annotations

from elasticsite.model import Cause, Decision
from elasticsite.policies.base import PolicySettings, register
from elasticsite.policies.planning import census, preferred_cloud, scale_down, scale_up
from elasticsite.snapshot import SiteSnapshot


@register("steady_stream")
def decide(snapshot: SiteSnapshot, settings: PolicySettings) -> Decision:
    cen = census(snapshot)
    floor = settings.steady_min_workers
    if cen.serving < floor:
        return scale_up(snapshot, settings, floor - cen.serving, Cause.BASELINE, counted=cen)
    cloud = preferred_cloud(snapshot, settings, counted=cen)
    waste = cloud.waste_time if cloud is not None else 0.0
    demand = snapshot.queued_walltime
    if demand > settings.steady_up_factor * waste and cen.pending == 0:
        return scale_up(snapshot, settings, 1, Cause.DEMAND, counted=cen)
    if demand < settings.steady_down_factor * waste:
        cause = Cause.IDLE if not snapshot.queued else Cause.SURPLUS
        return scale_down(snapshot, settings, cen.serving - floor, cause, keep=floor, counted=cen)
    return Decision()
