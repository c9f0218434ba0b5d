"""Dedicated: a fixed pool of ``dedicated_workers``, the baseline the papers compare against."""

from __future__ import annotations

from pydantic import Field

from elasticsite.model import Cause, Decision
from elasticsite.plugins import PluginOptions
from elasticsite.policies.base import PolicySettings, options_of, register
from elasticsite.policies.planning import census, scale_down, scale_up
from elasticsite.snapshot import SiteSnapshot


class DedicatedOptions(PluginOptions):
    """Its pool's size, in ``[policy]``."""

    dedicated_workers: int = Field(10, ge=0)


def _pool(settings: PolicySettings) -> int:
    return options_of(settings, DedicatedOptions).dedicated_workers


@register("dedicated", options=DedicatedOptions, preboot=_pool)
def decide(snapshot: SiteSnapshot, settings: PolicySettings) -> Decision:
    cen = census(snapshot)
    target = _pool(settings)
    if cen.serving < target:
        return scale_up(snapshot, settings, target - cen.serving, Cause.BASELINE, counted=cen)
    if cen.serving > target:
        return scale_down(
            snapshot,
            settings,
            cen.serving - target,
            Cause.SURPLUS,
            keep=target,
            force=True,
            counted=cen,
        )
    return Decision()
