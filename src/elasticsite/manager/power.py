"""Slurm's power saving: what ``ResumeProgram``/``SuspendProgram`` asked since the last
step, carried out by the manager within its caps and spend limit.

``elasticsite slurm resume|suspend`` queue one request per node in the state store;
each step takes them (a node's later request overriding its earlier one), asks
:func:`~elasticsite.policies.power_save.decide_power` which it may serve, and applies
that decision through the core like any other.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from elasticsite import core
from elasticsite.model import WorkerState
from elasticsite.policies.power_save import decide_power
from elasticsite.snapshot import SiteSnapshot

if TYPE_CHECKING:
    from elasticsite.core import Plan
    from elasticsite.manager.loop import Manager
    from elasticsite.manager.report import StepReport

__all__ = ["power_requests"]

log = logging.getLogger("elasticsite.manager.loop")
_FINAL = WorkerState.FINAL_STATES


def power_requests(manager: Manager, now: float, plan: Plan, report: StepReport) -> None:
    """Carry out what Slurm's ResumeProgram/SuspendProgram asked since the last step."""
    m = manager
    last: dict[str, str] = {}
    for action, node, _at in m.store.take_power_requests():
        last.pop(node, None)
        last[node] = action  # a node's later request overrides its earlier one
    if not last:
        return
    resume = [n for n, a in last.items() if a == "resume"]
    suspend = [n for n, a in last.items() if a == "suspend"]
    workers = [r.worker for r in m.records.values() if r.worker.state not in _FINAL]
    snapshot = SiteSnapshot(now, [], [], workers, m.specs)
    if m.settings.budget is not None:
        spent = m.spending.spent(now, (r.worker for r in m.records.values()))
        snapshot.spent_in_period = spent.period_total
    planned = decide_power(snapshot, m.settings, resume, suspend)
    if planned.refused:
        msg = f"power saving: no cloud may take {', '.join(planned.refused)} now"
        log.warning("%s (caps, spend limit or budget); Slurm's resume timeout will apply", msg)
        report.errors.append(msg)
        m._bump("power_refused", len(planned.refused))
    log.info("power saving: resume %s, suspend %s", resume or "-", suspend or "-")
    decision = planned.decision
    core.apply(m.state, plan, m.core_config, now, decision, m._new_ids(core.launches(decision)))
    report.decision = decision
