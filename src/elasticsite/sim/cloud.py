"""The simulated cloud: how long VMs take to boot and shut down, how many may run, what they cost.

:class:`CloudModel` describes a cloud; :class:`SimCloud` is that cloud as a
:class:`~elasticsite.clouds.base.CloudDriver` on the virtual clock, which the
simulator's manager core drives exactly as the live manager drives a real cloud.

Boot and shutdown times are a :class:`Durations`: a constant, a uniform range, or an
empirical list sampled with replacement (paper 000 saw EC2 boots from 74 to 205 s).
A sample is what a boot takes alone. With an ``image_transfer`` or ``parallel_boots``,
boots share the cloud's finite boot path (:mod:`elasticsite.boottime`): at most that
many in progress, each moving its image over one link whose bandwidth they divide;
:meth:`CloudModel.paper000` gives paper 000's clouds so calibrated.
With ``boot_failure``, that share of boots never ends: the instance stays pending
until terminated (the manager's stall rule replaces it). Billing follows
:func:`elasticsite.model.billed_cost`: every started increment is
paid, so ``billing_increment=3600`` rounds partial hours up as paper 002 does and
``billing_increment=1`` bills by the second.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from elasticsite.boottime import CALIBRATION_BOOTS, PAPER000, BootPath, BootPipeline
from elasticsite.clouds.base import CloudError, Instance, InstanceState, LaunchRequest
from elasticsite.model import CloudSpec, VMType, WasteEstimate, billed_cost
from elasticsite.sim.cloud_slots import SimSlots
from elasticsite.sim.durations import Durations
from elasticsite.sim.engine import Simulation

__all__ = ["CloudModel", "Durations", "SimCloud", "describe_cloud", "sim_cloud"]


@dataclass(frozen=True, slots=True)
class CloudModel:
    """One simulated cloud; :meth:`spec` is what the provisioning policies see of it."""

    name: str = "cloud"
    vm_limit: int = 144
    boot: Durations = field(default_factory=lambda: Durations.constant(0.0))
    shutdown: Durations = field(default_factory=lambda: Durations.constant(0.0))
    price_per_hour: float = 0.10
    billing_increment: float = 3600.0
    cores_per_vm: int = 1
    spot: bool = False
    """Spot capacity (also implied by an interruption rate): what ``spot_first`` prefers."""
    interruptions_per_hour: float = 0.0
    """Spot capacity: each running instance is taken back at this rate (a Poisson
    process per instance); 0 is on-demand capacity, never taken back."""
    spot_notice: float = 120.0
    """Seconds of notice before a spot instance is taken back (EC2 gives two minutes)."""
    image_transfer: float = 0.0
    """Seconds a boot's image takes alone over the cloud's shared link (part of a boot
    alone; the boots transferring at once divide the link): 0, no shared link."""
    parallel_boots: int = 0
    """Boots in progress at once; later ones wait their turn (0: no limit)."""
    boot_failure: float = 0.0
    """The chance that a boot never ends: the instance stays pending (it failed to boot
    or to reach the network, as paper 001 saw on EC2) until it is terminated, holding
    no place on the boot path; 0: every boot ends."""
    boot_estimate: float | None = None
    """The boot time policies assume until they observe some (None: a boot alone's mean)."""
    waste_estimate: WasteEstimate = "observed"
    """What the policies weigh: the boot and shutdown times seen so far (starting
    from the means), or the means alone (``fixed``)."""
    hosts: int = 0
    """A finite cloud shared with other tenants (:mod:`elasticsite.sim.cloud_slots`):
    this many hosts of ``host_cores`` and ``host_memory_mb``; 0: only ``vm_limit``."""
    host_cores: int = 8
    host_memory_mb: int = 16384
    vm_memory_mb: int = 2048
    tenant_vms: int = 0
    """Other tenants' VMs (of this cloud's VM size) holding slots from the start."""
    tenant_volunteers: float = 0.0
    urgent_policies: tuple[tuple[str, str], ...] = ()
    """Urgency -> cloud policy (``(("red", "preemption"),)``) for urgent launches."""
    vm_types: tuple[VMType, ...] = ()
    """The VM types it offers, by name (Cloud Scheduler mode's jobs name one); empty:
    one, ``vm``, of ``cores_per_vm`` cores."""

    @classmethod
    def paper000(cls, which: str, name: str | None = None, **kwargs: Any) -> CloudModel:
        """Paper 000's cloud ``which`` (``uchicago``, ``iu`` or ``ec2``), calibrated as in
        ``docs/boot-model.md``; ``kwargs`` set the other fields."""
        try:
            t = PAPER000[which]
        except KeyError:
            raise ValueError(
                f"unknown paper 000 cloud {which!r}; choose one of {', '.join(PAPER000)}"
            ) from None
        fields: dict[str, Any] = {
            "boot": Durations.uniform(t.boot - t.boot_jitter, t.boot + t.boot_jitter),
            "shutdown": Durations.uniform(
                t.shutdown - t.shutdown_jitter, t.shutdown + t.shutdown_jitter
            ),
            "image_transfer": t.path.transfer,
            "parallel_boots": t.path.parallel,
            "boot_estimate": t.mean_boot(CALIBRATION_BOOTS),
        }
        if which != "ec2":  # the paper capped its Nimbus clouds at 10 VMs
            fields["vm_limit"] = 10
        return cls(name=name or which, **{**fields, **kwargs})

    def __post_init__(self) -> None:
        if self.boot_estimate is not None and not self.boot_estimate >= 0:
            raise ValueError(f"boot_estimate must be >= 0 seconds, got {self.boot_estimate}")
        path = BootPath(self.image_transfer, self.parallel_boots)  # checks both
        if path.transfer > min(self.boot.values):
            raise ValueError(
                f"image_transfer ({path.transfer:g} s) must not exceed the shortest boot "
                f"alone ({min(self.boot.values):g} s), which includes it"
            )
        if not 0 <= self.boot_failure < 1:
            raise ValueError(f"boot_failure must be in [0, 1), got {self.boot_failure}")
        if self.interruptions_per_hour < 0 or self.spot_notice < 0:
            raise ValueError("interruptions_per_hour and spot_notice must be >= 0")
        if self.vm_limit < 0:
            raise ValueError(f"vm_limit must be >= 0, got {self.vm_limit}")
        if self.price_per_hour < 0 or self.billing_increment <= 0:
            raise ValueError("price_per_hour must be >= 0 and billing_increment > 0")
        if self.cores_per_vm < 1:
            raise ValueError(f"cores_per_vm must be >= 1, got {self.cores_per_vm}")
        if self.hosts < 0 or self.tenant_vms < 0 or not 0 <= self.tenant_volunteers <= 1:
            raise ValueError("hosts and tenant_vms must be >= 0, tenant_volunteers in [0, 1]")

    @property
    def path(self) -> BootPath:
        """The cloud's boot path: what its boots share."""
        return BootPath(self.image_transfer, self.parallel_boots)

    def boot_bound(self, n: int) -> float:
        """The longest ``n`` VMs launched together on the idle cloud take to boot."""
        return self.path.bound(n, self.boot.high)

    def cost(self, seconds: float) -> float:
        """What one VM alive for ``seconds`` costs."""
        return billed_cost(seconds, self.price_per_hour, self.billing_increment)

    def spec(self) -> CloudSpec:
        """The cloud as a policy sees it: boot and shutdown estimates are the means (of a
        boot alone; the core replaces them with what it observes, unless ``fixed``)."""
        return CloudSpec(
            name=self.name,
            driver="simulated",
            max_instances=self.vm_limit,
            price_per_hour=self.price_per_hour,
            billing_increment=self.billing_increment,
            boot_time=self.boot.mean if self.boot_estimate is None else self.boot_estimate,
            shutdown_time=self.shutdown.mean,
            vm_types=self.vm_types or (VMType("vm", self.cores_per_vm),),
            spot=self.spot or self.interruptions_per_hour > 0,
            waste_estimate=self.waste_estimate,
        )


def sim_cloud(
    preset: str,
    boot: str | None = None,
    shutdown: str | None = None,
    *,
    vm_limit: int | None = None,
    image_transfer: float | None = None,
    parallel_boots: int | None = None,
    **fields: Any,
) -> CloudModel:
    """Paper 000's cloud ``preset`` (or ``none``: 60 s boots, 6 s shutdowns), at most
    ``vm_limit`` VMs (default 10), with boot and shutdown replaced where given (the
    durations in :meth:`Durations.parse`'s forms), and ``fields`` set.

    Contention belongs to the calibrated cloud as calibrated: a cloud described by its
    own ``boot`` or ``vm_limit`` shares no boot path unless ``image_transfer`` or
    ``parallel_boots`` ask for one (each given replaces the preset's)."""
    if preset == "none":
        model = CloudModel("cloud", boot=Durations.constant(60.0), shutdown=Durations.constant(6.0))
    else:
        model = CloudModel.paper000(preset, "cloud")
    changes: dict[str, Any] = {"vm_limit": 10 if vm_limit is None else vm_limit, **fields}
    if boot is not None or vm_limit is not None:  # another cloud: the preset's times alone
        changes.update(image_transfer=0.0, parallel_boots=0, boot_estimate=None)
    if boot is not None:
        changes["boot"] = Durations.parse(boot)
    if image_transfer is not None:
        changes["image_transfer"] = image_transfer
    if parallel_boots is not None:
        changes["parallel_boots"] = parallel_boots
    if shutdown is not None:
        changes["shutdown"] = Durations.parse(shutdown)
    return replace(model, **changes)


def describe_cloud(model: CloudModel) -> str:
    """One line on how a simulated cloud boots: ``boots of 91-97 s alone; images over a
    shared link (35 s each alone), 10 boots at once``."""
    b = model.boot
    alone = f"{b.values[0]:g}" if b.kind == "constant" else f"{min(b.values):g}-{b.high:g}"
    failing = f", {model.boot_failure:.1%} never end" if model.boot_failure else ""
    return f"boots of {alone} s alone; {model.path.describe()}{failing}"


class NodeHost(Protocol):
    """What a booted or stopping instance tells its batch system (a worker's daemon)."""

    def register(self, name: str) -> None: ...
    def node_down(self, name: str) -> None: ...


class SimCloud:
    """A :class:`CloudModel` as a cloud driver on the virtual clock.

    ``launch`` is idempotent by name and refuses (``CloudError``) past the VM limit;
    an instance is PENDING for a boot time sampled from ``rng`` (what it takes alone;
    on a shared boot path, :class:`~elasticsite.boottime.BootPipeline` says when it
    ends), then RUNNING, when its node (the user data's ``node``) registers with
    ``batch``; ``terminate`` makes
    it STOPPING (its node goes down) for a sampled shutdown time, then TERMINATED,
    with ``ended_at`` set. ``describe`` reports each terminated instance once more,
    then forgets it, as real clouds do after a while. On a spot cloud each instance
    is taken back after an exponential lifetime (mean ``1 / interruptions_per_hour``
    hours): ``spot_notice`` seconds before, ``describe`` shows its ``reclaim_at``; then
    it is TERMINATED and ``reclaimed``, and its node goes down (its jobs go back to the
    queue).
    """

    def __init__(
        self, model: CloudModel, sim: Simulation, rng: random.Random, batch: NodeHost
    ) -> None:
        self.name = model.name
        self.model = model
        self.sim = sim
        self.rng = rng
        self.batch = batch
        self._by_name: dict[str, Instance] = {}
        self._node: dict[str, str] = {}
        self._live = 0
        self._serial = 0
        self._path: BootPipeline[str] | None = None
        """The boots sharing the cloud's boot path (None: nothing is shared)."""
        if model.path.shared:
            self._path = BootPipeline(model.path)
        self._ticks: float = math.inf
        """When the next look at the boot path is scheduled."""
        self._by_id: dict[str, Instance] = {}
        self.slots: SimSlots | None = None
        if model.hosts:
            vm = VMType("vm", model.cores_per_vm, model.vm_memory_mb)
            self.slots = SimSlots(model.hosts, model.host_cores, model.host_memory_mb, vm,
                                  dict(model.urgent_policies), model.tenant_vms,
                                  model.tenant_volunteers, rng)  # fmt: skip

    def launch(self, request: LaunchRequest) -> list[Instance]:
        tags, userdata = request.tags, request.userdata
        out: list[Instance] = []
        for name in request.names:
            inst = self._by_name.get(name)
            if inst is not None and inst.state is not InstanceState.TERMINATED:
                out.append(inst)
                continue
            if self._live >= self.model.vm_limit:
                raise CloudError(
                    f"cloud {self.name}: launch {name}: the limit of {self.model.vm_limit} VMs "
                    "is reached"
                )
            urgent_boot = None
            if self.slots is not None:  # raises when the hosts have no room
                urgent_boot = self.slots.take(f"{self.name}-i{self._serial + 1}", name, tags,
                                              self._urgent_act)  # fmt: skip
            self._serial += 1
            inst = Instance(
                f"{self.name}-i{self._serial}",
                name,
                InstanceState.PENDING,
                dict(tags),
                created_at=self.sim.now,
            )
            self._by_name[name] = inst
            self._node[inst.id] = userdata.get("node", name)
            self._live += 1
            boot = self.model.boot.sample(self.rng)
            if self.model.boot_failure and self.rng.random() < self.model.boot_failure:
                pass  # it never comes up: pending until the manager gives up on it
            elif urgent_boot is not None:  # paper 004's allocation delay under its policy
                self.sim.at(self.sim.now + urgent_boot, self._booted, inst)
            elif self._path is None:
                self.sim.at(self.sim.now + boot, self._booted, inst)
            else:  # its image crosses the shared link, after those ahead of it
                self._by_id[inst.id] = inst
                rest = boot - self.model.image_transfer
                self._ended(self._path.add(inst.id, self.sim.now, rest))
            rate = self.model.interruptions_per_hour
            if rate > 0:
                end = self.sim.now + self.rng.expovariate(rate / 3600.0)
                notice = max(self.sim.now, end - self.model.spot_notice)
                self.sim.at(notice, self._notice, (inst, end))
                self.sim.at(end, self._reclaim, inst)
            out.append(inst)
        return out

    def _notice(self, arg: tuple[Instance, float]) -> None:
        inst, end = arg
        if inst.state in (InstanceState.PENDING, InstanceState.RUNNING):
            inst.reclaim_at = end

    def _reclaim(self, inst: Instance) -> None:
        if inst.state not in (InstanceState.PENDING, InstanceState.RUNNING):
            return  # terminated before the cloud wanted it back
        node = self._node.get(inst.id)
        if node is not None and inst.state is InstanceState.RUNNING:
            self.batch.node_down(node)
        inst.reclaimed = True
        self._stopped(inst)

    def _ended(self, ended: list[tuple[str, float]]) -> None:
        """Boots the path says have ended join now; the next look at the path is booked."""
        for instance_id, _ in ended:
            inst = self._by_id.pop(instance_id, None)
            if inst is not None:
                self._booted(inst)
        due = self._path.due() if self._path is not None else math.inf
        if due < self._ticks:
            self._ticks = due
            self.sim.at(due, self._tick, due)

    def _tick(self, at: float) -> None:
        if at != self._ticks or self._path is None:
            return  # a look booked before an earlier one was
        self._ticks = math.inf
        self._ended(self._path.advance(self.sim.now))

    def _leave_path(self, inst: Instance) -> None:
        """A boot cancelled: its place and its share of the link go to the others."""
        if self._path is not None and self._by_id.pop(inst.id, None) is not None:
            self._ended(self._path.remove(inst.id, self.sim.now))

    def _booted(self, inst: Instance) -> None:
        if inst.state is InstanceState.PENDING:
            inst.state = InstanceState.RUNNING
            self.batch.register(self._node[inst.id])

    def describe(self) -> list[Instance]:
        found = list(self._by_name.values())
        for inst in found:
            if inst.state is InstanceState.TERMINATED:
                del self._by_name[inst.name]  # reported once, then gone
        return found

    def terminate(self, instance_ids: Sequence[str]) -> None:
        wanted = set(instance_ids)
        for inst in self._by_name.values():
            if inst.id in wanted and inst.state in (InstanceState.PENDING, InstanceState.RUNNING):
                self._leave_path(inst)
                inst.state = InstanceState.STOPPING
                self.batch.node_down(self._node[inst.id])
                delay = self.model.shutdown.sample(self.rng)
                self.sim.at(self.sim.now + delay, self._stopped, inst)

    def _stopped(self, inst: Instance) -> None:
        self._leave_path(inst)
        inst.state = InstanceState.TERMINATED
        inst.ended_at = self.sim.now
        self._live -= 1
        self._node.pop(inst.id, None)
        if self.slots is not None:
            for resumed in self.slots.release(inst.id):
                self._node_back(self._instance(resumed))

    def _instance(self, instance_id: str) -> Instance | None:
        return next((i for i in self._by_name.values() if i.id == instance_id), None)

    def _urgent_act(self, instance_id: str, what: str, seconds: float) -> None:
        """An urgent launch's plan hits one of the site's own instances."""
        inst = self._instance(instance_id)
        if inst is None or inst.state not in (InstanceState.PENDING, InstanceState.RUNNING):
            return
        if inst.state is InstanceState.RUNNING:
            self.batch.node_down(self._node[inst.id])  # its jobs go back to the queue
        if what == "preempt":
            inst.reclaimed = True
            self._stopped(inst)
        elif what == "migrate":
            self.sim.at(self.sim.now + seconds, self._node_back, inst)
        # suspend: the node stays down until release() resumes the instance

    def _node_back(self, inst: Instance | None) -> None:
        if inst is not None and inst.state is InstanceState.RUNNING:
            self.batch.register(self._node[inst.id])
