"""Decisions when the batch system's power saving drives the site (Slurm native mode).

Under Slurm's power saving, slurmctld decides *when*: it asks for nodes by name
(``ResumeProgram``) when jobs need them and gives them back (``SuspendProgram``)
after they idle for ``SuspendTime``; a node that misses ``ResumeTimeout`` goes to
``ResumeFailProgram``. What stays with elasticsite is *where and whether*: which cloud
each node is started on (``cloud_rule``), the per-cloud ``max_instances`` and the
site-wide spend cap, the budget, and the launch retries. A request beyond those limits
is refused; Slurm then sees the node miss its resume timeout and handles the jobs as
usual.

Like every policy this is a pure function of a snapshot (plus the requests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from elasticsite.model import Cause, Decision, Launch, Terminate, WorkerState
from elasticsite.policies.base import PolicySettings
from elasticsite.policies.budget import within_budget
from elasticsite.policies.planning import scale_up
from elasticsite.snapshot import SiteSnapshot

__all__ = ["PowerDecision", "decide_power"]


@dataclass(slots=True)
class PowerDecision:
    """What to do about a batch of power requests, and which resumes were refused."""

    decision: Decision = field(default_factory=Decision)
    refused: list[str] = field(default_factory=list)
    """Nodes asked for that no cloud may take now (caps, spend cap or budget)."""


def decide_power(
    snapshot: SiteSnapshot,
    settings: PolicySettings,
    resume: Sequence[str],
    suspend: Sequence[str],
) -> PowerDecision:
    """Launch a worker for each node to resume, take down the worker of each to suspend.

    ``resume`` and ``suspend`` name distinct nodes (the manager keeps each node's last
    request). A node asked for while a live worker still backs it is left alone:
    slurmctld repeats requests after its own restart, and a worker still shutting down
    holds its node name until its instance is gone.
    """
    out = PowerDecision()
    live = {w.node or w.id: w for w in snapshot.workers if w.state.live}
    for node in dict.fromkeys(suspend):
        w = live.get(node)
        if w is not None and w.state is not WorkerState.TERMINATING:
            out.decision.terminate.append(Terminate(w.id, Cause.POWER_DOWN))
    wanted = [n for n in dict.fromkeys(resume) if n not in live]
    if not wanted:
        return out
    # Draining workers are not reused here: Slurm names the node it wants.
    others = [w for w in snapshot.workers if w.state is not WorkerState.DRAINING]
    plan = scale_up(snapshot.with_workers(others), settings, len(wanted), Cause.POWER_UP)
    names = iter(wanted)
    for launch in plan.launch:
        nodes = tuple(next(names) for _ in range(launch.count))
        out.decision.launch.append(
            Launch(launch.cloud, launch.vm_type, launch.count, Cause.POWER_UP, nodes)
        )
    out.refused = list(names)
    within_budget(snapshot, settings, out.decision)
    out.refused.extend(n for r in out.decision.refused for n in r.launch.nodes)
    return out
