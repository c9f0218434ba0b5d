"""On demand (paper 000): one worker per queued job; idle workers go once the queue is empty."""

from __future__ import annotations

from elasticsite.model import Cause, Decision
from elasticsite.policies.base import PolicySettings, register
from elasticsite.policies.planning import census, scale_down, scale_up
from elasticsite.snapshot import SiteSnapshot


@register("on_demand")
def decide(snapshot: SiteSnapshot, settings: PolicySettings) -> Decision:
    cen = census(snapshot)
    queued = len(snapshot.queued)
    if queued == 0:
        return scale_down(snapshot, settings, cen.idle, Cause.IDLE, counted=cen)
    # Idle and booting workers will each take one of the queued jobs.
    return scale_up(snapshot, settings, queued - cen.idle - cen.pending, Cause.DEMAND, counted=cen)
