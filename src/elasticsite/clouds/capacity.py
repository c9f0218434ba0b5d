"""A finite cloud's hosts and slots, and how an urgent VM makes room on them.

A cloud the site operates itself has a fixed set of hosts, each with so many cores
and so much memory. :class:`Capacity` tracks which VM sits on which host; when an
urgent VM does not fit, :meth:`Capacity.plan` works out what its cloud policy would
do to make room (paper 004, Table 2.2, least disruptive first):

``urgent_only``
    refuse every non-urgent request while urgent sessions run; nothing running is
    touched, so an urgent VM still waits for room.
``qos``
    halve the cores (and, if needed, the memory) of running VMs whose owners
    volunteered for it, until the urgent VM fits; restored when it leaves.
``migration``
    move one smaller VM off a host (one migration per source host) to another host
    with room for it, so the urgent VM fits where it was.
``suspension``
    suspend VMs, which resume on their host as soon as room returns.
``preemption``
    terminate VMs.

Targets are chosen volunteered first, on the host with the fewest urgent VMs (paper
004's round-robin placement), then the fewest VMs, then the smallest ones: smaller VMs
are quicker to move and to place again (paper 004, sections 4.1.2 and 4.1.4).
Urgent VMs are never targets.

This module is pure (no clock, no I/O): the simulator
(:mod:`elasticsite.sim.urgent_cloud`) and the local cloud
(:mod:`elasticsite.clouds.local_capacity`) apply its plans, each in its own time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from elasticsite.clouds.capacity_policy import (
    Action,
    CloudPolicy,
    Migrate,
    Plan,
    Preempt,
    Restore,
    Resume,
    Shrink,
    Suspend,
)
from elasticsite.model import VMType

__all__ = ["Capacity", "CapacityError", "Host", "Slot"]


class CapacityError(ValueError):
    """A request the cloud cannot take: no room, or urgent requests only."""


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    cores: int
    memory_mb: int

    def __post_init__(self) -> None:
        if self.cores < 1 or self.memory_mb < 1:
            raise ValueError(f"host {self.name!r} needs at least one core and 1 MiB of memory")


@dataclass(slots=True)
class Slot:
    """A VM on a host: what it was given, and what it holds now (less under QoS)."""

    id: str
    vm_type: VMType
    host: str
    urgent: bool = False
    volunteer: bool = False
    suspended: bool = False
    cores: int = 0
    memory_mb: int = 0
    order: int = 0

    def __post_init__(self) -> None:
        self.cores = self.cores or self.vm_type.cores
        self.memory_mb = self.memory_mb or self.vm_type.memory_mb

    @property
    def shrunk(self) -> bool:
        return self.cores < self.vm_type.cores or self.memory_mb < self.vm_type.memory_mb


@dataclass(slots=True)
class Capacity:
    """Hosts and the VMs placed on them; ``urgent_only`` refuses non-urgent requests."""

    hosts: dict[str, Host]
    slots: dict[str, Slot] = field(default_factory=dict)
    urgent_only: bool = False
    _order: int = 0

    @classmethod
    def uniform(cls, count: int, cores: int = 8, memory_mb: int = 16384) -> Capacity:
        """``count`` identical hosts (the default is a Breadboard node)."""
        return cls(
            {f"node{k + 1:02d}": Host(f"node{k + 1:02d}", cores, memory_mb) for k in range(count)}
        )

    # -- what is where ------------------------------------------------------
    def used(self, host: str) -> tuple[int, int]:
        cores = memory = 0
        for s in self.slots.values():
            if s.host == host and not s.suspended:
                cores += s.cores
                memory += s.memory_mb
        return cores, memory

    def free(self, host: str) -> tuple[int, int]:
        h = self.hosts[host]
        cores, memory = self.used(host)
        return h.cores - cores, h.memory_mb - memory

    def fits(self, host: str, vm_type: VMType) -> bool:
        cores, memory = self.free(host)
        return cores >= vm_type.cores and memory >= vm_type.memory_mb

    def place(
        self, vm_type: VMType, *, exclude: str | None = None, urgent: bool = False
    ) -> str | None:
        """The host that fits ``vm_type`` with least room to spare (greedy packing); an
        ``urgent`` VM goes first to the host with the fewest urgent VMs (round-robin)."""
        # One pass over the VMs for every host's use (not one per host: this runs for
        # each VM a simulated finite cloud places).
        used: dict[str, list[int]] = {name: [0, 0, 0] for name in self.hosts}
        for s in self.slots.values():
            u = used.get(s.host)
            if u is not None:
                if not s.suspended:
                    u[0] += s.cores
                    u[1] += s.memory_mb
                u[2] += s.urgent
        best: tuple[tuple[int, int, int, str], str] | None = None
        for name, h in self.hosts.items():
            cores, memory = h.cores - used[name][0], h.memory_mb - used[name][1]
            if name == exclude or cores < vm_type.cores or memory < vm_type.memory_mb:
                continue
            spread = used[name][2] if urgent else 0
            key = (spread, cores - vm_type.cores, memory - vm_type.memory_mb, name)
            if best is None or key < best[0]:
                best = (key, name)
        return None if best is None else best[1]

    def add(
        self,
        vm: str,
        vm_type: VMType,
        host: str,
        *,
        urgent: bool = False,
        volunteer: bool = False,
    ) -> Slot:
        if vm in self.slots:
            raise CapacityError(f"VM {vm!r} is already placed")
        if host not in self.hosts:
            raise CapacityError(f"no host {host!r}")
        self._order += 1
        slot = Slot(vm, vm_type, host, urgent=urgent, volunteer=volunteer, order=self._order)
        self.slots[vm] = slot
        return slot

    def admit(
        self, vm: str, vm_type: VMType, *, urgent: bool = False, volunteer: bool = False
    ) -> Slot:
        """Place a VM where it fits now, or raise :class:`CapacityError` saying why not."""
        if urgent:  # takes what room there is: no policy is asked to make more
            host = self.place(vm_type)
            if host is None:
                raise CapacityError(f"no host has room for a {vm_type.name}")
        else:
            host = self.launch(vm_type, None, {}).host
        return self.add(vm, vm_type, host, urgent=urgent, volunteer=volunteer)

    def launch(
        self,
        vm_type: VMType,
        urgency: str | None,
        policies: Mapping[str, CloudPolicy],
    ) -> Plan:
        """Where a new VM goes (nothing placed yet): a non-urgent one where it fits now, an
        urgent one under the policy ``policies`` maps its urgency to; CapacityError says
        why not. What the local cloud and the simulator's cloud both decide per launch."""
        if urgency is None:
            if self.urgent_only:
                raise CapacityError(
                    "the cloud takes urgent requests only while urgent sessions run"
                )
            host = self.place(vm_type)
            if host is None:
                raise CapacityError(f"no host has room for a {vm_type.name}")
            return Plan(host, CloudPolicy.DEFAULT)
        policy = policies.get(urgency, CloudPolicy.DEFAULT)
        plan = self.plan(vm_type, policy)
        if plan is None:
            raise CapacityError(
                f"no room for an urgent {vm_type.name} ({urgency}) even under the "
                f"{policy.value} policy"
            )
        return plan

    # -- making room for an urgent VM ----------------------------------------
    def plan(self, vm_type: VMType, policy: CloudPolicy | str) -> Plan | None:
        """How ``policy`` would make room for an urgent ``vm_type``; None if it cannot."""
        policy = CloudPolicy(policy)
        host = self.place(vm_type, urgent=True)
        if host is not None:
            return Plan(host, policy)
        best: tuple[tuple[int, int, int, int, int], Plan] | None = None
        for name in sorted(self.hosts):
            found = self._plan_on(name, vm_type, policy)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        return None if best is None else best[1]

    def _candidates(self, host: str) -> list[Slot]:
        return [
            s for s in self.slots.values() if s.host == host and not s.urgent and not s.suspended
        ]

    def _plan_on(
        self, host: str, need: VMType, policy: CloudPolicy
    ) -> tuple[tuple[int, int, int, int, int], Plan] | None:
        h = self.hosts[host]
        if h.cores < need.cores or h.memory_mb < need.memory_mb:
            return None
        free_c, free_m = self.free(host)
        lack_c, lack_m = max(0, need.cores - free_c), max(0, need.memory_mb - free_m)
        cands = self._candidates(host)
        if policy in (CloudPolicy.PREEMPTION, CloudPolicy.SUSPENSION):
            chosen = _cover(cands, lack_c, lack_m, lambda s: (s.cores, s.memory_mb))
            if chosen is None:
                return None
            make = Preempt if policy is CloudPolicy.PREEMPTION else Suspend
            actions: tuple[Action, ...] = tuple(make(s.id) for s in chosen)
        elif policy is CloudPolicy.MIGRATION:
            movable = [
                s
                for s in cands
                if s.cores >= lack_c
                and s.memory_mb >= lack_m
                and self.place(s.vm_type, exclude=host) is not None
            ]
            if not movable:
                return None
            s = min(movable, key=lambda s: (not s.volunteer, s.cores, s.memory_mb, s.order))
            chosen = [s]
            target = self.place(s.vm_type, exclude=host)
            assert target is not None
            actions = (Migrate(s.id, host, target),)
        elif policy is CloudPolicy.QOS:
            # Only volunteers, and only VMs with something to give: at most half.
            givers = [s for s in cands if s.volunteer and not s.shrunk and s.cores >= 2]
            chosen = _cover(givers, lack_c, lack_m, _half)
            if chosen is None:
                return None
            actions = tuple(
                Shrink(s.id, s.cores - _half(s)[0], s.memory_mb - _half(s)[1]) for s in chosen
            )
        else:
            return None
        key = (  # round-robin: the host with fewest urgent VMs, then the fewest targets
            sum(not s.volunteer for s in chosen),
            sum(s.urgent for s in self.slots.values() if s.host == host),
            len(chosen),
            sum(s.cores for s in chosen),
            sum(s.memory_mb for s in chosen),
        )
        return key, Plan(host, policy, actions)

    def apply(self, plan: Plan, vm: str, vm_type: VMType) -> Slot:
        """Carry out ``plan``'s actions on the model and place the urgent VM."""
        for a in plan.actions:
            slot = self.slots[a.vm]
            if isinstance(a, Preempt):
                del self.slots[a.vm]
            elif isinstance(a, Suspend):
                slot.suspended = True
            elif isinstance(a, Migrate):
                slot.host = a.target
            else:
                slot.cores, slot.memory_mb = a.cores, a.memory_mb
        if not self.fits(plan.host, vm_type):
            raise CapacityError(f"plan for {vm!r} does not free enough room on {plan.host}")
        return self.add(vm, vm_type, plan.host, urgent=True)

    def remove(self, vm: str) -> list[Resume | Restore]:
        """A VM leaves; shrunk VMs get their size back and suspended ones resume, in order."""
        gone = self.slots.pop(vm, None)
        if gone is None:
            return []
        return self.settle([gone.host])

    def settle(self, hosts: Iterable[str] | None = None) -> list[Resume | Restore]:
        """Give room back: restore shrunk VMs, then resume suspended ones (oldest first)."""
        names = set(self.hosts if hosts is None else hosts)
        events: list[Resume | Restore] = []
        waiting = sorted(
            (s for s in self.slots.values() if s.host in names and (s.shrunk or s.suspended)),
            key=lambda s: (s.suspended, s.order),
        )
        for s in waiting:
            free_c, free_m = self.free(s.host)
            if s.suspended:
                if free_c >= s.cores and free_m >= s.memory_mb:
                    s.suspended = False
                    events.append(Resume(s.id))
            elif any(o.urgent for o in self.slots.values() if o.host == s.host):
                continue  # the urgent VM it made room for is still there
            elif (
                free_c >= s.vm_type.cores - s.cores and free_m >= s.vm_type.memory_mb - s.memory_mb
            ):
                s.cores, s.memory_mb = s.vm_type.cores, s.vm_type.memory_mb
                events.append(Restore(s.id))
        return events


def _half(s: Slot) -> tuple[int, int]:
    return s.cores // 2, s.memory_mb // 2


def _cover(
    cands: list[Slot], lack_c: int, lack_m: int, give: Callable[[Slot], tuple[int, int]]
) -> list[Slot] | None:
    """Fewest targets covering the lack, volunteers first, then drop any not needed.

    Within volunteers and then others, larger VMs are taken first (fewest VMs); a
    second pass drops those that turn out not to be needed, and a third swaps each
    for the smallest VM left out that still covers the lack.
    """
    order = sorted(cands, key=lambda s: (not s.volunteer, -give(s)[0], -give(s)[1], s.order))
    chosen: list[Slot] = []
    got_c = got_m = 0
    for s in order:
        if got_c >= lack_c and got_m >= lack_m:
            break
        c, m = give(s)
        if c <= 0 and m <= 0:
            continue
        chosen.append(s)
        got_c += c
        got_m += m
    if got_c < lack_c or got_m < lack_m:
        return None
    for s in sorted(chosen, key=lambda s: (give(s)[0], give(s)[1])):
        c, m = give(s)
        if got_c - c >= lack_c and got_m - m >= lack_m:
            chosen.remove(s)
            got_c -= c
            got_m -= m
    # Then the smallest that will do: swap each for a smaller one left out, if it covers.
    for s in sorted(chosen, key=lambda s: (-give(s)[0], -give(s)[1])):
        c, m = give(s)
        spare = sorted(
            (u for u in cands if u not in chosen and (u.volunteer or not s.volunteer)),
            key=lambda u: (give(u)[0], give(u)[1], u.order),
        )
        for u in spare:
            uc, um = give(u)
            if (uc, um) < (c, m) and got_c - c + uc >= lack_c and got_m - m + um >= lack_m:
                chosen[chosen.index(s)] = u
                got_c, got_m = got_c - c + uc, got_m - m + um
                break
    return chosen
