"""How long a finite cloud takes to start an urgent VM under each policy: paper 004's figures.

All values are seconds, measured on the Breadboard Eucalyptus cloud with the 11 GB
MG-RAST image as the urgent VM, 25 trials each (paper 004, section 4.1). The
simulator (:mod:`elasticsite.sim.urgent_cloud`) draws an urgent VM's allocation
delay as the probe delay for the cloud's size (an empty cloud), from a normal
distribution with the table's mean and standard deviation cut at zero, plus the mean
overhead its policy adds for the targets it hit.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from elasticsite.clouds.capacity import CloudPolicy

__all__ = [
    "MIGRATION_UNAVAILABLE",
    "POLICY_OVERHEAD",
    "PROBE",
    "allocation_delay",
    "overhead",
    "probe",
    "reference",
]

PROBE: dict[int, tuple[float, float]] = {
    1: (264, 23.5),
    4: (318, 18.2),
    8: (328, 11.4),
    16: (342, 17.1),
}
"""One urgent VM per node on an empty cloud of that many nodes: mean and standard
deviation (Table 4.15, "Probes", one instance per node)."""

_PREEMPT = {  # Table 4.12, one urgent instance: mean, sd
    "m1.small": (290, 20.2), "c1.medium": (290, 22.0), "m1.large": (272, 20.2),
    "m1.xlarge": (280, 26.2), "c1.xlarge": (270, 22.6),
}  # fmt: skip
_SUSPEND = {  # Table 4.16, one urgent instance
    "m1.small": (291, 20.3), "c1.medium": (305, 17.5), "m1.large": (293, 19.0),
    "m1.xlarge": (306, 17.2), "c1.xlarge": (310, 25.7),
}  # fmt: skip
_MIGRATE = {  # Table 4.19: allocation delay by migrated type
    "m1.small": (350, 17.9), "c1.medium": (430, 22.3), "m1.large": (562, 21.2),
    "m1.xlarge": (806, 16.0),
}  # fmt: skip
_QOS = {"m1.large": (278, 19.7), "m1.xlarge": (274, 14.2), "c1.xlarge": (278, 22.0)}  # Table 4.23

_SINGLE_PROBE = PROBE[1]

POLICY_OVERHEAD: dict[CloudPolicy, dict[str, tuple[float, float]]] = {
    policy: {vm: (mean - _SINGLE_PROBE[0], sd) for vm, (mean, sd) in table.items()}
    for policy, table in (
        (CloudPolicy.PREEMPTION, _PREEMPT),
        (CloudPolicy.SUSPENSION, _SUSPEND),
        (CloudPolicy.MIGRATION, _MIGRATE),
        (CloudPolicy.QOS, _QOS),
    )
}
"""What each policy adds to one urgent VM's delay on one node, by target type: the
single-node table's mean less the probe's 264 s, with the table's deviation."""

MIGRATION_UNAVAILABLE: dict[str, tuple[float, float]] = {
    "m1.small": (17, 1.8), "c1.medium": (23, 1.1), "m1.large": (34, 1.4), "m1.xlarge": (61, 1.4),
}  # fmt: skip
"""How long a migrated VM is unreachable, by type (Table 4.19, "Unavailability")."""


def reference(policy: CloudPolicy | str, target_type: str) -> tuple[float, float] | None:
    """What paper 004 measured for one urgent c1.xlarge displacing ``target_type`` VMs on one
    node (Tables 4.12, 4.16, 4.19, 4.23), or None where it did not measure it."""
    table = {
        CloudPolicy.PREEMPTION: _PREEMPT,
        CloudPolicy.SUSPENSION: _SUSPEND,
        CloudPolicy.MIGRATION: _MIGRATE,
        CloudPolicy.QOS: _QOS,
    }.get(CloudPolicy(policy), {})
    return table.get(target_type)


def probe(nodes: int) -> tuple[float, float]:
    """The empty-cloud delay for a cloud of ``nodes`` nodes (nearest measured size at or below)."""
    sizes = sorted(PROBE)
    fit = [n for n in sizes if n <= max(1, nodes)]
    return PROBE[fit[-1]]


def overhead(policy: CloudPolicy | str, target_type: str) -> tuple[float, float]:
    """The policy's added delay for one target of that type.

    Types the paper did not measure for a policy take the nearest larger measured one
    (c1.xlarge migration as m1.xlarge: the same 20 GB disk); QoS on one-core types is
    impossible and the planner never chooses it.
    """
    policy = CloudPolicy(policy)
    table = POLICY_OVERHEAD.get(policy)
    if not table:
        return (0.0, 0.0)
    if target_type in table:
        return table[target_type]
    order = ["m1.small", "c1.medium", "m1.large", "m1.xlarge", "c1.xlarge"]
    rank = order.index(target_type) if target_type in order else len(order)
    for name in order[rank:] + order[:rank][::-1]:
        if name in table:
            return table[name]
    return (0.0, 0.0)


def allocation_delay(
    policy: CloudPolicy | str, target_types: Sequence[str], nodes: int, rng: random.Random
) -> float:
    """One draw of an urgent VM's allocation delay on a cloud of ``nodes`` nodes.

    The single-node tables measured one urgent VM displacing as many targets of one type
    as it took (four m1.small, or one c1.xlarge, for a c1.xlarge), so the overhead is
    counted once per urgent VM, for the costliest type among its targets.
    """
    mean, sd = probe(nodes)
    total = max(0.0, rng.gauss(mean, sd))
    if target_types:
        # The tables' deviations are no wider than the probe's: the spread is the probe's.
        total += max(0.0, max(overhead(policy, t)[0] for t in set(target_types)))
    return total
