"""Moving a worker and recording the move in the plan: the core's one way to change state.

Each phase of a step (settling outcomes, reconciling, carrying out a decision) ends with
:func:`track`: the moves it made, and only those, go to the clouds' health
(:mod:`.health`) and the boot and shutdown estimates (:mod:`.estimates`).
"""

from __future__ import annotations

from elasticsite.core import estimates, health
from elasticsite.core.plan import CoreConfig, CoreState, Plan, WorkerRecord
from elasticsite.model import Cause, Transition, WorkerState

__all__ = ["move", "move_new", "track"]


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


def track(state: CoreState, plan: Plan, config: CoreConfig, now: float, since: int) -> None:
    """Take the moves a phase just made (the plan's transitions from index ``since``)
    into the clouds' health and the boot and shutdown estimates."""
    new = plan.transitions[since:]
    if new:
        health.track(state, plan, config, now, new)
        estimates.track(state, config, new)
