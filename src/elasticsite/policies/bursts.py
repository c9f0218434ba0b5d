"""Bursts (paper 000): size the pool to the queued work weighed against the waste time.

Wanted workers = queued walltime // (``bursts_factor`` x waste time), at least one
while the queue is not empty; idle and booting workers count towards it. Idle
workers are released once the queue is empty.

Long walltimes can make the formula ask for more workers than the queued jobs could
ever use (150 ten-minute jobs requesting 20 minutes each would want 627 workers
with EC2's waste time); the wanted number is capped at the workers the queued jobs'
cores fill, so a burst never boots a worker that has no job to run.
"""

from __future__ import annotations

from pydantic import Field

from elasticsite.model import Cause, Decision
from elasticsite.plugins import PluginOptions
from elasticsite.policies.base import PolicySettings, options_of, register
from elasticsite.policies.planning import Census, census, preferred_cloud, scale_down, scale_up
from elasticsite.snapshot import SiteSnapshot


def wanted(snapshot: SiteSnapshot, settings: PolicySettings, cen: Census | None = None) -> int:
    """How many workers the queued work justifies (0 only for an empty queue)."""
    if not snapshot.queued:
        return 0
    cloud = preferred_cloud(snapshot, settings, counted=cen)
    waste = cloud.waste_time if cloud is not None else 0.0
    per = cloud.default_vm.cores if cloud is not None else 1
    usable = -(-snapshot.queued_cores // per)  # workers the queued jobs can fill
    if waste <= 0:
        return usable
    factor = options_of(settings, BurstsOptions).bursts_factor
    return min(usable, max(1, int(snapshot.queued_walltime // (factor * waste))))


class BurstsOptions(PluginOptions):
    """Its threshold, in ``[policy]``: a worker per this many waste times of queued work."""

    bursts_factor: float = Field(2.0, gt=0)


@register("bursts", options=BurstsOptions)
def decide(snapshot: SiteSnapshot, settings: PolicySettings) -> Decision:
    cen = census(snapshot)
    if not snapshot.queued:
        return scale_down(snapshot, settings, cen.idle, Cause.IDLE, counted=cen)
    want = wanted(snapshot, settings, cen)
    return scale_up(snapshot, settings, want - cen.idle - cen.pending, Cause.DEMAND, counted=cen)
