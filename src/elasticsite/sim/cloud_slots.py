"""A simulated cloud with hosts: other tenants' VMs, and the urgent policies that move them.

With ``hosts`` set, a :class:`~elasticsite.sim.cloud.CloudModel` is a finite cloud the
site shares with other tenants, whose ``tenant_vms`` non-urgent VMs hold slots for the
whole run (a share ``tenant_volunteers`` of them volunteered as targets). The site's
instances take slots too; a launch that fits nowhere is refused as a full provider
refuses (error kind ``capacity``). A launch tagged with an urgency gets the policy
``urgent_policies`` maps it to, planned by :class:`elasticsite.clouds.capacity.Capacity`
(the local cloud's planner) and paid for with paper 004's measured allocation delay
(:func:`elasticsite.clouds.capacity_delays.allocation_delay`) instead of a normal boot.

What happens to a target depends on whose it is. Another tenant's VM is preempted,
suspended, migrated or shrunk on paper; one of the site's own workers goes as a real
one would: preempted, its node goes down (its jobs are requeued) and the instance
ends; suspended, its node goes down until it resumes; migrated, its node is down for
the unavailability paper 004 measured (Table 4.19); shrunk, nothing the batch system
sees. :class:`SimSlots` reports what it did, for the run's summary.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from elasticsite.clouds.base import URGENCY_TAG, VOLUNTEER_TAG, CloudError
from elasticsite.clouds.capacity import Capacity, CapacityError
from elasticsite.clouds.capacity_delays import MIGRATION_UNAVAILABLE, allocation_delay
from elasticsite.clouds.capacity_policy import CloudPolicy, Resume
from elasticsite.clouds.errors import ErrorKind
from elasticsite.model import VMType

__all__ = ["SimSlots", "SlotCounts"]

TENANT = "tenant-"
_COUNTED = {"preempt": "preempted", "suspend": "suspended", "migrate": "migrated",
            "shrink": "shrunk"}  # fmt: skip


@dataclass(slots=True)
class SlotCounts:
    """What the urgent policies did on this cloud over a run."""

    urgent_launches: int = 0
    refused: int = 0
    preempted: int = 0
    suspended: int = 0
    migrated: int = 0
    shrunk: int = 0
    by_policy: dict[str, int] = field(default_factory=dict)


class SimSlots:
    """The hosts of one simulated cloud and who holds each slot."""

    def __init__(
        self,
        hosts: int,
        host_cores: int,
        host_memory_mb: int,
        vm: VMType,
        policies: Mapping[str, str],
        tenant_vms: int,
        tenant_volunteers: float,
        rng: random.Random,
    ) -> None:
        self.cap = Capacity.uniform(hosts, host_cores, host_memory_mb)
        self.vm = vm
        self.policies = {u: CloudPolicy(p) for u, p in policies.items()}
        self.rng = rng
        self.counts = SlotCounts()
        for k in range(tenant_vms):
            try:
                self.cap.admit(f"{TENANT}{k}", vm, volunteer=rng.random() < tenant_volunteers)
            except CapacityError:
                break  # the hosts are full: the rest never started

    def take(
        self,
        instance_id: str,
        name: str,
        tags: Mapping[str, str],
        act: Callable[[str, str, float], None],
    ) -> float | None:
        """A slot for a new instance of the site; the urgent allocation delay if it was
        urgent (None: boot as usual). ``act(instance_id, what, seconds)`` carries out
        what a plan does to one of the site's own instances (what: preempt, suspend,
        migrate). Raises :class:`CloudError` when there is no room."""
        urgency = tags.get(URGENCY_TAG)
        try:
            plan = self.cap.launch(self.vm, urgency, self.policies)
        except CapacityError as exc:
            self.counts.refused += 1
            raise CloudError(f"{exc} ({name})", kind=ErrorKind.CAPACITY) from None
        if urgency is None:
            self.cap.add(
                instance_id, self.vm, plan.host, volunteer=tags.get(VOLUNTEER_TAG) == "yes"
            )
            return None
        policy = plan.policy
        types = [self.cap.slots[t].vm_type.name for t in plan.targets]
        own: list[tuple[str, str]] = []
        for a in plan.actions:
            what = type(a).__name__.lower()
            setattr(self.counts, _COUNTED[what], getattr(self.counts, _COUNTED[what]) + 1)
            if not a.vm.startswith(TENANT) and what != "shrink":
                own.append((a.vm, what))
        self.cap.apply(plan, instance_id, self.vm)
        down = MIGRATION_UNAVAILABLE.get(self.vm.name, MIGRATION_UNAVAILABLE["m1.xlarge"])[0]
        for vm, what in own:  # after the plan is applied: acting may end instances
            act(vm, what, down if what == "migrate" else 0.0)
        self.counts.urgent_launches += 1
        self.counts.by_policy[policy.value] = self.counts.by_policy.get(policy.value, 0) + 1
        return allocation_delay(policy, types, len(self.cap.hosts), self.rng)

    def release(self, instance_id: str) -> list[str]:
        """An instance ended; the site's instances that resume now that room is back."""
        events = self.cap.remove(instance_id)
        return [e.vm for e in events if isinstance(e, Resume) and not e.vm.startswith(TENANT)]
