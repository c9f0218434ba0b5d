"""Which queued jobs the clouds could serve at all, and in words why not the others.

A queued job is *servable* when some VM type of some cloud that is not closed could
run it:

* the cloud serves the job (its ``serves`` selector; with a redirecting policy, a job
  the policy could send to ``redirect_to`` is judged as if it were there);
* the type is the one the job names (``vm_type``) and boots the image it names
  (``vm_image``), where the cloud says what its types boot;
* the type has the cores each of the job's nodes needs (``cores`` spread over
  ``node_count`` nodes, and at least ``vm_cores``) and the memory it asks for
  (``vm_memory``, MiB);
* the cloud may run as many workers as the job has nodes (``max_instances``; for an
  urgent job, plus the site's urgent allowance up to the cloud's ``quota``).

The other attributes (architecture, storage, network, node features) are not judged:
no VM type says anything about them. Neither is the walltime: clouds have no lifetime
limit.

Everything is decided per job *shape* (its cores and the attributes above), so a
queue of 100,000 jobs in a handful of shapes costs a handful of verdicts. A
:class:`Judge` is kept per set of cloud facts and reused from step to step;
:mod:`elasticsite.servable` splits a snapshot's queue with it (a job a worker the
site already has could run is servable there too).

Pure: no clock, no I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elasticsite.attributes import (
    EMPTY,
    NODE_COUNT,
    PARTITION,
    VM_CORES,
    VM_IMAGE,
    VM_MEMORY,
    VM_TYPE,
)
from elasticsite.model import CloudSpec, Job, VMType, Worker

__all__ = [
    "SITE_WAITS",
    "Judge",
    "Need",
    "Shape",
    "explain",
    "judge",
    "on_site",
    "runs_on_site",
    "why_unservable",
]

Shape = tuple[Any, ...]
"""A job's shape: its cores, then its values of :attr:`Judge.keys` (None: absent)."""
URGENCY = "urgency"
"""The attribute ``elasticsite urgent submit`` marks an urgent job with."""
SITE_WAITS = "it waits for the site's own nodes"
"""How a mark ends when the site's own nodes may still run the job."""
_BASE_KEYS = (NODE_COUNT, VM_TYPE, VM_IMAGE, VM_CORES, VM_MEMORY)
_UNKNOWN = object()
_MAX_SHAPES = 16384
"""Verdicts a judge keeps before it starts afresh (a bound, never reached in practice)."""


def runs_on_site(reason: str) -> bool:
    """Whether a mark says the site's own nodes may still run the job."""
    return reason.endswith(SITE_WAITS)


def explain(reason: str) -> str:
    """A mark as people read it: ``no cloud can run it: REASON`` (or the site's form)."""
    return reason if runs_on_site(reason) else f"no cloud can run it: {reason}"


def _whole(raw: str | None) -> int | None:
    """A positive decimal attribute, or None when absent or not a positive number."""
    value = int(raw) if raw is not None and raw.strip().isdigit() else 0
    return value if value > 0 else None


@dataclass(frozen=True, slots=True)
class Need:
    """What one job shape needs of a VM type and of a cloud."""

    total: int
    """The job's cores, all nodes together."""
    nodes: int
    cores: int
    """Cores each worker needs: the job's share per node, at least its ``vm_cores``."""
    vm_type: str | None
    image: str | None
    vm_cores: int | None
    memory: int | None
    attrs: Mapping[str, str]
    """The job's attributes some cloud's ``serves`` selector reads."""
    urgent: bool


class Judge:
    """Verdicts on job shapes for one set of clouds (and closed clouds), kept per shape.

    ``redirect_to`` (a redirecting policy's target partition) lets a job count as
    served by the clouds serving that partition; ``urgent_extra`` is the site's urgent
    allowance of workers past ``max_instances``.
    """

    def __init__(
        self,
        clouds: Sequence[CloudSpec],
        closed: frozenset[str] = frozenset(),
        redirect_to: str | None = None,
        urgent_extra: int = 0,
    ) -> None:
        self.clouds = tuple(clouds)
        self.closed = closed
        self.redirect_to = redirect_to or None
        self.urgent_extra = urgent_extra
        self.by_name = {c.name: c for c in self.clouds}
        selected = sorted({key for c in self.clouds for key, _ in c.serves.terms})
        if self.redirect_to and PARTITION not in selected:
            selected = sorted({*selected, PARTITION})
        self.selector_keys = tuple(selected)
        self.keys = (*_BASE_KEYS, *self.selector_keys, *((URGENCY,) if urgent_extra else ()))
        """The attributes a shape is made of, after the job's cores."""
        self._blank = (None,) * len(self.keys)
        self._needs: dict[Shape, Need] = {}
        self._verdicts: dict[Shape, str | None] = {}
        self._types: dict[Shape, VMType | None] = {}
        self._fits_worker: dict[Shape, bool] = {}
        self._images = {c.name: dict(c.images) for c in self.clouds}
        self.open = tuple(c for c in self.clouds if c.name not in closed)
        plain_ok = [
            max(v.cores for v in c.vm_types)
            for c in self.open
            if c.max_instances >= 1 and self._serves(c, {})
        ]
        self.plain_limit = max(plain_ok, default=0)
        """The most cores a job without attributes may ask for and still be served."""

    # -- shapes --------------------------------------------------------------

    def key(self, job: Job) -> Shape:
        """``job``'s shape: its cores and the attributes in :attr:`keys`."""
        attrs = job.attributes
        if attrs is EMPTY:
            return (job.cores, *self._blank)
        get = attrs.get
        return (job.cores, *[get(k) for k in self.keys])

    def plain_key(self, cores: int) -> Shape:
        return (cores, *self._blank)

    def need(self, key: Shape) -> Need:
        found = self._needs.get(key)
        if found is None:
            self._trim()
            total = int(key[0])
            raw = dict(zip(self.keys, key[1:], strict=True))
            nodes = _whole(raw[NODE_COUNT]) or 1
            vm_cores = _whole(raw[VM_CORES])
            found = Need(
                total=total,
                nodes=nodes,
                cores=max(-(-total // nodes), vm_cores or 0, 1),
                vm_type=raw[VM_TYPE] or None,
                image=raw[VM_IMAGE] or None,
                vm_cores=vm_cores,
                memory=_whole(raw[VM_MEMORY]),
                attrs={k: raw[k] for k in self.selector_keys if raw[k] is not None},
                urgent=bool(raw.get(URGENCY)),
            )
            self._needs[key] = found
        return found

    def _trim(self) -> None:
        if len(self._needs) > _MAX_SHAPES:
            self._needs.clear()
            self._verdicts.clear()
            self._types.clear()
            self._fits_worker.clear()

    # -- what fits where -----------------------------------------------------

    def _serves(self, cloud: CloudSpec, attrs: Mapping[str, str]) -> bool:
        if cloud.serves.matches(attrs):
            return True
        target = self.redirect_to
        return target is not None and cloud.serves.matches({**attrs, PARTITION: target})

    def _boots(self, cloud: CloudSpec, vm: VMType, image: str) -> bool:
        images = self._images.get(cloud.name)
        if not images:
            return True  # the cloud does not say what it boots
        return images.get(vm.name) == image

    def fits(self, need: Need, cloud: CloudSpec, vm: VMType) -> bool:
        """Whether a worker of type ``vm`` on ``cloud`` can run (one node of) the job."""
        return (
            (need.vm_type is None or vm.name == need.vm_type)
            and vm.cores >= need.cores
            and (need.memory is None or vm.memory_mb >= need.memory)
            and (need.image is None or self._boots(cloud, vm, need.image))
            and self._serves(cloud, need.attrs)
        )

    def launch_type(self, key: Shape, cloud: CloudSpec) -> VMType | None:
        """The type to launch on ``cloud`` for this shape: the cloud's default when it
        fits, else the smallest type that does; None when none does."""
        memo = (key, cloud.name)
        known = self._types.get(memo, _UNKNOWN)
        if known is not _UNKNOWN:
            return known  # type: ignore[return-value]
        need = self.need(key)
        fitting = [v for v in cloud.vm_types if self.fits(need, cloud, v)]
        found: VMType | None = None
        if fitting:
            found = (
                cloud.default_vm
                if fitting[0] is cloud.default_vm
                else min(fitting, key=lambda v: (v.cores, v.memory_mb))
            )
        self._types[memo] = found
        return found

    def fits_worker(self, key: Shape, worker: Worker) -> bool:
        """Whether ``worker`` (its cloud, type and cores) could run one node of the job."""
        memo = (key, worker.cloud, worker.vm_type, worker.cores)
        found = self._fits_worker.get(memo)
        if found is None:
            need = self.need(key)
            cloud = self.by_name.get(worker.cloud)
            vm = None
            if cloud is not None:
                vm = next((v for v in cloud.vm_types if v.name == worker.vm_type), None)
            if cloud is None or vm is None:
                # A cloud (or type) no longer configured: what the worker itself says.
                found = worker.cores >= need.cores and need.vm_type in (None, worker.vm_type)
            else:
                found = self.fits(need, cloud, VMType(vm.name, worker.cores, vm.memory_mb))
            self._fits_worker[memo] = found
        return found

    def _limit(self, cloud: CloudSpec, need: Need) -> int:
        """How many workers of this site ``cloud`` may run for the job."""
        if not (need.urgent and self.urgent_extra):
            return cloud.max_instances
        extra = cloud.max_instances + self.urgent_extra
        return extra if cloud.quota is None else min(extra, cloud.quota)

    # -- verdicts ------------------------------------------------------------

    def verdict(self, key: Shape) -> str | None:
        """Why no open cloud could run a job of this shape; None when one could."""
        found = self._verdicts.get(key, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._verdicts[key] = self._reason(self.need(key))
        return found  # type: ignore[return-value]

    def _reason(self, need: Need) -> str | None:
        if not self.clouds:
            return "no cloud is configured"
        serving = [c for c in self.clouds if self._serves(c, need.attrs)]
        if not serving:
            return self._unserved(need)
        pairs = [(c, v) for c in serving for v in c.vm_types]
        if need.vm_type is not None:
            named = [(c, v) for c, v in pairs if v.name == need.vm_type]
            if not named:
                offered = ", ".join(dict.fromkeys(v.name for _, v in pairs))
                return f"asks for VM type '{need.vm_type}'; the clouds offer {offered}"
            pairs = named
        if need.image is not None:
            booting = [(c, v) for c, v in pairs if self._boots(c, v, need.image)]
            if not booting:
                images = ", ".join(
                    dict.fromkeys(i for c, v in pairs if (i := self._images[c.name].get(v.name)))
                )
                return f"asks for image '{need.image}'; the clouds boot {images}"
            pairs = booting
        big = [(c, v) for c, v in pairs if v.cores >= need.cores]
        if not big:
            top = max(v.cores for _, v in pairs)
            if need.vm_cores is not None and need.vm_cores >= need.cores:
                return f"asks for VMs of {need.vm_cores} cores; the largest VM type offers {top}"
            if need.nodes > 1:
                return (
                    f"needs {need.cores} cores on each of {need.nodes} nodes; the largest "
                    f"VM type offers {top}"
                )
            return f"needs {need.total} cores; the largest VM type offers {top}"
        pairs = big
        if need.memory is not None:
            roomy = [(c, v) for c, v in pairs if v.memory_mb >= need.memory]
            if not roomy:
                top = max(v.memory_mb for _, v in pairs)
                return f"asks for {need.memory} MiB of memory; the largest VM type offers {top} MiB"
            pairs = roomy
        many = [(c, v) for c, v in pairs if self._limit(c, need) >= need.nodes]
        if not many:
            most = max(self._limit(c, need) for c, _ in pairs)
            if need.nodes == 1:
                return "the clouds that could run it may start no worker (max_instances 0)"
            return (
                f"needs {need.nodes} nodes; the clouds that could run it may start at most "
                f"{most} workers"
            )
        if all(c.name in self.closed for c, _ in many):
            shut = ", ".join(dict.fromkeys(c.name for c, _ in many))
            return f"only closed clouds could run it ({shut})"
        return None

    def _unserved(self, need: Need) -> str:
        """Which of the job's attributes no cloud's ``serves`` selector takes."""
        misses: dict[tuple[str, str | None], list[str]] = {}
        for cloud in self.clouds:
            for key, allowed in cloud.serves.terms:
                value = need.attrs.get(key)
                if value is None or not _one_of(value, allowed):
                    misses.setdefault((key, value), []).append(cloud.name)
                    break
        if len(misses) == 1:
            ((key, value),) = misses
            if value is None:
                served = sorted({v for c in self.clouds for k, vs in c.serves.terms
                                 if k == key for v in vs})  # fmt: skip
                return f"gives no {key}, and the clouds serve {key} {', '.join(served)} only"
            return f"{key} '{value}' is served by no cloud"
        return (
            "no cloud serves it ("
            + "; ".join(
                f"{', '.join(names)}: {key} {'not given' if value is None else repr(value)}"
                for (key, value), names in misses.items()
            )
            + ")"
        )


def _one_of(value: str, allowed: frozenset[str]) -> bool:
    """Whether ``value``, or one of its comma-separated parts, is ``allowed``."""
    if value in allowed:
        return True
    return "," in value and any(part.strip() in allowed for part in value.split(","))


def judge(
    clouds: Sequence[CloudSpec],
    closed: frozenset[str] = frozenset(),
    redirect_to: str | None = None,
    urgent_extra: int = 0,
) -> Judge:
    """The judge for these clouds, reused while what it depends on stays the same
    (a cloud's boot and shutdown estimates change from step to step; it ignores them)."""
    facts = tuple(
        (c.name, c.max_instances, c.quota, c.vm_types, c.serves, c.images) for c in clouds
    )
    return _cached_by_facts(facts, tuple(clouds), closed, redirect_to or None, urgent_extra)


_JUDGES: dict[Shape, Judge] = {}
_JUDGES_LOCK = threading.Lock()  # several managers may run in one process (tests)


def _cached_by_facts(
    facts: Shape,
    clouds: tuple[CloudSpec, ...],
    closed: frozenset[str],
    redirect_to: str | None,
    urgent_extra: int,
) -> Judge:
    memo = (facts, closed, redirect_to, urgent_extra)
    with _JUDGES_LOCK:
        found = _JUDGES.get(memo)
        if found is None:
            if len(_JUDGES) >= 16:
                _JUDGES.pop(next(iter(_JUDGES)))
            found = _JUDGES[memo] = Judge(clouds, closed, redirect_to, urgent_extra)
    return found


def why_unservable(
    job: Job,
    clouds: Sequence[CloudSpec],
    closed: Iterable[str] = (),
    site_cores: int = 0,
) -> str | None:
    """Why no cloud that is not ``closed`` could run ``job``; None when one could.

    With ``site_cores`` (cores of the site's own nodes that are up) at least the job's,
    the reason says that the job waits for them.
    """
    j = judge(clouds, frozenset(closed))
    reason = j.verdict(j.key(job))
    if reason is not None and site_cores:
        reason = on_site(reason, job.cores, site_cores)
    return reason


def on_site(reason: str, cores: int, site_cores: int) -> str:
    """``reason`` for a job the site's own nodes (``site_cores`` up) may still run."""
    if site_cores >= cores:
        return f"no cloud can run it ({reason}); {SITE_WAITS}"
    return reason
