"""Provisioning policies: pure functions ``decide(snapshot, settings) -> Decision``,
each registered as a :class:`~elasticsite.plugins.PolicyPlugin` with its options model.

Built in: ``on_demand``, ``steady_stream``, ``bursts``, ``core_demand``, ``dedicated``.
More arrive through the ``elasticsite.policies`` entry-point group.
"""

from elasticsite.policies.base import (
    CLOUD_RULES,
    ENTRY_POINT_GROUP,
    SHARED_SETTINGS,
    Decide,
    Policy,
    PolicySettings,
    UnknownPolicy,
    available,
    get,
    options_of,
    preboot_done,
    preboot_workers,
    register,
    registry,
    settings_for,
    with_options,
)
from elasticsite.policies.engine import evaluate

__all__ = [
    "CLOUD_RULES",
    "ENTRY_POINT_GROUP",
    "SHARED_SETTINGS",
    "Decide",
    "Policy",
    "PolicySettings",
    "UnknownPolicy",
    "available",
    "evaluate",
    "get",
    "options_of",
    "preboot_done",
    "preboot_workers",
    "register",
    "registry",
    "settings_for",
    "with_options",
]
