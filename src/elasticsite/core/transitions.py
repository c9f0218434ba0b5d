"""Moving a worker and recording the move in the plan: the core's one way to change state."""

from __future__ import annotations

from elasticsite.core.plan import Plan, WorkerRecord
from elasticsite.model import Cause, Transition, WorkerState

__all__ = ["move", "move_new"]


def move(plan: Plan, rec: WorkerRecord, to: WorkerState, at: float, cause: Cause | str) -> None:
    """Move ``rec``'s worker to ``to`` (the state machine checks the move) and record it."""
    plan.transitions.append(rec.worker.transition(to, at, cause))
    plan.dirty.add(rec.worker.id)


def move_new(plan: Plan, rec: WorkerRecord, at: float, cause: Cause | str) -> None:
    """Record a new worker's first state, ``requested``."""
    w = rec.worker
    t = Transition(w.id, None, WorkerState.REQUESTED, at, cause)
    w.history.append(t)
    plan.transitions.append(t)
    plan.new.append(rec)
    plan.dirty.add(w.id)
