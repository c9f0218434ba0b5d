"""Pure job-scheduling passes (FCFS and EASY backfilling) over single-node jobs.

One pass answers "which queued jobs start now, and where?" from plain data: the
queue in priority order, the schedulable nodes with their free cores, the running
jobs with their expected end times, and ``now``. No I/O and no clock reads, so the
embedded batch system (:mod:`elasticsite.batch.local`) and the simulator share it.

**Single-node assumption.** A job needs ``cores`` cores on *one* node; jobs never
span nodes. Reservations are therefore per node: the head job of EASY reserves
the cores of the one node where it can start earliest.

Conventions shared by every function here:

* ``queued``: jobs in priority order, any objects with ``.id``, ``.cores`` and
  ``.walltime`` (a :class:`~elasticsite.model.Job` does).
* ``nodes``: ``(name, free_cores)`` pairs of the nodes that may take new jobs (up,
  not drained), in preference order; ties in node choice go to the earlier node.
* ``running``: ``(node_name, cores, expected_end)`` triples, ``expected_end`` being
  ``started_at + walltime``. A job past its walltime is taken to end ``now``; a
  running job on a node absent from ``nodes`` is ignored.
* Node choice is *best fit*: the node with the fewest free cores that still fits,
  which keeps large holes for large jobs.

A node may have an *owner*, a user whose jobs alone it runs (Cloud Scheduler mode's
fair share: the VM was booted for that user's share): :func:`schedule_owned`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

__all__ = ["POLICIES", "SchedJob", "easy", "fcfs", "reservation", "schedule", "schedule_owned"]


class SchedJob(Protocol):
    """What the scheduler reads of a queued job."""

    @property
    def id(self) -> str: ...

    @property
    def cores(self) -> int: ...

    @property
    def walltime(self) -> float: ...


Nodes = Sequence[tuple[str, int]]
Running = Sequence[tuple[str, int, float]]
Assignments = list[tuple[str, str]]

_INF = math.inf


def _best_fit(free: list[int], cores: int) -> int:
    """Index of the node with the fewest free cores that still holds ``cores``, or -1."""
    best = -1
    best_free = 1 << 62
    for i, f in enumerate(free):
        if cores <= f < best_free:
            best = i
            best_free = f
    return best


def fcfs(now: float, queued: Sequence[SchedJob], nodes: Nodes, running: Running) -> Assignments:
    """First come, first served: start jobs in queue order until one does not fit, then stop.

    The job that does not fit blocks everything behind it, even a job that could
    run now (that is what EASY fixes). ``now`` and ``running`` do not matter to FCFS;
    they are accepted so every policy has the same signature.
    """
    names = [n for n, _ in nodes]
    free = [f for _, f in nodes]
    out: Assignments = []
    for job in queued:
        i = _best_fit(free, job.cores)
        if i < 0:
            break
        free[i] -= job.cores
        out.append((job.id, names[i]))
    return out


def _node_reservation(
    cores: int, now: float, free: int, releases: list[tuple[float, int]]
) -> tuple[float, int]:
    """Earliest time ``cores`` are free on one node, and the cores left over at that time.

    ``releases`` are ``(end, cores)`` of the jobs running there, sorted by end.
    Returns ``(inf, 0)`` if the node can never hold the job.
    """
    if free >= cores:
        return now, free - cores
    avail = free
    n = len(releases)
    k = 0
    while k < n:
        t = releases[k][0]
        while k < n and releases[k][0] == t:  # every job ending at t frees its cores at t
            avail += releases[k][1]
            k += 1
        if avail >= cores:
            return max(t, now), avail - cores
    return _INF, 0


def _releases(
    index: dict[str, int], count: int, now: float, running: Running
) -> list[list[tuple[float, int]]]:
    """Per node (by index), the ``(end, cores)`` of its running jobs; an overdue end is ``now``."""
    per_node: list[list[tuple[float, int]]] = [[] for _ in range(count)]
    for node, cores, end in running:
        i = index.get(node)
        if i is not None:
            per_node[i].append((end if end > now else now, cores))
    return per_node


def _earliest(
    cores: int, now: float, free: list[int], releases: list[list[tuple[float, int]]]
) -> tuple[float, int, int]:
    """``(start, node_index, extra_cores)`` of the earliest reservation; node -1 if none."""
    best_t, best_i, best_extra = _INF, -1, 0
    for i, f in enumerate(free):
        rel = releases[i]
        rel.sort()
        t, extra = _node_reservation(cores, now, f, rel)
        if t < best_t:
            best_t, best_i, best_extra = t, i, extra
    return best_t, best_i, best_extra


def reservation(cores: int, now: float, nodes: Nodes, running: Running) -> tuple[float, str | None]:
    """When and where a ``cores``-core job could start at the earliest, if nothing else starts.

    Returns ``(inf, None)`` when no node is big enough. Used by EASY for the head
    job, and by tests and the simulator to check that backfilling delays nobody.
    """
    names = [n for n, _ in nodes]
    free = [f for _, f in nodes]
    index = {n: i for i, n in enumerate(names)}
    t, i, _ = _earliest(cores, now, free, _releases(index, len(names), now, running))
    return t, (names[i] if i >= 0 else None)


def easy(now: float, queued: Sequence[SchedJob], nodes: Nodes, running: Running) -> Assignments:
    """Aggressive (EASY) backfilling.

    Jobs start in queue order while they fit. The first job that does not fit (the
    head) gets a reservation: the earliest time enough cores free up on one node
    (the *shadow time*), counting the jobs started in this pass. A later job may
    then start now, ahead of the head, if it fits now and cannot delay that
    reservation: it runs on another node, or it finishes (``now + walltime``) by the
    shadow time, or it only uses cores the reservation node has to spare at the
    shadow time. A job too big for every node can never get a reservation, so it is
    skipped rather than allowed to block the queue (new, bigger nodes may arrive).
    """
    names = [n for n, _ in nodes]
    free = [f for _, f in nodes]
    index = {n: i for i, n in enumerate(names)}
    releases = _releases(index, len(names), now, running)
    capacity = [f + sum(c for _, c in rel) for f, rel in zip(free, releases, strict=True)]
    biggest = max(capacity, default=0)
    out: Assignments = []
    total = len(queued)
    pos = 0
    head: SchedJob | None = None
    while pos < total:  # the in-order prefix: exactly what FCFS starts, skipping impossible jobs
        job = queued[pos]
        pos += 1
        i = _best_fit(free, job.cores)
        if i >= 0:
            free[i] -= job.cores
            releases[i].append((now + job.walltime, job.cores))
            out.append((job.id, names[i]))
        elif job.cores <= biggest:
            head = job
            break
    if head is None:
        return out
    shadow, res_node, extra = _earliest(head.cores, now, free, releases)
    spare = sum(free)
    while pos < total and spare > 0:
        job = queued[pos]
        pos += 1
        cores = job.cores
        if cores > spare:
            continue
        fits_before_shadow = now + job.walltime <= shadow
        best = -1
        best_free = 1 << 62
        for i, f in enumerate(free):
            if cores <= f < best_free and (i != res_node or fits_before_shadow or cores <= extra):
                best = i
                best_free = f
        if best < 0:
            continue
        free[best] -= cores
        spare -= cores
        if best == res_node and not fits_before_shadow:
            extra -= cores
        out.append((job.id, names[best]))
    return out


POLICIES: dict[str, Callable[[float, Sequence[SchedJob], Nodes, Running], Assignments]] = {
    "fcfs": fcfs,
    "easy": easy,
}
"""Scheduling policies by name."""


def schedule(
    policy: str, now: float, queued: Sequence[SchedJob], nodes: Nodes, running: Running
) -> Assignments:
    """Run one pass of the named policy; returns ``(job_id, node_name)`` for each job to start."""
    try:
        func = POLICIES[policy]
    except KeyError:
        raise ValueError(
            f"unknown scheduling policy {policy!r}; valid policies: {', '.join(sorted(POLICIES))}"
        ) from None
    return func(now, queued, nodes, running)


def schedule_owned(
    policy: str,
    now: float,
    queued: Sequence[SchedJob],
    nodes: Sequence[tuple[str, int, str]],
    running: Running,
    users: Mapping[str, str],
) -> Assignments:
    """One pass of ``policy`` where some nodes run only their owner's jobs.

    ``nodes`` are ``(name, free_cores, owner)``, ``owner`` ``""`` for a node anyone's
    jobs may use; ``users`` gives each queued job's user by job id. Each owner's jobs
    are placed first on that owner's nodes (a pass of their own, in queue order), then
    the jobs still waiting, everyone's, on the nodes nobody owns.
    """
    owner_of = {name: owner for name, _, owner in nodes}
    owners = sorted({owner for owner in owner_of.values() if owner})
    if not owners:
        return schedule(policy, now, queued, [(n, f) for n, f, _ in nodes], running)
    started: Assignments = []
    for owner in owners:
        theirs = [j for j in queued if users.get(j.id, "") == owner]
        if theirs:
            pool = [(n, f) for n, f, o in nodes if o == owner]
            started += schedule(policy, now, theirs, pool, running)
    shared = [(n, f) for n, f, o in nodes if not o]
    if shared:
        placed = {job_id for job_id, _ in started}
        rest = [j for j in queued if j.id not in placed]
        started += schedule(policy, now, rest, shared, running)
    return started
