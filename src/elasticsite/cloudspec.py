"""What a policy needs to know about one cloud (:class:`CloudSpec`), and what it bills.

Re-exported by :mod:`elasticsite.model`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from elasticsite.attributes import EVERY_JOB, Selector

__all__ = ["CloudSpec", "VMType", "WasteEstimate", "billed_cost"]

WasteEstimate = Literal["observed", "fixed"]
"""Where a cloud's boot and shutdown estimates come from: what the core observed of
its workers (starting from the configured times), or the configured times alone."""


@dataclass(frozen=True, slots=True)
class VMType:
    """A size of instance a cloud offers."""

    name: str
    cores: int = 1
    memory_mb: int = 2048


@dataclass(frozen=True, slots=True)
class CloudSpec:
    """What a policy needs to know about one cloud.

    ``billing_increment`` is in seconds: 3600 bills each started hour in full,
    1 bills by the second. ``boot_time + shutdown_time`` is the estimated waste time
    paper 000's policies weigh queued work against.
    """

    name: str
    driver: str = "local"
    max_instances: int = 10
    price_per_hour: float = 0.0
    billing_increment: float = 1.0
    boot_time: float = 60.0
    shutdown_time: float = 6.0
    vm_types: tuple[VMType, ...] = (VMType("small"),)
    serves: Selector = EVERY_JOB
    """The jobs this cloud's workers can run (by job attributes); empty: every job."""
    spot: bool = False
    """Spot (preemptible) capacity: cheaper, and the cloud may take instances back."""
    spot_price_cap: float | None = None
    """The most a spot instance may cost per hour (the provider's bid); None: on-demand's."""
    volunteer: bool = False
    """The site offers its workers there as targets of the cloud's urgent policies
    (a finite cloud shared with urgent users takes volunteers first)."""
    quota: int | None = None
    """The provider's hard limit on this site's instances there (its account quota),
    which even urgent bursts past ``max_instances`` stop at; None: no known limit."""
    waste_estimate: WasteEstimate = "observed"
    """``observed``: the core replaces ``boot_time`` and ``shutdown_time`` with the running
    means of what it saw (once it saw any); ``fixed``: they stay as configured."""
    images: tuple[tuple[str, str], ...] = ()
    """``(vm type, image)``: what a worker of each type boots, as far as the cloud's
    driver says (a job asking for another image is not served there); empty: unknown."""

    @property
    def waste_time(self) -> float:
        return self.boot_time + self.shutdown_time

    @property
    def default_vm(self) -> VMType:
        return self.vm_types[0]

    @property
    def hourly_billing(self) -> bool:
        """Bills in increments long enough that an idle, paid-for worker is worth keeping."""
        return self.billing_increment >= 600


def billed_cost(duration: float, price_per_hour: float, increment: float) -> float:
    """Money owed for one instance alive ``duration`` seconds: every started increment is paid."""
    if duration <= 0 or price_per_hour <= 0:
        return 0.0
    increment = max(increment, 1e-9)
    return math.ceil(duration / increment - 1e-9) * increment * price_per_hour / 3600.0
