"""Slurm's power saving as a source of decisions: what ``ResumeProgram``/``SuspendProgram``
asked since the last step, as a decision within the caps and spend limit.

``elasticsite slurm resume|suspend`` queue one request per node in the state store;
each step the manager takes them and hands them to :func:`power_decision` with the
site's workers, clouds, settings and what it spent in the budget's period. That keeps
each node's last request, asks :func:`~elasticsite.policies.power_save.decide_power`
which it may serve, and says what to do and what to tell: the manager applies the
decision through the core like any other, counts the refusals and logs the lines.
Pure: nothing here reads the store or the clock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from elasticsite.model import CloudSpec, Decision, Worker, WorkerState
from elasticsite.policies.base import PolicySettings
from elasticsite.policies.power_save import decide_power
from elasticsite.snapshot import SiteSnapshot

__all__ = ["PowerOrders", "power_decision"]

_FINAL = WorkerState.FINAL_STATES


@dataclass(slots=True)
class PowerOrders:
    """What to do about a batch of power requests, and what to tell about it."""

    decision: Decision = field(default_factory=Decision)
    refused: list[str] = field(default_factory=list)
    """Nodes asked for that no cloud may take now (caps, spend limit or budget)."""
    problems: list[str] = field(default_factory=list)
    """Lines for the step's report (its errors)."""
    log: list[tuple[int, str]] = field(default_factory=list)
    """Lines for the manager's log, each with its level."""


def power_decision(
    requests: Iterable[tuple[str, str, float]],
    workers: Iterable[Worker],
    specs: Sequence[CloudSpec],
    settings: PolicySettings,
    spent_in_period: float | None,
    now: float,
) -> PowerOrders:
    """What to do about ``requests`` (``(action, node, at)``, oldest first, as the store
    hands them), given the site's ``workers`` (finished ones are left out), its clouds,
    its settings and, under a budget, what it spent in the budget's period."""
    last: dict[str, str] = {}
    for action, node, _at in requests:
        last.pop(node, None)
        last[node] = action  # a node's later request overrides its earlier one
    if not last:
        return PowerOrders()
    resume = [n for n, a in last.items() if a == "resume"]
    suspend = [n for n, a in last.items() if a == "suspend"]
    live = [w for w in workers if w.state not in _FINAL]
    snapshot = SiteSnapshot(now, [], [], live, specs)
    if spent_in_period is not None:
        snapshot.spent_in_period = spent_in_period
    planned = decide_power(snapshot, settings, resume, suspend)
    out = PowerOrders(planned.decision, planned.refused)
    if planned.refused:
        msg = f"power saving: no cloud may take {', '.join(planned.refused)} now"
        why = "(caps, spend limit or budget); Slurm's resume timeout will apply"
        out.log.append((logging.WARNING, f"{msg} {why}"))
        out.problems.append(msg)
    out.log.append(
        (logging.INFO, f"power saving: resume {resume or '-'}, suspend {suspend or '-'}")
    )
    return out
