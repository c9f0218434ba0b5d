"""Urgent VMs on a full finite cloud: each cloud policy replayed on the virtual clock.

A scenario fills a cloud of identical hosts with non-urgent VMs (the worst case of
paper 004, section 4.1), some of whose owners volunteer, then asks for urgent VMs.
The cloud's policy (:class:`~elasticsite.clouds.capacity_policy.CloudPolicy`) makes room
through :class:`~elasticsite.clouds.capacity.Capacity`, the same planner the local
cloud uses; the allocation delays are paper 004's measurements
(:mod:`elasticsite.clouds.capacity_delays`).
Non-urgent VMs end after their lifetime
and are replaced by new requests, so under the default policy an urgent VM waits,
first in line, for a host to empty enough.

What each trial reports: when each urgent VM ran, and what it cost the others:
VMs preempted, suspended (and for how long), migrated (and how long unreachable),
shrunk (and for how long), and non-urgent requests refused.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from elasticsite.clouds.capacity import Capacity
from elasticsite.clouds.capacity_delays import MIGRATION_UNAVAILABLE, allocation_delay, probe
from elasticsite.clouds.capacity_policy import (
    BREADBOARD_TYPES,
    CloudPolicy,
    Migrate,
    Preempt,
    Restore,
    Resume,
    Shrink,
    Suspend,
)
from elasticsite.model import VMType
from elasticsite.sim.engine import Simulation

__all__ = ["Scenario", "ScenarioResult", "paper_scenario", "run_scenario", "summarize"]


@dataclass(frozen=True, slots=True)
class Scenario:
    policy: CloudPolicy = CloudPolicy.PREEMPTION
    nodes: int = 1
    host_cores: int = 8
    host_memory_mb: int = 16384
    fill: str = "c1.xlarge"
    """The non-urgent VMs' type (paper 004's target type)."""
    urgent: str = "c1.xlarge"
    urgent_count: int = 1
    urgent_at: float = 600.0
    urgent_runtime: float = 3600.0
    lifetime: tuple[float, float] = (1800.0, 14400.0)
    """Non-urgent VMs live uniformly this long (seconds), then a new request takes their room."""
    volunteers: float = 1.0
    """Share of non-urgent owners who volunteer their VMs as targets (and for QoS); paper
    004's policies targeted any non-urgent VM, as if all had."""
    free_cores: int = 0
    """Cores the fill leaves free on each host (fragmented room, for migration)."""
    horizon: float = 86400.0

    def __post_init__(self) -> None:
        for name in (self.fill, self.urgent):
            if name not in BREADBOARD_TYPES:
                raise ValueError(
                    f"unknown VM type {name!r}; choose one of {', '.join(BREADBOARD_TYPES)}"
                )
        if self.nodes < 1 or self.urgent_count < 1:
            raise ValueError("a scenario needs at least one node and one urgent VM")
        if not 0.0 <= self.volunteers <= 1.0:
            raise ValueError(f"volunteers is a share in [0, 1], got {self.volunteers}")


def paper_scenario(
    policy: CloudPolicy | str,
    *,
    nodes: int | None = None,
    fill: str | None = None,
    urgent: str | None = None,
    count: int | None = None,
    volunteers: float | None = None,
    free_cores: int | None = None,
) -> Scenario:
    """Paper 004's condition for ``policy`` (section 4.1), any setting given in its place.

    The paper filled one Breadboard node with target VMs and asked for one urgent
    c1.xlarge (Tables 4.12, 4.16, 4.23; c1.xlarge targets, as on several nodes), every
    non-urgent VM a possible target. ``default`` is its probe, an empty node, unless a
    fill or free cores are given (a full cloud denied the request there). Migration
    moved one smaller VM (m1.small) per source node to a node with room: each node
    leaves the urgent VM's cores less one target's free, and the cloud has a
    destination node for as many migrated VMs as fit there (Tables 4.19, 4.21). With
    ``count`` urgent VMs each gets its own node (the paper's round-robin placement).
    """
    policy = CloudPolicy(policy)
    migration = policy is CloudPolicy.MIGRATION
    fill_type = fill or ("m1.small" if migration else "c1.xlarge")
    urgent_type = urgent or "c1.xlarge"
    for name in (fill_type, urgent_type):
        if name not in BREADBOARD_TYPES:
            raise ValueError(
                f"unknown VM type {name!r}; choose one of {', '.join(BREADBOARD_TYPES)}"
            )
    want = count or 1
    gap = BREADBOARD_TYPES[urgent_type].cores - BREADBOARD_TYPES[fill_type].cores
    if free_cores is None:
        if policy is CloudPolicy.DEFAULT and fill is None:
            free_cores = Scenario().host_cores  # the probe: an empty cloud
        else:
            free_cores = max(0, gap) if migration else 0
    if nodes is None:
        nodes = want
        if migration:  # one more node per so many migrated VMs it has room for
            take = max(1, free_cores // BREADBOARD_TYPES[fill_type].cores)
            nodes += -(-want // take)
    return Scenario(
        policy=policy,
        nodes=nodes,
        fill=fill_type,
        urgent=urgent_type,
        urgent_count=want,
        volunteers=1.0 if volunteers is None else volunteers,
        free_cores=free_cores,
    )


@dataclass(slots=True)
class ScenarioResult:
    delays: list[float] = field(default_factory=list)
    """Allocation delay of each urgent VM (request to running), seconds."""
    preempted: int = 0
    suspended: int = 0
    suspended_for: list[float] = field(default_factory=list)
    migrated: int = 0
    unavailable_for: list[float] = field(default_factory=list)
    shrunk: int = 0
    shrunk_for: list[float] = field(default_factory=list)
    refused: int = 0
    """Non-urgent requests refused (urgent-only access)."""
    unplaced: int = 0
    """Urgent VMs still waiting at the horizon."""


class _Run:
    def __init__(self, sc: Scenario, seed: int) -> None:
        self.sc = sc
        self.rng = random.Random(seed)
        self.sim = Simulation()
        self.cap = Capacity.uniform(sc.nodes, sc.host_cores, sc.host_memory_mb)
        self.res = ScenarioResult()
        self.queue: deque[tuple[str, VMType, bool, float]] = deque()
        self.gen: dict[str, int] = {}
        self.left: dict[str, float] = {}
        self.since: dict[str, float] = {}
        self.ends: dict[str, float] = {}
        self.serial = 0
        self.session = False

    def _name(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def fill(self) -> None:
        vm = BREADBOARD_TYPES[self.sc.fill]
        for host in self.cap.hosts:
            while self.cap.free(host)[0] - vm.cores >= self.sc.free_cores and self.cap.fits(
                host, vm
            ):
                name = self._name("vm")
                self.cap.add(name, vm, host, volunteer=self.rng.random() < self.sc.volunteers)
                self._live(name, self.rng.uniform(*self.sc.lifetime))

    def _live(self, name: str, lifetime: float) -> None:
        self.gen[name] = self.gen.get(name, 0) + 1
        self.ends[name] = self.sim.now + lifetime
        self.sim.after(lifetime, self._end, (name, self.gen[name]))

    def _end(self, arg: tuple[str, int]) -> None:
        name, gen = arg
        if self.gen.get(name) != gen or name not in self.cap.slots:
            return  # preempted, or suspended since this end was set
        self._settle(self.cap.remove(name))
        if name.startswith("urgent"):
            if not any(s.urgent for s in self.cap.slots.values()) and not any(
                q[2] for q in self.queue
            ):
                self.session = self.cap.urgent_only = False  # the session is over
        else:  # the cloud stays busy: a new request arrives
            self.queue.append((self._name("vm"), BREADBOARD_TYPES[self.sc.fill], False, 0.0))
        self._drain_queue()

    def _settle(self, events: Sequence[Resume | Restore]) -> None:
        now = self.sim.now
        for e in events:
            if isinstance(e, Resume):
                self.res.suspended_for.append(now - self.since.pop(e.vm))
                self._live(e.vm, self.left.pop(e.vm))
            else:
                self.res.shrunk_for.append(now - self.since.pop(e.vm))

    def _drain_queue(self) -> None:
        """Place every waiting request that fits, in arrival order.

        As a cloud does, without SPRUCE: a request that fits is placed even when an
        earlier one still waits, so small non-urgent VMs keep taking the room a large
        urgent one waits for, unless the cloud takes urgent requests only.
        """
        waiting: deque[tuple[str, VMType, bool, float]] = deque()
        for name, vm, urgent, asked in self.queue:
            if not urgent and self.session:
                self.res.refused += 1
                continue
            host = self.cap.place(vm)
            if host is None:
                waiting.append((name, vm, urgent, asked))
                continue
            volunteer = self.rng.random() < self.sc.volunteers
            self.cap.add(name, vm, host, urgent=urgent, volunteer=volunteer)
            if urgent:
                mean, sd = probe(1)  # it took room as it freed up, alone
                self._started(name, self.sim.now - asked + max(0.0, self.rng.gauss(mean, sd)))
            else:
                self._live(name, self.rng.uniform(*self.sc.lifetime))
        self.queue = waiting

    def urgent(self, _: object) -> None:
        sc = self.sc
        vm = BREADBOARD_TYPES[sc.urgent]
        self.session = sc.policy is CloudPolicy.URGENT_ONLY
        self.cap.urgent_only = self.session
        placed: list[tuple[str, str]] = []
        types: list[str] = []
        for _k in range(sc.urgent_count):
            name = self._name("urgent")
            plan = None
            if sc.policy not in (CloudPolicy.DEFAULT, CloudPolicy.URGENT_ONLY) or self.cap.place(
                vm
            ):
                plan = self.cap.plan(vm, sc.policy)
            if plan is None:
                self.queue.append((name, vm, True, self.sim.now))
                continue
            types += [self.cap.slots[t].vm_type.name for t in plan.targets]
            self._hit(plan.actions)
            self.cap.apply(plan, name, vm)
            placed.append((name, plan.host))
        if placed:  # one request: its VMs are all running after one delay (as measured)
            hosts = Counter(host for _, host in placed)
            delay = allocation_delay(
                sc.policy, types, len(hosts), self.rng, per_node=max(hosts.values())
            )
            for name, _ in placed:
                self._started(name, delay)
        self._drain_queue()

    def _hit(self, actions: Sequence[Preempt | Suspend | Migrate | Shrink]) -> None:
        now = self.sim.now
        for a in actions:
            if isinstance(a, Preempt):
                self.res.preempted += 1
                self.gen[a.vm] = self.gen.get(a.vm, 0) + 1
            elif isinstance(a, Suspend):
                self.res.suspended += 1
                self.gen[a.vm] = self.gen.get(a.vm, 0) + 1
                self.left[a.vm] = max(0.0, self.ends[a.vm] - now)
                self.since[a.vm] = now
            elif isinstance(a, Migrate):
                self.res.migrated += 1
                mean, sd = MIGRATION_UNAVAILABLE.get(
                    self.cap.slots[a.vm].vm_type.name, MIGRATION_UNAVAILABLE["m1.xlarge"]
                )
                self.res.unavailable_for.append(max(0.0, self.rng.gauss(mean, sd)))
            else:
                self.res.shrunk += 1
                self.since[a.vm] = now

    def _started(self, name: str, delay: float) -> None:
        self.res.delays.append(delay)
        self._live(name, delay + self.sc.urgent_runtime)


def run_scenario(scenario: Scenario, seed: int = 0) -> ScenarioResult:
    """One trial: fill the cloud, ask for the urgent VMs, run to the horizon."""
    run = _Run(scenario, seed)
    run.fill()
    run.sim.at(scenario.urgent_at, run.urgent)
    run.sim.run(until=scenario.horizon)
    run.res.unplaced = sum(1 for q in run.queue if q[2])
    return run.res


def summarize(scenario: Scenario, trials: int = 25, seed: int = 0) -> dict[str, object]:
    """``trials`` runs (paper 004 ran 25 per condition): mean and deviation of each figure."""
    runs = [run_scenario(scenario, seed + k) for k in range(trials)]
    delays = [d for r in runs for d in r.delays]

    def mean(values: list[float]) -> float | None:
        return round(statistics.fmean(values), 1) if values else None

    return {
        "policy": scenario.policy.value,
        "nodes": scenario.nodes,
        "fill": scenario.fill,
        "urgent": f"{scenario.urgent_count} x {scenario.urgent}",
        "trials": trials,
        "delay_mean": mean(delays),
        "delay_sd": round(statistics.pstdev(delays), 1) if len(delays) > 1 else None,
        "preempted": sum(r.preempted for r in runs) / trials,
        "suspended": sum(r.suspended for r in runs) / trials,
        "suspended_for": mean([s for r in runs for s in r.suspended_for]),
        "migrated": sum(r.migrated for r in runs) / trials,
        "unavailable_for": mean([s for r in runs for s in r.unavailable_for]),
        "shrunk": sum(r.shrunk for r in runs) / trials,
        "shrunk_for": mean([s for r in runs for s in r.shrunk_for]),
        "refused": sum(r.refused for r in runs) / trials,
        "unplaced": sum(r.unplaced for r in runs) / trials,
    }
