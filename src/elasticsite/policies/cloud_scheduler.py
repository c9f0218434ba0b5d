"""Cloud Scheduler mode (paper 003): VMs of the type each job names, shared evenly by users.

Every job names the VM it needs: HTCondor's ``+VMType``, the ``vm_type`` attribute
(the embedded site: ``elasticsite submit --attr vm_type=NAME``), or a node feature
equal to a VM type's name (Slurm ``--constraint=NAME``, Torque ``nodes=1:NAME``, the
feature each worker's node is declared with). A job naming a type no cloud offers,
or none, is not served here. Each worker is one VM of one type and runs that type's
jobs only (its node is declared for the type: the policy declares ``typed_nodes``).

* **A VM serves one user.** Each VM is launched for a user's share and its node runs
  that user's jobs only (:attr:`~elasticsite.model.Launch.user`, the node's owner), so
  a VM booted for a newcomer is theirs, not the oldest job's.
* **Fair share, counted as the paper counts it** (:mod:`.fair_share`): the site's VMs
  (the clouds' ``max_instances``) are divided evenly among the users with jobs, a user
  needing fewer leaving the rest to the others, and every live VM a user holds counts
  against them (booting, idle, busy, draining).
* **Hand-overs before launches.** A user below their share who waits for a type first
  gets a spare VM of that type from a user above theirs (or nobody's): an idle one
  (a user with no more jobs of its type lends it, and gets it back when they need it),
  then one being drained, then, on a full site and with ``graceful``, a busy one, which
  finishes its job first. Then new VMs, within each cloud's cap and the spend cap, on
  a cloud that serves the job (its ``serves`` selector) with a type that fits it.
* **Re-balancing across types**, on a full site while someone below their share still
  waits: the queued jobs of the users above theirs that one of their VMs (or one of
  nobody's) could start are held, and as many of their VMs
  as the waiting need go: ``graceful`` drains each (retired after its current job);
  ``immediate`` terminates it now and the batch system requeues its job; never a VM
  still on its first job (its boot would be wasted). Held jobs are released once
  their user holds no more than their share, or nobody waits any more.
* **VMs in error** fail and are given back by the core; their jobs are still queued,
  so replacements are launched.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Literal

from elasticsite import feasibility
from elasticsite.attributes import FEATURES, VM_TYPE
from elasticsite.model import (
    Assign,
    Cause,
    CloudSpec,
    Decision,
    Drain,
    Job,
    Launch,
    Terminate,
    Undrain,
    Worker,
    WorkerState,
)
from elasticsite.plugins import PluginOptions
from elasticsite.policies.base import PolicySettings, options_of, register
from elasticsite.policies.fair_share import Book, Fit, by_user, fair_shares
from elasticsite.policies.planning import census, rank_clouds
from elasticsite.snapshot import SiteSnapshot

__all__ = ["decide", "fair_shares", "offered_types", "vm_type_of"]

S = WorkerState
_JOINED = (S.IDLE, S.BUSY)
_FREE_FIRST = {S.IDLE: 0, S.REQUESTED: 1, S.BOOTING: 1}
"""A giver's spare workers in the order they are handed over (idle ones at once)."""


def offered_types(clouds: Iterable[CloudSpec]) -> set[str]:
    """The names of every VM type the clouds offer."""
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
    immediate = options_of(settings, CloudSchedulerOptions).rebalance == "immediate"
    decision = Decision()
    offered = offered_types(snapshot.clouds)
    types = {
        j.id: t
        for j in (*snapshot.queued, *snapshot.held, *snapshot.running)
        if (t := vm_type_of(j, offered))
    }
    served = [j for j in snapshot.queued if j.id in types]
    held = [j for j in snapshot.held if j.id in types]
    running = [j for j in snapshot.running if j.id in types]
    capacity = sum(c.max_instances for c in snapshot.clouds)
    fit = Fit(feasibility.judge(snapshot.clouds, snapshot.closed), types)
    book = Book.of(snapshot.workers, running, served, held, types, capacity, fit)
    moved: set[str] = set()

    _undrain_own(decision, book, fit, moved)
    _hand_over(decision, book, fit, moved, (S.IDLE, S.REQUESTED, S.BOOTING))
    _launch(decision, snapshot, settings, book, fit)
    late = (S.DRAINING,) if immediate else (S.DRAINING, S.BUSY)
    _hand_over(decision, book, fit, moved, late)
    jobs = by_user((*served, *held), types)
    given_back = _release_idle(decision, book, moved, dict(jobs))
    unmet = book.unmet()
    over = book.over()
    if unmet and over:
        waiting = sum(unmet.values()) - given_back
        _rebalance(decision, book, snapshot.now, immediate, moved, over, waiting, jobs)
    # Held while above their share and someone waits, unless a VM of theirs would idle;
    # and only a job a VM could start now (its user's, or nobody's, of its type):
    # holding one nothing could run frees nothing, and it would be released and held
    # again as the user's VMs of other types come and go.
    now = snapshot.now
    held_users = {u for u in over if not book.unused(u, now, moved)} if unmet else set()
    startable = book.startable(moved)

    def holds(j: Job) -> bool:
        return j.user in held_users and (
            (j.user, types[j.id]) in startable or ("", types[j.id]) in startable
        )

    decision.hold.extend(j for j in served if holds(j))
    decision.release.extend(j.id for j in held if not holds(j))
    return decision


def _undrain_own(decision: Decision, book: Book, fit: Fit, moved: set[str]) -> None:
    """Put back into service a user's own draining VMs their queued jobs want, unless
    the user holds more than their share (why such a VM was drained)."""
    for user in sorted(book.wants):
        if book.room(user) < 0:
            continue
        for w in book.of_user(user):
            if w.state is not S.DRAINING:
                continue
            job = book.first(user, w.vm_type, lambda j, w=w: fit.takes(w, j))  # type: ignore[misc]
            if job is not None:
                book.meet(user, w.vm_type, job)
                decision.undrain.append(Undrain(w.id, Cause.DEMAND_RETURNED))
                moved.add(w.id)


def _hand_over(
    decision: Decision,
    book: Book,
    fit: Fit,
    moved: set[str],
    states: tuple[WorkerState, ...],
) -> None:
    """Give the users below their share who wait VMs of their type in ``states``, held
    by nobody or by a user above their share: the spare first, then the one whose job
    started first (it is likely to end first)."""
    over = book.over()
    givers = [
        w
        for wid, w in book.workers.items()
        if w.state in states
        and wid not in moved
        and (not book.holder[wid] or book.holder[wid] in over)
    ]
    givers.sort(key=lambda w: (_FREE_FIRST.get(w.state, 2), book.started.get(w.id, 0.0), w.id))
    while givers:
        handed = False
        for user in book.takers():
            wanted = book.wants[user]
            pick, job = None, None
            for w in givers:
                if wanted[w.vm_type] > 0 and _gives(book, w):
                    job = book.first(user, w.vm_type, lambda j, w=w: fit.takes(w, j))  # type: ignore[misc]
                    if job is not None:
                        pick = w
                        break
            if pick is None or job is None:
                continue
            givers.remove(pick)
            book.hand(pick.id, user, pick.vm_type, job)
            moved.add(pick.id)
            if pick.state is S.DRAINING:
                decision.undrain.append(Undrain(pick.id, Cause.FAIR_SHARE))
            decision.assign.append(Assign(pick.id, user, Cause.FAIR_SHARE))
            handed = True
            break  # the furthest below their share is asked again first
        if not handed:
            return


def _gives(book: Book, w: Worker) -> bool:
    """Whether ``w``'s holder can give it: nobody's, or still above their share."""
    user = book.holder[w.id]
    return not user or book.room(user) < 0


def _launch(
    decision: Decision, snapshot: SiteSnapshot, settings: PolicySettings, book: Book, fit: Fit
) -> None:
    """New VMs for the users below their share who still wait, one round of one VM
    each at a time (the furthest below first), within every cloud's cap and the spend
    cap, each for one of its user's jobs on a cloud that serves the job."""
    cen = census(snapshot)
    live = dict(cen.live_by_cloud or {})
    spend = cen.spend_per_hour
    cap = settings.spend_cap_per_hour
    usable = [c for c in snapshot.clouds if c.name not in snapshot.closed]
    planned: Counter[tuple[str, str, str]] = Counter()
    stuck: set[tuple[str, str]] = set()
    """(user, VM type) no cloud will launch for (any more) in this decision."""
    while True:
        launched = False
        for user in book.takers():
            for vm_type, n in sorted(book.wants[user].items()):
                if n <= 0 or (user, vm_type) in stuck:
                    continue
                offering = [c for c in usable if any(v.name == vm_type for v in c.vm_types)]
                cloud, job = None, None
                for c in rank_clouds(offering, settings.cloud_rule, live):
                    room = c.max_instances - live.get(c.name, 0)
                    if cap is not None and c.price_per_hour > 0:
                        room = min(room, int((cap - spend) / c.price_per_hour + 1e-9))
                    if room > 0:
                        job = book.first(user, vm_type, lambda j, c=c: fit.launches(c, j))  # type: ignore[misc]
                        if job is not None:
                            cloud = c
                            break
                if cloud is None or job is None:
                    stuck.add((user, vm_type))
                    continue
                planned[cloud.name, vm_type, user] += 1
                live[cloud.name] = live.get(cloud.name, 0) + 1
                spend += cloud.price_per_hour
                book.plan(user, vm_type, job)
                launched = True
                break  # one VM per user per round
        if not launched:
            break
    for (cloud_name, vm_type, user), n in sorted(planned.items()):
        decision.launch.append(Launch(cloud_name, vm_type, n, Cause.DEMAND, user=user))


def _rebalance(
    decision: Decision,
    book: Book,
    now: float,
    immediate: bool,
    moved: set[str],
    over: dict[str, int],
    waiting: int,
    jobs: Mapping[tuple[str, str], int],
) -> None:
    """Free room for ``waiting`` VMs wanted by users below their share on a full site:
    the VMs of the users above theirs go, beyond what is already leaving; never one
    still booting or on its first job (:meth:`Book.young`). One no job runs on any
    more, of a type none of its user's jobs (``jobs``, by user and type) waits for, is
    drained as idle, not killed; the others are terminated if ``immediate``, else
    drained."""
    leaving = sum(1 for w in book.workers.values() if w.state is S.DRAINING and w.id not in moved)
    need = waiting - leaving
    for user, excess in sorted(over.items(), key=lambda x: (-x[1], x[0])):
        if need <= 0:
            return
        mine = [w for w in book.of_user(user) if w.id not in moved]
        wanted = Counter(vm for (u, vm), n in jobs.items() if u == user and n)
        going = sum(1 for w in mine if w.state is S.DRAINING)
        victims = [w for w in mine if w.state in _JOINED and not book.young(w, now, immediate)]
        victims.sort(  # idle first, then busy ones no job runs on, then the oldest job's
            key=lambda w: (
                _FREE_FIRST.get(w.state, 2),
                w.id in book.started,
                book.started.get(w.id, 0.0),
                w.id,
            )
        )
        for w in victims[: max(0, min(excess - going, need))]:
            # Busy, yet no job runs there any more (it ended since the worker was seen)
            # and none of its user's waits for it: nothing is taken from them.
            done = w.state is S.BUSY and w.id not in book.started and not wanted[w.vm_type]
            cause = Cause.IDLE if done else Cause.FAIR_SHARE
            if immediate and cause is Cause.FAIR_SHARE:
                decision.terminate.append(Terminate(w.id, cause))
            else:
                decision.drain.append(Drain(w.id, cause))
            moved.add(w.id)
            need -= 1


def _release_idle(
    decision: Decision, book: Book, moved: set[str], jobs: dict[tuple[str, str], int]
) -> int:
    """Drain idle workers no queued or held job of their holder's will take (a VM of
    nobody's: no one's job of its type); they are given back when drained, which
    makes room as a re-balance would. Returns how many."""
    before = len(decision.drain)
    anyone: Counter[str] = Counter()
    for (_, vm_type), n in jobs.items():
        anyone[vm_type] += n
    for wid, w in sorted(book.workers.items(), key=lambda x: (x[1].requested_at, x[0])):
        if w.state is not S.IDLE or wid in moved:
            continue
        user = book.holder[wid]
        key = (user, w.vm_type)
        if user and jobs.get(key, 0) > 0:
            jobs[key] -= 1
            continue
        if not user and anyone[w.vm_type] > 0:
            anyone[w.vm_type] -= 1
            continue
        decision.drain.append(Drain(wid, Cause.IDLE))
        moved.add(wid)
    return len(decision.drain) - before


class CloudSchedulerOptions(PluginOptions):
    """How a user's VMs over their share go, in ``[policy]``: ``graceful`` retires each
    after its current job, ``immediate`` terminates them now."""

    rebalance: Literal["graceful", "immediate"] = "graceful"


register("cloud_scheduler", options=CloudSchedulerOptions, typed_nodes=True, owners=True)(decide)
