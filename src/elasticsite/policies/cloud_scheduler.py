"""Cloud Scheduler mode (paper 003): VMs of the type each job names, shared evenly by users.

Every job names the VM it needs: HTCondor's ``+VMType``, the ``vm_type`` attribute
(the embedded site: ``elasticsite submit --attr vm_type=NAME``), or a node feature
equal to a VM type's name (Slurm ``--constraint=NAME``, Torque ``nodes=1:NAME``, the
feature each worker's node is declared with). A job naming a type no cloud offers,
or none, is not served here. Each worker is one VM of one type and runs that type's
jobs only (its node is declared for the type: the policy declares ``typed_nodes``).

* **Demand per VM type.** A type's queued jobs are served by its idle and booting
  workers first; the rest get new VMs on a cloud offering the type, chosen by the
  cloud rule within every cap.
* **Fair share.** The site's VMs (the clouds' ``max_instances``) are divided evenly
  among the users with jobs, a user needing fewer leaving the rest to the others. A
  user runs on a VM when a job of theirs does.
* **Re-balancing.** When a user holds more VMs than their share while another waits
  for theirs, the first user's queued jobs are held (no retiring VM takes a new one)
  and the surplus VMs go: ``graceful`` drains each so it is retired after its current
  job; ``immediate`` terminates them now and the batch system requeues their jobs.
  Held jobs are released as soon as their user is back under their share.
* **VMs in error** fail and are given back by the core; their jobs are still queued,
  so replacements are launched.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Literal

from elasticsite.attributes import FEATURES, VM_TYPE
from elasticsite.model import (
    Cause,
    CloudSpec,
    Decision,
    Drain,
    Job,
    Launch,
    Terminate,
    Worker,
    WorkerState,
)
from elasticsite.plugins import PluginOptions
from elasticsite.policies.base import PolicySettings, register
from elasticsite.policies.planning import census, rank_clouds
from elasticsite.snapshot import SiteSnapshot

__all__ = ["decide", "fair_shares", "vm_type_of"]

S = WorkerState
_SPARE = (S.REQUESTED, S.BOOTING, S.IDLE)
"""Workers that will take a queued job of their type without a new launch."""


def fair_shares(capacity: int, demand: dict[str, int]) -> dict[str, int]:
    """VMs per user: ``capacity`` divided evenly among the users with demand, none
    getting more than they need (what one leaves goes to the others). When the
    division leaves a remainder, one more goes to each user in name order."""
    share = dict.fromkeys(demand, 0)
    left = max(0, capacity)
    pending = sorted((d, u) for u, d in demand.items() if d > 0)
    while pending:
        each = left // len(pending)
        need, user = pending[0]
        if need <= each:  # the smallest demand is met in full; the rest share what is left
            share[user] = need
            left -= need
            pending.pop(0)
            continue
        extra = left - each * len(pending)
        for i, name in enumerate(sorted(u for _, u in pending)):
            share[name] = each + (1 if i < extra else 0)
        break
    return share


def _offered(clouds: Iterable[CloudSpec]) -> set[str]:
    return {vm.name for c in clouds for vm in c.vm_types}


def vm_type_of(job: Job, offered: set[str]) -> str | None:
    """The offered VM type ``job`` asks for: its ``vm_type``, else the first of its
    features that names one; None if it asks for none of them."""
    named = job.attributes.get(VM_TYPE)
    if named is not None:
        return named if named in offered else None
    for feature in re.split(r"[&,|\[\]()*]", job.attributes.get(FEATURES, "")):
        if feature.strip() in offered:
            return feature.strip()
    return None


def decide(snapshot: SiteSnapshot, settings: PolicySettings) -> Decision:
    decision = Decision()
    offered = _offered(snapshot.clouds)
    types = {j.id: t for j in (*snapshot.queued, *snapshot.held) if (t := vm_type_of(j, offered))}
    served = [j for j in snapshot.queued if j.id in types]
    held = [j for j in snapshot.held if j.id in types]
    live = [w for w in snapshot.workers if w.state.live]

    # Who runs where: a worker belongs to the user whose job it runs.
    by_node: dict[str, str] = {}
    for job in snapshot.running:
        if job.node:
            by_node.setdefault(job.node, job.user)
    owned: dict[str, list[Worker]] = defaultdict(list)
    for w in live:
        user = by_node.get(w.node or w.id)
        if user is not None and w.state is S.BUSY:
            owned[user].append(w)

    demand: Counter[str] = Counter()
    for job in (*served, *held):
        demand[job.user] += 1
    for user, workers in owned.items():
        demand[user] += len(workers)
    capacity = sum(c.max_instances for c in snapshot.clouds)
    shares = fair_shares(capacity, dict(demand))

    over = {u: len(owned[u]) - shares.get(u, 0) for u in owned}
    over = {u: n for u, n in over.items() if n > 0}
    waiting = {
        u for u in demand if len(owned.get(u, ())) < shares.get(u, 0) and _queued_of(u, served)
    }
    full = len(live) >= capacity

    # Re-balance: only when someone under their share waits and the site is full.
    if over and waiting and full:
        for user, surplus in sorted(over.items()):
            decision.hold.extend(j for j in served if j.user == user)
            victims = sorted(owned[user], key=lambda w: (-w.requested_at, w.id))[:surplus]
            for w in victims:
                if settings.rebalance == "immediate":
                    decision.terminate.append(Terminate(w.id, Cause.FAIR_SHARE))
                elif w.state is S.BUSY:
                    decision.drain.append(Drain(w.id, Cause.FAIR_SHARE))
        held_users = set(over)
    else:
        held_users = set()

    # Release the held jobs of users now back within their share (or alone).
    room = {u: shares.get(u, 0) - len(owned.get(u, ())) for u in demand}
    for job in held:
        if job.user in held_users:
            continue
        if not (over and waiting) or room.get(job.user, 0) > 0:
            decision.release.append(job.id)
            room[job.user] = room.get(job.user, 0) - 1

    _launch(decision, snapshot, settings, served, types, held_users, shares, owned)
    _release_idle(decision, snapshot, served, types)
    return decision


def _queued_of(user: str, jobs: Sequence[Job]) -> bool:
    return any(j.user == user for j in jobs)


def _launch(
    decision: Decision,
    snapshot: SiteSnapshot,
    settings: PolicySettings,
    served: Sequence[Job],
    types: dict[str, str],
    held_users: set[str],
    shares: dict[str, int],
    owned: dict[str, list[Worker]],
) -> None:
    """New VMs for the queued jobs no spare worker of their type will take, within
    each user's share and every cloud's cap."""
    room = {u: shares.get(u, 0) - len(owned.get(u, ())) for u in shares}
    need: Counter[str] = Counter()
    for job in served:  # queue order: the batch system's priorities decide who goes first
        if job.user in held_users or room.get(job.user, 0) <= 0:
            continue
        room[job.user] -= 1
        need[types[job.id]] += 1
    spare = Counter(w.vm_type for w in snapshot.workers if w.state in _SPARE)
    cen = census(snapshot)
    live = dict(cen.live_by_cloud or {})
    spend = cen.spend_per_hour
    cap = settings.spend_cap_per_hour
    usable = [c for c in snapshot.clouds if c.name not in snapshot.closed]
    for vm_type in sorted(need):
        count = need[vm_type] - spare[vm_type]
        offering = [c for c in usable if any(v.name == vm_type for v in c.vm_types)]
        for c in rank_clouds(offering, settings.cloud_rule, live):
            if count <= 0:
                break
            free = c.max_instances - live.get(c.name, 0)
            if cap is not None and c.price_per_hour > 0:
                free = min(free, max(0, int((cap - spend) / c.price_per_hour + 1e-9)))
            n = min(count, free)
            if n > 0:
                decision.launch.append(Launch(c.name, vm_type, n, Cause.DEMAND))
                live[c.name] = live.get(c.name, 0) + n
                spend += n * c.price_per_hour
                count -= n


def _release_idle(
    decision: Decision, snapshot: SiteSnapshot, served: Sequence[Job], types: dict[str, str]
) -> None:
    """Drain idle workers of a type no queued job needs (they are given back when
    drained); a worker already leaving is left alone."""
    wanted = Counter(types[j.id] for j in served)
    draining = {d.worker_id for d in decision.drain}
    for w in sorted(snapshot.workers, key=lambda w: (w.requested_at, w.id)):
        if w.state is not S.IDLE or w.id in draining:
            continue
        if wanted[w.vm_type] > 0:
            wanted[w.vm_type] -= 1
            continue
        decision.drain.append(Drain(w.id, Cause.IDLE))


class CloudSchedulerOptions(PluginOptions):
    """How a user's VMs over their share go, in ``[policy]``: ``graceful`` retires each
    after its current job, ``immediate`` terminates them now."""

    rebalance: Literal["graceful", "immediate"] = "graceful"


register("cloud_scheduler", options=CloudSchedulerOptions, typed_nodes=True)(decide)
