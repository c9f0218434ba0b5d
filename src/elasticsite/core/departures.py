"""Departures: the nodes the broker must be told have left, from leaving to recorded.

A worker whose instance is gone and whose node is forgotten leaves the site
(:func:`leave`): its node becomes a pending departure in
:attr:`~.plan.CoreState.departures` and a :class:`~.plan.ForgetNode` command tells the
broker. The command's outcome settles it (:func:`settle`): done once the broker has
recorded it (or when the driver has no broker, whose runner then has nothing to tell);
kept, with one warning per failure, when the broker could not take it. At every step
the departures still pending and not in flight are sent again (:func:`resend`).

Pending departures are part of the core's state: the driver persists them whenever
:attr:`~.plan.Plan.departures_changed` says so (the manager in its state store) and
hands them back when it starts again, so a restarted driver sends them again.
Deterministic; no clock, no I/O.
"""

from __future__ import annotations

from elasticsite.core.plan import CoreState, ForgetNode, Outcome, Plan, Problem

__all__ = ["leave", "resend", "settle"]


def leave(state: CoreState, plan: Plan, node: str, worker_id: str) -> None:
    """``node`` (worker ``worker_id``'s) left the site: tell the broker, until it has it."""
    if node not in state.departures:
        state.departures[node] = worker_id
        plan.departures_changed = True
    plan.run(ForgetNode(node, worker_id), state)


def settle(state: CoreState, plan: Plan, command: ForgetNode, out: Outcome) -> None:
    """Take a departure's outcome: recorded, or kept to send again at the next step."""
    if out.error is None:
        if state.departures.pop(command.node, None) is not None:
            plan.departures_changed = True
        return
    plan.errors.append(
        Problem(
            f"broker: removing {command.node} failed (will retry): {out.error}",
            node=command.node,
            worker=command.worker_id,
        )
    )


def resend(state: CoreState, plan: Plan) -> None:
    """Send again every pending departure not in flight (one at a time each)."""
    for node, worker_id in state.departures.items():
        plan.run(ForgetNode(node, worker_id), state)
