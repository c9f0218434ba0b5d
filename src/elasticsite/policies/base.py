"""What a policy is, the settings it reads, and the registry that finds it by name.

A policy is a pure function ``decide(snapshot, settings) -> Decision``: no clock
reads (time is ``snapshot.now``), no I/O, no randomness. Third-party policies are
plain Python callables published in the ``elasticsite.policies`` entry-point group::

    [project.entry-points."elasticsite.policies"]
    my_policy = "my_package.my_module:decide"
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Literal, Protocol

from elasticsite.model import Decision
from elasticsite.snapshot import SiteSnapshot
from elasticsite.spend import Budget

__all__ = [
    "CLOUD_RULES",
    "ENTRY_POINT_GROUP",
    "Policy",
    "PolicySettings",
    "UnknownPolicy",
    "available",
    "get",
    "register",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "elasticsite.policies"

CloudRule = Literal["cheapest", "fastest", "ordered", "balanced", "spot_first"]
CLOUD_RULES: dict[str, str] = {
    "cheapest": "lowest price per hour first, then lowest waste time, then configuration order",
    "fastest": "lowest waste time (boot + shutdown) first, then lowest price, then order",
    "ordered": "fill clouds in configuration order (a private cloud before a public one)",
    "balanced": "the cloud with the most free capacity (max_instances - live), then price",
    "spot_first": "spot clouds first, then on-demand ones (each group cheapest first)",
}
"""How the cloud of each new worker is chosen; every rule skips full clouds."""


@dataclass(frozen=True, slots=True)
class PolicySettings:
    """Every threshold the built-in policies and the shared planning read.

    Defaults are paper 000's (steady stream at 5x / 3x the waste time, bursts at
    2x, a dedicated pool of 10) and paper 001's (10 minute stall timeout).
    ``params`` carries settings of third-party policies untouched.
    """

    steady_up_factor: float = 5.0
    steady_down_factor: float = 3.0
    steady_min_workers: int = 1
    bursts_factor: float = 2.0
    dedicated_workers: int = 10
    spend_cap_per_hour: float | None = None
    urgent_extra_instances: int = 0
    """Workers urgent jobs may add past the clouds' ``max_instances`` (0: none), up to
    each cloud's ``quota`` (:mod:`elasticsite.policies.urgent`)."""
    urgent_extra_spend_per_hour: float = 0.0
    """Spend per hour urgent jobs may add past ``spend_cap_per_hour``."""
    budget: Budget | None = None
    """Money per calendar period (UTC) no launch may push the forecast past
    (:mod:`elasticsite.policies.budget`); the snapshot brings what is spent so far."""
    cloud_rule: CloudRule = "cheapest"
    billing_margin: float = 120.0
    stall_timeout: float = 600.0
    redirect_to: str = "cloud"
    """The partition (queue) the redirection policies send jobs to: the one cloud
    workers serve."""
    provision: str = "on_demand"
    """The policy the redirection policies size the cloud's workers with, over the
    jobs sent to the cloud."""
    rebalance: Literal["graceful", "immediate"] = "graceful"
    """How ``cloud_scheduler`` takes VMs from a user over their fair share: retire each
    after its current job, or terminate it now (the batch system requeues the job)."""
    params: Mapping[str, Any] = field(default_factory=dict)


def preboot_workers(policy: str, settings: PolicySettings) -> int:
    """Workers booted and joined before the first job is submitted: the dedicated
    baseline's pool (paper 000 launched its 10 VMs and joined them first); 0 otherwise."""
    return settings.dedicated_workers if policy == "dedicated" else 0


_BOOTING = ("requested", "booting")
_JOINED = ("idle", "busy", "draining")


def preboot_done(workers: Mapping[str, int], target: int) -> bool:
    """Whether the workload may start, from a step's worker counts by state name (taken
    after the decision was carried out): ``target`` workers joined, or none booting any
    more (the pool is as large as the clouds allow)."""
    joined = sum(workers.get(s, 0) for s in _JOINED)
    return joined >= target or not any(workers.get(s, 0) for s in _BOOTING)


class Policy(Protocol):
    """A provisioning policy."""

    def __call__(self, snapshot: SiteSnapshot, settings: PolicySettings) -> Decision: ...


class UnknownPolicy(LookupError):
    """No policy registered or published under that name."""


_REGISTRY: dict[str, Policy] = {}


def register(name: str) -> Callable[[Policy], Policy]:
    """Decorator: make ``fn`` available as policy ``name``."""

    def wrap(fn: Policy) -> Policy:
        if name in _REGISTRY and _REGISTRY[name] is not fn:
            raise ValueError(f"a policy named {name!r} is already registered")
        _REGISTRY[name] = fn
        return fn

    return wrap


def _load_builtins() -> None:
    # Imported for their @register side effect.
    from elasticsite.policies import (  # noqa: F401
        bursts,
        cloud_scheduler,
        core_demand,
        dedicated,
        on_demand,
        redirect,
        steady_stream,
    )


def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available() -> list[str]:
    """Names of every built-in and installed policy."""
    _load_builtins()
    return sorted(set(_REGISTRY) | set(_entry_points()))


def get(name: str) -> Policy:
    """The policy registered as ``name``, loading an installed plug-in on first use."""
    _load_builtins()
    if name in _REGISTRY:
        return _REGISTRY[name]
    ep = _entry_points().get(name)
    if ep is None:
        raise UnknownPolicy(f"unknown policy {name!r}; available: {', '.join(available())}")
    try:
        fn = ep.load()
    except Exception as exc:
        raise UnknownPolicy(f"policy {name!r} from {ep.value} failed to load: {exc}") from exc
    if not callable(fn):
        raise UnknownPolicy(f"policy {name!r} ({ep.value}) is not callable")
    _REGISTRY[name] = fn
    return fn
