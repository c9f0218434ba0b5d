"""From what the clouds and the batch system report to the workers' states.

:func:`observe` is the first half of a step, shared by the live manager and the
simulator: it settles the outcomes of the commands that finished since the last step,
then follows every worker from what its instance and its node say (launch retries,
joins, losses, idle/busy, terminations confirmed; a worker gone for good leaves the
broker's context, :mod:`.departures`), adopts tagged instances no record knows of,
and terminates strays. It returns the snapshot the policy decides
on. Deterministic; no clock, no I/O: the driver passes ``now`` and what it sensed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from elasticsite.batch.base import Node, NodeState
from elasticsite.clouds.base import Instance
from elasticsite.clouds.base import InstanceState as IS
from elasticsite.core import departures, estimates, health
from elasticsite.core.adopt import adopt
from elasticsite.core.plan import (
    AddAndLaunch,
    CoreConfig,
    CoreState,
    DrainNode,
    ForgetNode,
    HoldJob,
    Outcome,
    OwnNode,
    Plan,
    Problem,
    RedirectJob,
    ReleaseJob,
    RemoveNode,
    TerminateInstance,
    UndrainNode,
    WorkerRecord,
    command_key,
)
from elasticsite.core.transitions import move, track
from elasticsite.model import Cause, Job, Worker, WorkerState
from elasticsite.snapshot import SiteSnapshot

__all__ = ["observe", "settle"]

S = WorkerState
_UP = (NodeState.IDLE, NodeState.BUSY, NodeState.DRAINING, NodeState.DRAINED)
_DRAINING = (NodeState.DRAINING, NodeState.DRAINED)
_FINAL = S.FINAL_STATES
_STEADY = {S.IDLE: NodeState.IDLE, S.BUSY: NodeState.BUSY, S.DRAINING: NodeState.DRAINING}
"""Worker state -> the node state that means "nothing changed"."""


def observe(
    state: CoreState,
    plan: Plan,
    config: CoreConfig,
    now: float,
    outcomes: Iterable[Outcome],
    nodes: Mapping[str, Node],
    instances: Mapping[str, Mapping[str, Instance]],
    queued: Sequence[Job] = (),
    running: Sequence[Job] = (),
    listed: Mapping[str, float] | None = None,
) -> SiteSnapshot:
    """Settle ``outcomes``, then reconcile every worker with ``nodes`` (by node name)
    and ``instances`` (per cloud, by worker id; a cloud missing from it could not be
    asked this time). ``listed``: when a cloud's listing was asked for, if before
    ``now`` (a slow cloud's): what it lacks is judged as of then. Returns the snapshot
    a policy decides on."""
    settle(state, plan, config, now, outcomes)
    since = len(plan.transitions)
    _reconcile(state, plan, config, now, nodes, instances, listed or {})
    adopt(state, plan, config, now, instances)
    workers: list[Worker] = []
    held: set[str | None] = set()  # the nodes workers hold: the rest are the site's
    for rec in state.records.values():
        w = rec.worker
        held.add(w.node)
        if w.state not in _FINAL:
            workers.append(w)
    site_cores = 0
    if not held.issuperset(nodes):  # one pass in C: most sites' nodes are all workers'
        site_cores = sum(
            n.cores
            for name, n in nodes.items()
            if name not in held and n.state in (NodeState.IDLE, NodeState.BUSY)
        )
    track(state, plan, config, now, since)
    clouds, shut = health.open_clouds(state, now, estimates.apply(state, config.clouds))
    snapshot = SiteSnapshot(now, queued, running, workers, clouds, site_cores)
    snapshot.closed = shut
    if state.held:
        snapshot.held = list(state.held.values())
    return snapshot


# --- outcomes -----------------------------------------------------------------------


def settle(
    state: CoreState, plan: Plan, config: CoreConfig, now: float, outcomes: Iterable[Outcome]
) -> None:
    """Take the outcomes of finished commands into the records (and nothing else: for
    a step that could not sense, or a driver stopping)."""
    since = len(plan.transitions)
    for outcome in outcomes:
        _settle(state, plan, config, now, outcome)
    for (kind, _), more in plan.alike.items():
        if more:
            plan.errors.append(Problem(f"{kind} of {more} more workers failed the same way"))
    plan.alike.clear()
    track(state, plan, config, now, since)


def _settle(state: CoreState, plan: Plan, config: CoreConfig, now: float, out: Outcome) -> None:
    command = out.command
    state.inflight.discard(command_key(command))
    if isinstance(command, TerminateInstance) and not command.worker_id:
        # Asked again if it still shows after a while (the cloud may be slow to say).
        state.strays[command.instance_id] = now + config.grace
        if out.error is not None:
            plan.count("terminate_errors")
            plan.errors.append(
                Problem(
                    f"terminate stray {command.instance_id} failed: {out.error}",
                    cloud=command.cloud,
                    instance=command.instance_id,
                )
            )
            state.strays[command.instance_id] = now + config.backoff(1)
        return
    if isinstance(command, ForgetNode):
        departures.settle(state, plan, command, out)
        return
    if isinstance(command, RedirectJob):
        if out.error is not None:  # the job may have started or gone meanwhile
            plan.count("redirect_errors")
            plan.errors.append(
                Problem(f"redirect job {command.job_id} failed: {out.error}", job=command.job_id)
            )
        return
    if isinstance(command, HoldJob | ReleaseJob):
        _settle_hold(state, plan, command, out)
        return
    rec = state.records.get(command.worker_id)
    if rec is None:
        return
    w = rec.worker
    at = min(now, max(w.state_since, out.at))  # dated when answered, not when looked at
    if out.error is None:
        if isinstance(command, AddAndLaunch):
            if out.instance_id:
                w.instance_id = out.instance_id
            if w.state is S.REQUESTED:
                move(plan, rec, S.BOOTING, at, Cause.BOOTED)
            plan.dirty.add(w.id)
        elif isinstance(command, DrainNode):
            if w.state in (S.IDLE, S.BUSY, S.BOOTING):
                move(plan, rec, S.DRAINING, at, command.reason)
        elif isinstance(command, UndrainNode):
            if w.state is S.DRAINING:
                move(plan, rec, S.BUSY if w.running_jobs else S.IDLE, at, Cause.DEMAND_RETURNED)
        elif isinstance(command, RemoveNode):
            _gone(state, plan, rec, at)
        elif isinstance(command, TerminateInstance):  # a listing may show it up a while yet
            rec.next_attempt_at = max(rec.next_attempt_at, at + config.grace)
        return
    kind = command.kind
    plan.count(f"{'remove_node' if kind == 'remove' else kind}_errors")
    alike = (kind, out.error)
    if alike in plan.alike:  # said once this step already (a batch refused together)
        plan.alike[alike] += 1
    else:
        plan.alike[alike] = 0
        plan.errors.append(
            Problem(
                f"{kind} {w.id} failed (attempt {rec.attempts + 1}): {out.error}",
                worker=w.id,
                cloud=w.cloud,
                instance=w.instance_id,
                node=w.node,
            )
        )
    if isinstance(command, DrainNode | UndrainNode | RemoveNode | OwnNode):
        return  # asked again by the policy, or at the next step
    rec.attempts += 1
    rec.last_error = f"{kind}: {out.error}"
    why = out.error_kind or ""
    refused = kind == "launch" and health.launch_refused(
        state, plan, config, now, w.cloud, why, out.error, w.vm_type
    )
    if kind == "launch" and (refused or rec.attempts >= config.max_attempts) and w.state.live:
        move(plan, rec, S.FAILED, now, Cause.LAUNCH_ERROR)
    elif why in ("throttled", "transient"):
        rec.next_attempt_at = now + health.jittered(config, w.id, rec.attempts)
    else:
        rec.next_attempt_at = now + config.backoff(rec.attempts)
    plan.dirty.add(w.id)


def _settle_hold(state: CoreState, plan: Plan, command: HoldJob | ReleaseJob, out: Outcome) -> None:
    """Track the jobs this site holds; a job that started or went meanwhile is not held."""
    if isinstance(command, HoldJob):
        if out.error is None:
            state.held[command.job.id] = command.job
            plan.count("jobs_held")
        else:
            plan.errors.append(
                Problem(f"hold job {command.job.id} failed: {out.error}", job=command.job.id)
            )
    elif out.error is None or out.error_kind == "unknown_job":
        if state.held.pop(command.job_id, None) is not None:
            plan.count("jobs_released")
    else:
        plan.errors.append(
            Problem(f"release job {command.job_id} failed: {out.error}", job=command.job_id)
        )
    plan.held_changed = True


def _gone(state: CoreState, plan: Plan, rec: WorkerRecord, at: float) -> None:
    """The worker's instance is gone and its node forgotten: its record may end."""
    w = rec.worker
    if rec.ended_at is not None:  # the cloud said when: bill and report to that moment
        at = max(w.state_since, min(at, rec.ended_at))
    rec.instance_gone = True
    plan.dirty.add(w.id)
    departures.leave(state, plan, w.node or w.id, w.id)
    if w.state is S.TERMINATING:
        move(plan, rec, S.TERMINATED, at, Cause.CLOUD_REPORTED)
    if w.state in _FINAL:
        plan.forgotten.append(w.id)


# --- reconcile ----------------------------------------------------------------------


def _reconcile(
    state: CoreState,
    plan: Plan,
    config: CoreConfig,
    now: float,
    nodes: Mapping[str, Node],
    instances: Mapping[str, Mapping[str, Instance]],
    listed: Mapping[str, float],
) -> None:
    grace = config.grace
    running, up = IS.RUNNING, _STEADY
    for rec in list(state.records.values()):
        w = rec.worker
        cloud = instances.get(w.cloud)
        inst = cloud.get(w.id) if cloud is not None else None
        node = nodes.get(w.node or w.id)
        st = w.state
        # Fast path, the common case on a large site: a joined worker whose node and
        # instance say nothing new (or whose cloud could not be asked this time).
        if (
            node is not None
            and up.get(st) is node.state
            and (cloud is None or (inst is not None and inst.state is running))
            and (inst is None or inst.reclaim_at is None)
        ):
            w.running_jobs = node.running_jobs
            w.free_cores = node.free_cores
            if node.owner is not None and node.owner != w.owner:
                plan.run(OwnNode(w.id, node.name, w.owner), state)  # lost, or set by hand
            continue
        cloud_ok = cloud is not None

        if st is S.REQUESTED and not state.running(AddAndLaunch, w.id):
            if inst is not None and inst.state not in (IS.TERMINATED, IS.ERROR):
                w.instance_id = inst.id
                move(plan, rec, S.BOOTING, now, Cause.BOOTED)
            elif inst is not None and inst.state is IS.ERROR:
                move(plan, rec, S.FAILED, now, Cause.LAUNCH_ERROR)
            elif cloud_ok and now >= rec.next_attempt_at:
                plan.run(_launch(rec, config), state)
            st = w.state

        if st is S.BOOTING:
            if node is not None and node.state in _UP:
                _update_load(w, node)
                # Date the join when the node came up, not when this step noticed.
                joined = now
                if node.registered_at is not None:
                    joined = min(now, max(w.state_since, node.registered_at))
                if node.state in _DRAINING:
                    move(plan, rec, S.DRAINING, joined, Cause.JOINED)
                else:
                    move(plan, rec, S.BUSY if w.running_jobs else S.IDLE, joined, Cause.JOINED)
                if w.owner != (node.owner or ""):  # a system that cannot say is told again
                    plan.run(OwnNode(w.id, node.name, w.owner), state)
            elif (
                cloud_ok
                and not state.running(AddAndLaunch, w.id)
                and _vanished(inst, w, listed.get(w.cloud, now), grace)
            ):
                move(plan, rec, S.FAILED, now, _lost(inst))
            continue

        if st in (S.IDLE, S.BUSY, S.DRAINING):
            lost_heartbeat = node is None or node.state is NodeState.DOWN
            if lost_heartbeat and config.power_save:
                # Slurm marks a node powering down before its SuspendProgram has told
                # the manager: wait a little for that request before calling it lost.
                since = state.down_since.setdefault(w.id, now)
                if now - since < config.power_down_grace:
                    continue
            state.down_since.pop(w.id, None)
            if cloud_ok and _vanished(inst, w, listed.get(w.cloud, now), grace):
                move(plan, rec, S.FAILED, now, _lost(inst))
                continue
            if lost_heartbeat:
                move(plan, rec, S.FAILED, now, Cause.LOST)
                continue
            assert node is not None
            _update_load(w, node)
            if inst is not None and inst.reclaim_at is not None:
                _reclaiming(state, plan, rec, inst.reclaim_at)
            if node.state is NodeState.UNKNOWN:
                continue
            draining = node.state in _DRAINING
            if st is S.DRAINING:
                if not draining and not state.running(DrainNode, w.id):
                    move(plan, rec, S.BUSY if w.running_jobs else S.IDLE, now, Cause.OPERATOR)
            elif draining:
                if not state.running(DrainNode, w.id):
                    move(plan, rec, S.DRAINING, now, Cause.OPERATOR)
            elif st is S.IDLE and w.running_jobs:
                move(plan, rec, S.BUSY, now, Cause.JOB_STARTED)
            elif st is S.BUSY and not w.running_jobs:
                move(plan, rec, S.IDLE, now, Cause.JOB_FINISHED)

    # Second pass: take down what must go (including workers failed just now).
    for rec in list(state.records.values()):
        w = rec.worker
        if not (w.state is S.TERMINATING or (w.state is S.FAILED and not rec.instance_gone)):
            continue
        cloud = instances.get(w.cloud)
        if cloud is None or state.running(TerminateInstance, w.id):
            continue
        inst = cloud.get(w.id)
        if inst is None and listed.get(w.cloud, now) < w.state_since:
            continue  # listed before the worker's last move: it cannot tell
        if inst is None or inst.state is IS.TERMINATED:
            if inst is not None and inst.ended_at is not None:
                rec.ended_at = inst.ended_at
            if state.running(AddAndLaunch, w.id):
                continue  # the cloud may not show it yet
            if config.power_save:
                _gone(state, plan, rec, now)  # Slurm keeps its own node list
            else:
                plan.run(RemoveNode(w.id, w.node or w.id), state)
        elif now >= rec.next_attempt_at:
            plan.run(TerminateInstance(w.id, w.cloud, inst.id), state)


def _lost(inst: Instance | None) -> Cause:
    """Why a worker whose instance vanished failed: taken back (spot) or lost."""
    return Cause.SPOT_INTERRUPTED if inst is not None and inst.reclaimed else Cause.LOST


def _reclaiming(state: CoreState, plan: Plan, rec: WorkerRecord, at: float) -> None:
    """The cloud gave notice on a joined spot worker: no new job goes there, and what
    still runs when the instance goes is requeued by the batch system."""
    w = rec.worker
    if w.reclaim_at is None:
        plan.count("spot_notices")
    w.reclaim_at = at
    if w.state in S.JOINED_STATES and not state.running(DrainNode, w.id):
        plan.run(DrainNode(w.id, w.node or w.id, Cause.SPOT_NOTICE), state)


def _launch(rec: WorkerRecord, config: CoreConfig) -> AddAndLaunch:
    w = rec.worker
    pool = w.vm_type if config.typed_nodes else ""
    node = w.node or w.id
    return AddAndLaunch(
        w.id, w.cloud, w.vm_type, node, w.cores, not config.power_save, pool, rec.urgency, w.owner
    )


def _update_load(w: Worker, node: Node) -> None:
    w.running_jobs = node.running_jobs
    w.free_cores = node.free_cores


def _vanished(inst: Instance | None, w: Worker, now: float, grace: float) -> bool:
    if inst is None:
        return now - w.state_since > grace
    return inst.state in (IS.TERMINATED, IS.ERROR)
