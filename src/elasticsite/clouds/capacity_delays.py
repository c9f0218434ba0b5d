"""How long a finite cloud takes to start urgent VMs under each policy: paper 004's figures.

All values are seconds, measured on the Breadboard Eucalyptus cloud with the 11 GB
MG-RAST image as the urgent c1.xlarge VM, 25 trials each (paper 004, section 4.1):
the delay from the request until the cloud reports every requested instance running.

The model the simulator (:mod:`elasticsite.sim.urgent_cloud`) draws from, one draw per
request: the *probe* delay of an empty cloud for the nodes the request spans and the
urgent VMs it puts on each (one or two; Tables 4.12 and 4.15, "Probes"), from a normal
distribution with the table's mean and deviation cut at zero, plus the mean overhead
the policy adds on one node for the costliest type it hit (the single-node tables less
their probe). Conditions the paper measured on several nodes (Tables 4.15, 4.18, 4.21,
4.24) are kept in :data:`PUBLISHED` to compare against, not used by the model: the
difference is the model's error, which ``elasticsite reproduce paper004`` reports.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import NamedTuple

from elasticsite.clouds.capacity_policy import CloudPolicy

__all__ = [
    "MIGRATION_UNAVAILABLE",
    "POLICY_OVERHEAD",
    "PROBE",
    "PUBLISHED",
    "Condition",
    "allocation_delay",
    "overhead",
    "probe",
    "reference",
]

Stat = tuple[float, float]
"""Mean and standard deviation, seconds."""

PROBE: dict[int, Stat] = {1: (264, 23.5), 4: (318, 18.2), 8: (328, 11.4), 16: (342, 17.1)}
"""One urgent VM per node on an empty cloud of that many nodes (Table 4.15, "Probes",
one instance per node; 1 node: Table 4.12's PROBE)."""
PROBE_TWO: dict[int, Stat] = {1: (446, 14.3), 4: (511, 33.9), 8: (702, 23.6), 16: (735, 10.8)}
"""Two urgent VMs per node on an empty cloud (Table 4.15, "Probes", two per node)."""

_PREEMPT = {  # Table 4.12: one and two urgent instances on one node
    "m1.small": ((290, 20.2), (468, 31.7)), "c1.medium": ((290, 22.0), (452, 29.1)),
    "m1.large": ((272, 20.2), (462, 23.6)), "m1.xlarge": ((280, 26.2), (463, 22.6)),
    "c1.xlarge": ((270, 22.6), (470, 46.2)),
}  # fmt: skip
_SUSPEND = {  # Table 4.16
    "m1.small": ((291, 20.3), (492, 21.6)), "c1.medium": ((305, 17.5), (521, 27.4)),
    "m1.large": ((293, 19.0), (495, 18.2)), "m1.xlarge": ((306, 17.2), (525, 25.4)),
    "c1.xlarge": ((310, 25.7), (508, 18.0)),
}  # fmt: skip
_MIGRATE = {  # Table 4.19: one urgent instance (one migration per source node)
    "m1.small": (350, 17.9), "c1.medium": (430, 22.3), "m1.large": (562, 21.2),
    "m1.xlarge": (806, 16.0),
}  # fmt: skip
_QOS = {"m1.large": (278, 19.7), "m1.xlarge": (274, 14.2), "c1.xlarge": (278, 22.0)}  # Table 4.23

MIGRATION_UNAVAILABLE: dict[str, Stat] = {
    "m1.small": (17, 1.8), "c1.medium": (23, 1.1), "m1.large": (34, 1.4), "m1.xlarge": (61, 1.4),
}  # fmt: skip
"""How long a migrated VM is unreachable, by type (Table 4.19, "Unavailability")."""

_SINGLE: dict[CloudPolicy, dict[str, dict[int, Stat]]] = {
    CloudPolicy.PREEMPTION: {t: {1: one, 2: two} for t, (one, two) in _PREEMPT.items()},
    CloudPolicy.SUSPENSION: {t: {1: one, 2: two} for t, (one, two) in _SUSPEND.items()},
    CloudPolicy.MIGRATION: {t: {1: one} for t, one in _MIGRATE.items()},
    CloudPolicy.QOS: {t: {1: one} for t, one in _QOS.items()},
}

POLICY_OVERHEAD: dict[CloudPolicy, dict[str, dict[int, Stat]]] = {
    policy: {
        vm: {
            k: (mean - (PROBE[1] if k == 1 else PROBE_TWO[1])[0], sd)
            for k, (mean, sd) in by.items()
        }
        for vm, by in table.items()
    }
    for policy, table in _SINGLE.items()
}
"""What each policy adds on one node, by target type and urgent VMs on the node (1 or 2):
the single-node table's mean less its probe (264 s, or 446 s for two), with its deviation."""


class Condition(NamedTuple):
    """One published condition; ``target`` is ``""`` for the empty cloud's probes."""

    policy: str
    target: str
    nodes: int
    per_node: int
    table: str


def _published() -> dict[Condition, Stat]:
    out: dict[Condition, Stat] = {}
    for (nodes, one), two in zip(PROBE.items(), PROBE_TWO.values(), strict=True):
        table = "4.12" if nodes == 1 else "4.15"
        out[Condition("default", "", nodes, 1, table)] = one
        out[Condition("default", "", nodes, 2, table)] = two
    for policy, table in ((CloudPolicy.PREEMPTION, "4.12"), (CloudPolicy.SUSPENSION, "4.16"),
                          (CloudPolicy.MIGRATION, "4.19"), (CloudPolicy.QOS, "4.23")):  # fmt: skip
        for vm, by in _SINGLE[policy].items():
            for k, stat in by.items():
                out[Condition(policy.value, vm, 1, k, table)] = stat
    multi = {  # c1.xlarge targets, 1 or 2 urgent VMs per node (Tables 4.15, 4.18, 4.24)
        CloudPolicy.PREEMPTION: ("4.15", {(4, 1): (328, 26), (8, 1): (329, 17.4),
                                          (16, 1): (364, 17.8), (4, 2): (511, 11),
                                          (8, 2): (632, 21.1), (16, 2): (655, 22.3)}),
        CloudPolicy.SUSPENSION: ("4.18", {(4, 1): (385, 19.5), (8, 1): (377, 27.9),
                                          (16, 1): (383, 11.3), (4, 2): (587, 38.7),
                                          (8, 2): (705, 50.1)}),
        CloudPolicy.QOS: ("4.24", {(4, 1): (322, 14.8), (8, 1): (336, 10.3),
                                   (16, 1): (354, 10.3)}),
    }  # fmt: skip
    for policy, (table, rows) in multi.items():
        for (nodes, k), stat in rows.items():
            out[Condition(policy.value, "c1.xlarge", nodes, k, table)] = stat
    # Table 4.21: as many urgent VMs as migrations, one migration per source node.
    for nodes, vm, migrations, stat in (
        (4, "m1.small", 3, (451, 15.6)), (4, "c1.medium", 3, (548, 17.7)),
        (4, "m1.large", 2, (574, 8.82)), (4, "m1.xlarge", 2, (828, 14.2)),
        (8, "m1.small", 6, (471, 12.2)), (8, "c1.medium", 6, (568, 14.4)),
        (8, "m1.large", 4, (610, 14.2)), (8, "m1.xlarge", 4, (864, 14.2)),
    ):  # fmt: skip
        out[Condition("migration", vm, migrations, 1, f"4.21 ({nodes} nodes)")] = stat
    return out


PUBLISHED: dict[Condition, Stat] = _published()
"""Every allocation delay of Tables 4.12-4.24 by condition. ``nodes`` counts the nodes
the urgent VMs went to (for Table 4.21, the migrations, one urgent VM each: its
cloud had one or two more nodes that only received migrated VMs)."""


def reference(
    policy: CloudPolicy | str, target_type: str, nodes: int = 1, per_node: int = 1
) -> Stat | None:
    """What paper 004 measured for urgent c1.xlarge VMs displacing ``target_type`` VMs on
    ``nodes`` nodes, ``per_node`` on each (``target_type`` ``""``: an empty cloud), or
    None where it did not measure it."""
    policy = CloudPolicy(policy)
    name = "default" if policy is CloudPolicy.DEFAULT else policy.value
    for cond, stat in PUBLISHED.items():
        if cond[:4] == (name, target_type, nodes, per_node):
            return stat
    return None


def probe(nodes: int, per_node: int = 1) -> Stat:
    """The empty-cloud delay for urgent VMs on ``nodes`` nodes, ``per_node`` (1 or 2) on
    each: the nearest measured size at or below; more than two per node as two."""
    table = PROBE if per_node <= 1 else PROBE_TWO
    fit = [n for n in sorted(table) if n <= max(1, nodes)]
    return table[fit[-1]]


def overhead(policy: CloudPolicy | str, target_type: str, per_node: int = 1) -> Stat:
    """The policy's added delay for targets of that type, ``per_node`` urgent VMs (1 or 2)
    on the node.

    Types the paper did not measure for a policy take the nearest larger measured one
    (c1.xlarge migration as m1.xlarge: the same 20 GB disk); a policy measured with one
    urgent VM per node only (migration, QoS) adds its one-VM overhead; QoS on one-core
    types is impossible and the planner never chooses it.
    """
    policy = CloudPolicy(policy)
    table = POLICY_OVERHEAD.get(policy)
    if not table:
        return (0.0, 0.0)
    order = ["m1.small", "c1.medium", "m1.large", "m1.xlarge", "c1.xlarge"]
    rank = order.index(target_type) if target_type in order else len(order)
    for name in ([target_type] if target_type in table else []) + order[rank:] + order[:rank][::-1]:
        if name in table:
            by = table[name]
            return by.get(min(max(per_node, 1), 2), by[1])
    return (0.0, 0.0)


def allocation_delay(
    policy: CloudPolicy | str,
    target_types: Sequence[str],
    nodes: int,
    rng: random.Random,
    *,
    per_node: int = 1,
) -> float:
    """One draw of a request's allocation delay: its urgent VMs on ``nodes`` nodes,
    ``per_node`` on the busiest, having hit VMs of ``target_types``.

    The single-node tables measured one or two urgent VMs displacing as many targets of
    one type as they took (four m1.small, or one c1.xlarge, for a c1.xlarge), so the
    overhead is counted once per request, for the costliest type among its targets.
    """
    mean, sd = probe(nodes, per_node)
    total = max(0.0, rng.gauss(mean, sd))
    if target_types:
        # The tables' deviations are no wider than the probe's: the spread is the probe's.
        total += max(0.0, max(overhead(policy, t, per_node)[0] for t in set(target_types)))
    return total
