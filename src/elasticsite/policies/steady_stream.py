"""Steady stream (paper 000): always keep a worker; grow one at a time under sustained load.

* fewer than ``steady_min_workers`` serving: launch up to that minimum;
* queued walltime above ``steady_up_factor`` x waste time and no worker booting:
  launch one more;
* queued walltime below ``steady_down_factor`` x waste time: release the idle
  workers beyond the minimum.

The waste time is that of the cloud the next worker would go to.
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from elasticsite.model import Cause, Decision
from elasticsite.plugins import PluginOptions
from elasticsite.policies.base import PolicySettings, options_of, register
from elasticsite.policies.planning import census, preferred_cloud, scale_down, scale_up
from elasticsite.snapshot import SiteSnapshot


class SteadyStreamOptions(PluginOptions):
    """Its thresholds, in ``[policy]``: multiples of the waste time, and a floor."""

    steady_up_factor: float = Field(5.0, gt=0)
    steady_down_factor: float = Field(3.0, ge=0)
    steady_min_workers: int = Field(1, ge=0)

    @model_validator(mode="after")
    def _factors(self) -> Self:
        if self.steady_down_factor > self.steady_up_factor:
            raise ValueError(
                f"steady_down_factor ({self.steady_down_factor}) must not exceed "
                f"steady_up_factor ({self.steady_up_factor})"
            )
        return self


@register("steady_stream", options=SteadyStreamOptions)
def decide(snapshot: SiteSnapshot, settings: PolicySettings) -> Decision:
    own = options_of(settings, SteadyStreamOptions)
    cen = census(snapshot)
    floor = own.steady_min_workers
    if cen.serving < floor:
        return scale_up(snapshot, settings, floor - cen.serving, Cause.BASELINE, counted=cen)
    cloud = preferred_cloud(snapshot, settings, counted=cen)
    waste = cloud.waste_time if cloud is not None else 0.0
    demand = snapshot.queued_walltime
    if demand > own.steady_up_factor * waste and cen.pending == 0:
        return scale_up(snapshot, settings, 1, Cause.DEMAND, counted=cen)
    if demand < own.steady_down_factor * waste:
        cause = Cause.IDLE if not snapshot.queued else Cause.SURPLUS
        return scale_down(snapshot, settings, cen.serving - floor, cause, keep=floor, counted=cen)
    return Decision()
