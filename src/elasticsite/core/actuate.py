"""From a decision to worker moves and commands: the second half of a step.

:func:`apply` carries out a :class:`~elasticsite.model.Decision` the way both the live
manager and the simulator do: redirections become batch commands; terminations
move workers at once (to ``terminating``,
or ``failed`` for a stall, a loss or a launch error) and ask the cloud to give the
instance back; drains and undrains become batch commands, and the worker moves when
the batch system has done it (:mod:`.observe` settles the outcome); launches create
``requested`` records under the ids the driver allocated and launch them once the
driver has persisted them. :func:`shutdown_decision` is what a stopping site decides.
Deterministic; no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from elasticsite.core import health
from elasticsite.core.plan import (
    AddAndLaunch,
    CoreConfig,
    CoreState,
    DrainNode,
    HoldJob,
    OwnNode,
    Plan,
    RedirectJob,
    ReleaseJob,
    TerminateInstance,
    UndrainNode,
    WorkerRecord,
)
from elasticsite.core.transitions import move, move_new, track
from elasticsite.model import Cause, Decision, Drain, Terminate, Worker, WorkerState
from elasticsite.snapshot import SiteSnapshot

__all__ = ["apply", "shutdown_decision"]

S = WorkerState
_FAIL_CAUSES = (Cause.STALLED, Cause.LOST, Cause.LAUNCH_ERROR)
_DRAINABLE = (S.IDLE, S.BUSY, S.BOOTING)
_UNDECLARED = (S.REQUESTED,)
"""Workers whose node may not be declared yet: their launch carries the new owner, or
the node is given it when it joins (:mod:`.observe`)."""


def apply(
    state: CoreState,
    plan: Plan,
    config: CoreConfig,
    now: float,
    decision: Decision,
    ids: Mapping[str, Sequence[str]],
) -> None:
    """Carry out ``decision``; ``ids`` holds, per cloud, one fresh worker id for every
    worker the decision launches there (in order)."""
    records = state.records
    since = len(plan.transitions)
    for t in decision.terminate:
        rec = records.get(t.worker_id)
        if rec is None or not rec.worker.state.live:
            continue
        w = rec.worker
        if w.state is S.TERMINATING and t.cause not in _FAIL_CAUSES:
            continue
        move(plan, rec, S.FAILED if t.cause in _FAIL_CAUSES else S.TERMINATING, now, t.cause)
        rec.attempts = 0
        rec.next_attempt_at = 0.0
        if w.instance_id and not state.running(AddAndLaunch, w.id):
            plan.run(TerminateInstance(w.id, w.cloud, w.instance_id), state)
    for d in decision.drain:
        rec = records.get(d.worker_id)
        if rec is not None and rec.worker.state in _DRAINABLE:
            w = rec.worker
            plan.run(DrainNode(w.id, w.node or w.id, str(d.cause)), state)
    for u in decision.undrain:
        rec = records.get(u.worker_id)
        if rec is not None and rec.worker.state is S.DRAINING:
            w = rec.worker
            plan.run(UndrainNode(w.id, w.node or w.id), state)
    for a in decision.assign:
        rec = records.get(a.worker_id)
        if rec is None or not rec.worker.state.live or rec.worker.state is S.TERMINATING:
            continue
        w = rec.worker
        if w.owner != a.user:
            w.owner = a.user
            plan.dirty.add(w.id)
            plan.count("workers_reassigned")
            if w.state not in _UNDECLARED:  # else the node takes it when it joins
                plan.run(OwnNode(w.id, w.node or w.id, a.user), state)
    for r in decision.redirect:
        plan.run(RedirectJob(r.job_id, r.target), state)
        plan.count("redirected")
    for job in decision.hold:
        if job.id not in state.held:
            plan.run(HoldJob(job), state)
    for job_id in decision.release:
        if job_id in state.held:
            plan.run(ReleaseJob(job_id), state)
    specs = {c.name: c for c in config.clouds}
    handed: dict[str, int] = {}
    # Before the launches: a stall or loss terminated just now may close its cloud.
    # (Launches then only add new workers' first moves, which neither health nor the
    # boot and shutdown estimates count.)
    track(state, plan, config, now, since)
    shut = health.closed(state, now, config.clouds)
    types = health.closed_types(state, now)
    for launch in decision.launch:
        if launch.cloud in shut or launch.vm_type in types.get(launch.cloud, ()):
            # whatever the policy thought: nothing launches there
            handed[launch.cloud] = handed.get(launch.cloud, 0) + launch.count
            plan.count("launches_on_closed_cloud", launch.count)
            continue
        spec = specs[launch.cloud]
        vm = next((v for v in spec.vm_types if v.name == launch.vm_type), spec.default_vm)
        given = ids.get(launch.cloud, ())
        start = handed.get(launch.cloud, 0)
        if len(given) < start + launch.count:
            raise ValueError(
                f"{launch.count} launches on {launch.cloud} but only "
                f"{len(given) - start} worker ids were given"
            )
        handed[launch.cloud] = start + launch.count
        for i, wid in enumerate(given[start : start + launch.count]):
            w = Worker(wid, launch.cloud, vm.name, vm.cores, requested_at=now, owner=launch.user)
            if i < len(launch.nodes):
                w.node = launch.nodes[i]
            rec = WorkerRecord(w, urgency=launch.urgency)
            records[wid] = rec
            state.known.add(wid)
            move_new(plan, rec, now, launch.cause)
            node = w.node or wid
            plan.run(
                AddAndLaunch(
                    wid,
                    w.cloud,
                    w.vm_type,
                    node,
                    w.cores,
                    not config.power_save,
                    w.vm_type if config.typed_nodes else "",
                    launch.urgency,
                    w.owner,
                ),
                state,
            )
            plan.count("launched")


def launches(decision: Decision) -> dict[str, int]:
    """How many workers ``decision`` launches per cloud: the ids a driver allocates."""
    wanted: dict[str, int] = {}
    for launch in decision.launch:
        wanted[launch.cloud] = wanted.get(launch.cloud, 0) + launch.count
    return wanted


def shutdown_decision(snapshot: SiteSnapshot, *, immediate: bool = False) -> Decision:
    """What a site stopping with ``on_shutdown = "drain"`` does: pending workers go at
    once, joined ones drain, drained ones are terminated. ``immediate`` (``elasticsite
    down --now``) terminates every worker at once; the batch system requeues its jobs."""
    d = Decision()
    for w in snapshot.workers:
        if w.state.pending or (immediate and w.state.live and w.state is not S.TERMINATING):
            d.terminate.append(Terminate(w.id, Cause.SHUTDOWN))
        elif w.state in (S.IDLE, S.BUSY):
            d.drain.append(Drain(w.id, Cause.SHUTDOWN))
        elif w.state is S.DRAINING and w.running_jobs == 0:
            d.terminate.append(Terminate(w.id, Cause.DRAINED))
    return d
