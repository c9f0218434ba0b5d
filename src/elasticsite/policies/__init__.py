"""Provisioning policies: pure functions ``decide(snapshot, settings) -> Decision``,
each registered as a :class:`~elasticsite.plugins.PolicyPlugin` with its options model.

Built in: ``on_demand``, ``steady_stream``, ``bursts``, ``core_demand``, ``dedicated``.
More arrive through the ``elasticsite.policies`` entry-point group.
"""

from elasticsite.policies import base
from elasticsite.policies.base import *  # noqa: F403 (the names of base.__all__)
from elasticsite.policies.base import preboot_done, preboot_workers
from elasticsite.policies.engine import evaluate

__all__ = ["evaluate", "preboot_done", "preboot_workers"]
__all__ += base.__all__
