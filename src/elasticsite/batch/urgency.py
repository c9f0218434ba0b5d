"""Elevated priority on a batch resource: what an authenticated urgent job is given.

A resource maps each urgency to one of these policies (least disruptive first):

* ``priority``: the job's priority is raised above every normal job's; it still waits
  for nodes to free up;
* ``next_to_run``: the job goes to the head of the queue: it starts on the first nodes
  that free up;
* ``preemption``: the job goes to the head of the queue and running jobs are put back
  in the queue (requeued, to run again later) until a node has room for it, so it
  starts at the scheduler's next pass.

Preemption picks its victims on one node the urgent job may run on (none owned by
another user): the node that needs the fewest jobs stopped, and on it jobs whose
owners volunteered (attribute ``volunteer=yes``) before others, then the most
recently started (the least work lost). Jobs whose owners did not allow
requeueing (``requeue=no``) are never stopped. It works through the batch contract
(``set_priority``, ``move_to_front``, ``preempt``), so the embedded batch system, Slurm,
PBS and HTCondor all serve it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from elasticsite.batch.base import BatchSystem, Node, NodeState
from elasticsite.model import Job

__all__ = ["BATCH_POLICIES", "URGENT_PRIORITY", "Elevated", "choose_victims", "elevate"]

BatchPolicy = Literal["priority", "next_to_run", "preemption"]
BATCH_POLICIES: tuple[str, ...] = ("priority", "next_to_run", "preemption")
URGENT_PRIORITY = 1_000_000
"""The priority an urgent job gets: above any a normal job is given."""


@dataclass(slots=True)
class Elevated:
    """What was done for an urgent job: its policy, and the jobs it stopped."""

    job_id: str
    policy: str
    preempted: list[Job] = field(default_factory=list)
    note: str = ""


def _stoppable(job: Job) -> bool:
    return job.attributes.get("requeue", "yes").lower() not in ("no", "false", "0")


def choose_victims(
    cores: int, nodes: Sequence[Node], running: Sequence[Job], user: str = ""
) -> list[Job]:
    """The fewest running jobs to stop, on one node, so that it has ``cores`` free for a
    job of ``user``: a node that runs only another user's jobs is no use to it."""
    by_node: dict[str, list[Job]] = {}
    for job in running:
        if job.node:
            by_node.setdefault(job.node, []).append(job)
    best: list[Job] | None = None
    for node in nodes:
        if node.cores < cores or node.state not in (NodeState.IDLE, NodeState.BUSY):
            continue
        if node.owner and node.owner != user:
            continue
        free = node.free_cores
        if free >= cores:
            return []  # room already: nothing to stop
        order = sorted(
            (j for j in by_node.get(node.name, []) if _stoppable(j)),
            key=lambda j: (j.attributes.get("volunteer", "") != "yes", -(j.started_at or 0.0)),
        )
        chosen: list[Job] = []
        for job in order:
            if free >= cores:
                break
            chosen.append(job)
            free += job.cores
        if free >= cores and (best is None or len(chosen) < len(best)):
            best = chosen
    return best or []


def elevate(batch: BatchSystem, job_id: str, cores: int, policy: str) -> Elevated:
    """Give the queued job ``job_id`` the elevated priority ``policy`` names."""
    if policy not in BATCH_POLICIES:
        raise ValueError(f"policy {policy!r}: choose {', '.join(BATCH_POLICIES)}")
    batch.set_priority(job_id, URGENT_PRIORITY)
    done = Elevated(job_id, policy)
    if policy == "priority":
        return done
    batch.move_to_front(job_id)
    if policy == "next_to_run":
        return done
    view = batch.snapshot()
    urgent = next((j for j in view.queued if j.id == job_id), None)
    if urgent is None:
        done.note = "it started at once"
        return done
    victims = choose_victims(cores, view.nodes, view.running, urgent.user)
    if not victims:
        done.note = "no node can be freed for it: it runs next"
    for job in victims:
        batch.preempt(job.id)
        done.preempted.append(job)
    return done
