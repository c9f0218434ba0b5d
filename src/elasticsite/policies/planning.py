"""Turning a policy's wish ("n more workers", "release m idle ones") into a Decision.

Every built-in policy goes through :func:`scale_up` and :func:`scale_down`, so all of
them honour the same rules:

* per-cloud ``max_instances`` and the optional site-wide spending cap;
* a launch is of a VM type that fits the queued jobs it is launched for, on a cloud
  that serves them: the cloud's default type when it fits, otherwise the smallest type
  that does; idle and booting workers take the jobs they fit first;
* a draining worker is put back into service before any new one is launched;
* the cloud of each new worker is chosen by ``settings.cloud_rule``;
* on clouds that bill by the hour, an idle worker that is already paid for is kept
  until ``settings.billing_margin`` seconds before its next billing boundary, unless
  the caller forces its release;
* only idle workers are released, and releasing means draining: the worker is
  terminated once the batch system confirms it runs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from elasticsite import feasibility
from elasticsite.model import (
    Cause,
    CloudSpec,
    Decision,
    Drain,
    Launch,
    Undrain,
    VMType,
    Worker,
    WorkerState,
)
from elasticsite.policies.base import PolicySettings
from elasticsite.snapshot import SiteSnapshot

__all__ = ["Census", "census", "paid_time_left", "preferred_cloud", "scale_down", "scale_up"]


@dataclass(slots=True)
class Census:
    """Worker counts a policy starts from, gathered in one pass over the snapshot."""

    pending: int = 0
    booting: int = 0
    idle: int = 0
    busy: int = 0
    draining: int = 0
    terminating: int = 0
    free_cores: int = 0
    pending_cores: int = 0
    live_by_cloud: dict[str, int] | None = None
    spend_per_hour: float = 0.0

    @property
    def serving(self) -> int:
        """Workers that are, or will be, available for jobs (not draining or leaving)."""
        return self.pending + self.idle + self.busy


def census(snapshot: SiteSnapshot) -> Census:
    """Count the snapshot's workers by state in one pass (inlined: it runs on every decision)."""
    prices = {c.name: c.price_per_hour for c in snapshot.clouds}
    live: dict[str, int] = {}
    pending = booting = idle = busy = draining = terminating = 0
    free = pending_cores = 0
    spend = 0.0
    S = WorkerState
    IDLE, BUSY, REQUESTED, BOOTING, DRAINING = S.IDLE, S.BUSY, S.REQUESTED, S.BOOTING, S.DRAINING
    final = (S.TERMINATED, S.FAILED)
    for w in snapshot.workers:
        st = w.state
        if st in final:
            continue
        cloud = w.cloud
        live[cloud] = live.get(cloud, 0) + 1
        spend += prices.get(cloud, 0.0)
        if st is BUSY:
            busy += 1
            free += w.free_cores
        elif st is IDLE:
            idle += 1
            free += w.free_cores or w.cores
        elif st is REQUESTED or st is BOOTING:
            pending += 1
            pending_cores += w.cores
            if st is BOOTING:
                booting += 1
        elif st is DRAINING and w.reclaim_at is None:
            draining += 1
        else:  # terminating, or a spot worker the cloud is taking back
            terminating += 1
    return Census(
        pending=pending,
        booting=booting,
        idle=idle,
        busy=busy,
        draining=draining,
        terminating=terminating,
        free_cores=free,
        pending_cores=pending_cores,
        live_by_cloud=live,
        spend_per_hour=spend,
    )


def rank_clouds(clouds: list[CloudSpec], rule: str, live: dict[str, int]) -> list[CloudSpec]:
    """``clouds`` in the order the cloud ``rule`` fills them (``live``: workers per cloud)."""
    order = {c.name: i for i, c in enumerate(clouds)}
    if rule == "cheapest":
        return sorted(clouds, key=lambda c: (c.price_per_hour, c.waste_time, order[c.name]))
    if rule == "fastest":
        return sorted(clouds, key=lambda c: (c.waste_time, c.price_per_hour, order[c.name]))
    if rule == "ordered":
        return list(clouds)
    if rule == "spot_first":  # spot capacity first, on-demand when spot is closed or full
        return sorted(clouds, key=lambda c: (not c.spot, c.price_per_hour, order[c.name]))
    if rule == "balanced":
        return sorted(
            clouds,
            key=lambda c: (
                -(c.max_instances - live.get(c.name, 0)),
                c.price_per_hour,
                order[c.name],
            ),
        )
    raise ValueError(
        f"unknown cloud rule {rule!r}; choose one of cheapest, fastest, ordered, balanced, "
        "spot_first"
    )


def preferred_cloud(
    snapshot: SiteSnapshot, settings: PolicySettings, *, counted: Census | None = None
) -> CloudSpec | None:
    """The cloud the next worker would go to (its waste time is what policies weigh)."""
    if not snapshot.clouds:
        return None
    live = (counted or census(snapshot)).live_by_cloud or {}
    ranked = rank_clouds(list(snapshot.clouds), settings.cloud_rule, live)
    shut = snapshot.closed
    for c in ranked:
        if live.get(c.name, 0) < c.max_instances and c.name not in shut:
            return c
    return next((c for c in ranked if c.name not in shut), ranked[0])


def scale_up(
    snapshot: SiteSnapshot,
    settings: PolicySettings,
    count: int,
    cause: Cause,
    *,
    counted: Census | None = None,
) -> Decision:
    """Add up to ``count`` workers: undrain first, then launch within every cap."""
    decision = Decision()
    if count <= 0:
        return decision
    cen = counted or census(snapshot)
    # A draining worker is already booted, joined and paid for: reuse it.
    if cen.draining:
        for w in snapshot.workers:
            if count <= 0:
                break
            if w.state is WorkerState.DRAINING and w.reclaim_at is None:
                decision.undrain.append(Undrain(w.id, Cause.DEMAND_RETURNED))
                count -= 1
    if count <= 0 or not snapshot.clouds:
        return decision
    live = dict(cen.live_by_cloud or {})
    spend = cen.spend_per_hour
    cap = settings.spend_cap_per_hour
    usable = [c for c in snapshot.clouds if c.name not in snapshot.closed]
    ranked = rank_clouds(usable, settings.cloud_rule, live)
    planned: dict[str, int] = {}
    if settings.cloud_rule == "balanced":
        # One at a time so the load spreads; the number of clouds is small. Ties on
        # free capacity go to the cheaper cloud at every step, as when launched singly.
        order = {c.name: i for i, c in enumerate(usable)}
        while count > 0:
            best = None
            for c in ranked:
                free = c.max_instances - live.get(c.name, 0)
                if free <= 0 or (cap is not None and spend + c.price_per_hour > cap + 1e-9):
                    continue
                key = (-free, c.price_per_hour, order[c.name])
                if best is None or key < best[0]:
                    best = (key, c)
            if best is None:
                break
            c = best[1]
            live[c.name] = live.get(c.name, 0) + 1
            planned[c.name] = planned.get(c.name, 0) + 1
            spend += c.price_per_hour
            count -= 1
    else:
        for c in ranked:
            if count <= 0:
                break
            free = c.max_instances - live.get(c.name, 0)
            if cap is not None and c.price_per_hour > 0:
                affordable = int((cap - spend) / c.price_per_hour + 1e-9)
                free = min(free, max(0, affordable))
            n = min(count, free)
            if n > 0:
                planned[c.name] = n
                live[c.name] = live.get(c.name, 0) + n
                spend += n * c.price_per_hour
                count -= n
    if not planned:
        return decision
    if not _defaults_fit(snapshot, usable):
        start = dict(cen.live_by_cloud or {})
        decision.launch = _typed_launches(
            snapshot, settings, count + sum(planned.values()), cause, ranked, start, cen
        )
        return decision
    for c in snapshot.clouds:
        if planned.get(c.name):
            decision.launch.append(Launch(c.name, c.default_vm.name, planned[c.name], cause))
    return decision


def _defaults_fit(snapshot: SiteSnapshot, usable: list[CloudSpec]) -> bool:
    """Whether every queued job fits the default type of every usable cloud and every
    such cloud serves it: then where a worker goes is all that matters (the fast path)."""
    if not snapshot.queued:
        return True
    top = snapshot.plain_cores()
    return (
        top is not None
        and all(not c.serves for c in usable)
        and top <= min((c.default_vm.cores for c in usable), default=0)
    )


def _typed_launches(
    snapshot: SiteSnapshot,
    settings: PolicySettings,
    count: int,
    cause: Cause,
    ranked: list[CloudSpec],
    live: dict[str, int],
    cen: Census,
) -> list[Launch]:
    """Up to ``count`` workers for the queued jobs in queue order, each of a type that
    fits its job on a cloud that serves it, chosen by the cloud rule within every cap.

    Idle and booting workers take the jobs they fit first (the policy counted them).
    Past the jobs, only a baseline (a floor, a fixed pool) launches more: of a type some
    queued job fits, the default when one does."""
    judged = feasibility.judge(snapshot.clouds, snapshot.closed)
    cap = settings.spend_cap_per_hour
    spend = cen.spend_per_hour
    balanced = settings.cloud_rule == "balanced"
    order = {c.name: i for i, c in enumerate(ranked)}
    S = WorkerState
    spare: dict[tuple[str, str, int], list[Any]] = {}
    for w in snapshot.workers:
        st = w.state
        if st is S.IDLE or st is S.REQUESTED or st is S.BOOTING:
            shape = (w.cloud, w.vm_type, w.cores)
            entry = spare.get(shape)
            if entry is None:
                spare[shape] = [1, w]
            else:
                entry[0] += 1
    planned: dict[tuple[str, str], int] = {}

    def room(c: CloudSpec) -> int:
        free = c.max_instances - live.get(c.name, 0)
        if cap is not None and c.price_per_hour > 0:
            free = min(free, int((cap - spend) / c.price_per_hour + 1e-9))
        return max(0, free)

    def pick(fits: Callable[[CloudSpec], bool]) -> CloudSpec | None:
        if balanced:
            best = None
            for c in ranked:
                if room(c) > 0 and fits(c):
                    rank = (-(c.max_instances - live.get(c.name, 0)), c.price_per_hour,
                            order[c.name])  # fmt: skip
                    if best is None or rank < best[0]:
                        best = (rank, c)
            return None if best is None else best[1]
        return next((c for c in ranked if room(c) > 0 and fits(c)), None)

    def add(c: CloudSpec, vm: VMType, n: int) -> None:
        nonlocal spend, count
        planned[c.name, vm.name] = planned.get((c.name, vm.name), 0) + n
        live[c.name] = live.get(c.name, 0) + n
        spend += n * c.price_per_hour
        count -= n

    seen: dict[feasibility.Shape, None] = {}
    for job in snapshot.queued:
        if count <= 0 or not any(room(c) for c in ranked):
            break
        key = judged.key(job)
        seen[key] = None
        nodes = judged.need(key).nodes
        while nodes > 0:  # a worker already there or on its way takes it
            fitting = [e for e in spare.values() if e[0] > 0 and judged.fits_worker(key, e[1])]
            if not fitting:
                break
            min(fitting, key=lambda e: e[1].cores)[0] -= 1
            nodes -= 1
        if nodes <= 0:
            continue
        cloud = pick(lambda c, key=key: judged.launch_type(key, c) is not None)  # type: ignore[misc]
        if cloud is not None:
            vm = judged.launch_type(key, cloud)
            assert vm is not None
            add(cloud, vm, min(nodes, count, room(cloud)))
    if count > 0 and cause is Cause.BASELINE:
        extra = {c.name: _baseline_type(judged, c, seen) for c in ranked}
        while count > 0:
            cloud = pick(lambda c: extra[c.name] is not None)
            if cloud is None:
                break
            vm = extra[cloud.name]
            assert vm is not None
            add(cloud, vm, 1 if balanced else min(count, room(cloud)))
    launches = []
    for c in snapshot.clouds:
        for vm in c.vm_types:
            if planned.get((c.name, vm.name)):
                launches.append(Launch(c.name, vm.name, planned[c.name, vm.name], cause))
    return launches


def _baseline_type(
    judged: feasibility.Judge, cloud: CloudSpec, keys: Iterable[feasibility.Shape]
) -> VMType | None:
    """The type a baseline worker on ``cloud`` takes while jobs are queued: the default
    when a queued job fits it, else the smallest type one fits; None when none does."""
    types = [t for k in keys if (t := judged.launch_type(k, cloud)) is not None]
    if not types:
        return None
    if any(t is cloud.default_vm for t in types):
        return cloud.default_vm
    return min(types, key=lambda v: (v.cores, v.memory_mb))


def paid_time_left(worker: Worker, cloud: CloudSpec, now: float) -> float:
    """Seconds until the worker's next billing boundary (billing starts at the request)."""
    inc = cloud.billing_increment
    if inc <= 0:
        return 0.0
    age = max(0.0, now - worker.requested_at)
    return inc - (age % inc)


def scale_down(
    snapshot: SiteSnapshot,
    settings: PolicySettings,
    count: int,
    cause: Cause,
    *,
    keep: int = 0,
    force: bool = False,
    counted: Census | None = None,
) -> Decision:
    """Drain up to ``count`` idle workers, leaving at least ``keep`` serving.

    Idle workers closest to their next billing boundary and on the dearest clouds go
    first. Without ``force``, an idle worker on an hourly cloud with more than
    ``billing_margin`` seconds of paid time left is kept (it costs nothing more).
    """
    decision = Decision()
    cen = counted or census(snapshot)
    count = min(count, cen.serving - keep)
    if count <= 0 or not cen.idle:
        return decision
    specs = {c.name: c for c in snapshot.clouds}
    now = snapshot.now
    candidates: list[tuple[float, float, str, Worker]] = []
    for w in snapshot.workers:
        if w.state is not WorkerState.IDLE:
            continue
        spec = specs.get(w.cloud)
        if spec is None:
            candidates.append((0.0, 0.0, w.id, w))
            continue
        left = paid_time_left(w, spec, now) if spec.hourly_billing else 0.0
        if not force and spec.hourly_billing and left > settings.billing_margin:
            continue
        candidates.append((left, -spec.price_per_hour, w.id, w))
    candidates.sort(key=lambda t: (t[0], t[1], t[2]))
    for left, _price, _wid, w in candidates[:count]:
        spec = specs.get(w.cloud)
        why = cause
        if (
            spec is not None
            and spec.hourly_billing
            and not force
            and left <= settings.billing_margin
        ):
            why = Cause.BILLING_BOUNDARY if cause is Cause.IDLE else cause
        decision.drain.append(Drain(w.id, why))
    return decision
