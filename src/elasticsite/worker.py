"""A cloud worker and its state machine: states, the causes of its moves, its history.

Nothing here reads the clock: every move takes its time as an argument, so the live
manager and the simulator drive the same objects. Re-exported by :mod:`elasticsite.model`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

__all__ = [
    "ALLOWED_TRANSITIONS",
    "Cause",
    "InvalidTransition",
    "Transition",
    "Worker",
    "WorkerState",
    "count_by_cloud",
]


class WorkerState(enum.StrEnum):
    """The lifecycle of one cloud worker; the single source of truth for an instance."""

    REQUESTED = "requested"
    """Asked of the cloud; no instance confirmed yet."""
    BOOTING = "booting"
    """The cloud reports an instance; it has not joined the batch system yet."""
    IDLE = "idle"
    """Joined the batch system, running no job."""
    BUSY = "busy"
    """Joined the batch system, running at least one job."""
    DRAINING = "draining"
    """Takes no new job; terminated once its running jobs are done."""
    TERMINATING = "terminating"
    """Termination asked of the cloud; waiting for the instance to disappear."""
    TERMINATED = "terminated"
    """Gone. Final."""
    FAILED = "failed"
    """Boot error, stall, lost heartbeat or vanished instance. Final."""

    # The groups of states, defined here only (set after the class; not members).
    # Looked up in hot loops over thousands of workers: plain set membership.
    PENDING_STATES: ClassVar[frozenset[WorkerState]]
    """Launched, not joined yet: requested, booting."""
    JOINED_STATES: ClassVar[frozenset[WorkerState]]
    """Joined and in service (a job may start there): idle, busy."""
    UP_STATES: ClassVar[frozenset[WorkerState]]
    """Joined, its node up, in service or draining: idle, busy, draining."""
    FINAL_STATES: ClassVar[frozenset[WorkerState]]
    """Ended for good: terminated, failed."""

    @property
    def joined(self) -> bool:
        """In :attr:`JOINED_STATES` (idle or busy; a draining worker is leaving)."""
        return self in _JOINED

    @property
    def pending(self) -> bool:
        return self in _PENDING

    @property
    def final(self) -> bool:
        return self in _FINAL

    @property
    def live(self) -> bool:
        """Holds (or may hold) a cloud instance that costs money."""
        return self not in _FINAL


_S = WorkerState
_JOINED = _S.JOINED_STATES = frozenset({_S.IDLE, _S.BUSY})
_PENDING = _S.PENDING_STATES = frozenset({_S.REQUESTED, _S.BOOTING})
_FINAL = _S.FINAL_STATES = frozenset({_S.TERMINATED, _S.FAILED})
_S.UP_STATES = _JOINED | {_S.DRAINING}
ALLOWED_TRANSITIONS: dict[WorkerState, frozenset[WorkerState]] = {
    _S.REQUESTED: frozenset({_S.BOOTING, _S.IDLE, _S.BUSY, _S.TERMINATING, _S.FAILED}),
    _S.BOOTING: frozenset({_S.IDLE, _S.BUSY, _S.DRAINING, _S.TERMINATING, _S.FAILED}),
    _S.IDLE: frozenset({_S.BUSY, _S.DRAINING, _S.TERMINATING, _S.FAILED}),
    _S.BUSY: frozenset({_S.IDLE, _S.DRAINING, _S.TERMINATING, _S.FAILED}),
    _S.DRAINING: frozenset({_S.IDLE, _S.BUSY, _S.TERMINATING, _S.FAILED}),
    _S.TERMINATING: frozenset({_S.TERMINATED, _S.FAILED}),
    _S.TERMINATED: frozenset(),
    _S.FAILED: frozenset(),
}
"""Every legal move of the worker state machine; TERMINATED and FAILED are final."""


class Cause(enum.StrEnum):
    """Why a worker moved or a decision was taken; persisted with every transition."""

    DEMAND = "demand"
    """Queued work needs more capacity."""
    BASELINE = "baseline"
    """A policy's minimum (steady stream's one worker, dedicated's fixed pool)."""
    REPLACEMENT = "replacement"
    """Replaces a failed or stalled worker."""
    IDLE = "idle"
    """No queued work needs this worker."""
    SURPLUS = "surplus"
    """More workers than the policy wants, even though some work is queued."""
    BILLING_BOUNDARY = "billing-boundary"
    """Idle and close to the next billing boundary of an hourly cloud."""
    SPEND_CAP = "spend-cap"
    """Over the site-wide spending cap."""
    STALLED = "stalled"
    """Did not join the batch system within the stall timeout."""
    LOST = "lost"
    """The instance vanished or stopped sending heartbeats."""
    LAUNCH_ERROR = "launch-error"
    """The cloud refused or failed the launch too many times."""
    DEMAND_RETURNED = "demand-returned"
    """A draining worker put back into service."""
    DRAINED = "drained"
    """A draining worker has no job left."""
    BOOTED = "booted"
    """The cloud reports the instance running."""
    JOINED = "joined"
    """The node registered with the batch system."""
    JOB_STARTED = "job-started"
    JOB_FINISHED = "job-finished"
    CLOUD_REPORTED = "cloud-reported"
    """The instance is gone according to the cloud."""
    ADOPTED = "adopted"
    """A tagged instance found at start-up that no record knew of."""
    SHUTDOWN = "shutdown"
    """The manager is stopping and was configured to take its workers down."""
    OPERATOR = "operator"
    """An administrator asked for it."""
    POWER_UP = "power-up"
    """The batch system's power saving asked for the node (Slurm's ResumeProgram)."""
    POWER_DOWN = "power-down"
    """The batch system's power saving released the node, or gave up resuming it."""
    REDIRECTED = "redirected"
    """A queued job sent to the cloud's partition by a redirection strategy."""
    FAIR_SHARE = "fair-share"
    """Its user holds more VMs than their share while another user waits (Cloud Scheduler)."""
    SPOT_NOTICE = "spot-notice"
    """The cloud announced it takes this spot instance back: drained before it goes."""
    SPOT_INTERRUPTED = "spot-interrupted"
    """The cloud took the spot instance back (its jobs are requeued)."""
    URGENT = "urgent"
    """An urgent job needs it: launched past the normal limits (the urgent allowance),
    or a non-urgent worker terminated to make room for one under the cloud's quota."""


class InvalidTransition(ValueError):
    """A worker was asked to make a move its state machine does not allow."""


@dataclass(frozen=True, slots=True)
class Transition:
    """One persisted move of a worker: ``from_state -> to_state`` at ``at`` because of ``cause``."""

    worker_id: str
    from_state: WorkerState | None
    to_state: WorkerState
    at: float
    cause: Cause | str


@dataclass(slots=True)
class Worker:
    """One cloud worker (an instance that joins the batch system as a node).

    ``history`` holds every transition this object went through; the manager's
    store persists each one as it happens.
    """

    id: str
    cloud: str
    vm_type: str
    cores: int
    requested_at: float
    state: WorkerState = WorkerState.REQUESTED
    instance_id: str | None = None
    node: str | None = None
    joined_at: float | None = None
    state_since: float = 0.0
    running_jobs: int = 0
    free_cores: int = 0
    history: list[Transition] = field(default_factory=list)
    reclaim_at: float | None = None
    """When the cloud takes this spot instance back, once it has said so (not stored:
    the cloud says it again after a restart)."""
    owner: str = ""
    """The user whose jobs alone its node runs (Cloud Scheduler mode: the user whose
    share it serves); ``""``: anyone's."""

    def __post_init__(self) -> None:
        if self.node is None:
            self.node = self.id
        if not self.state_since:
            self.state_since = self.requested_at

    def transition(self, to: WorkerState, at: float, cause: Cause | str) -> Transition:
        """Move to ``to``; raise :class:`InvalidTransition` if the state machine forbids it."""
        if to is self.state:
            raise InvalidTransition(f"worker {self.id} is already {to.value}")
        if to not in ALLOWED_TRANSITIONS[self.state]:
            raise InvalidTransition(
                f"worker {self.id}: {self.state.value} -> {to.value} is not allowed "
                f"(allowed: {', '.join(sorted(s.value for s in ALLOWED_TRANSITIONS[self.state]))})"
            )
        record = Transition(self.id, self.state, to, at, cause)
        self.state = to
        self.state_since = at
        if to.joined and self.joined_at is None:
            self.joined_at = at
        self.history.append(record)
        return record


def count_by_cloud(workers: Iterable[Worker]) -> dict[str, int]:
    """Live workers per cloud (what counts against ``max_instances``)."""
    counts: dict[str, int] = {}
    for w in workers:
        if w.state.live:
            counts[w.cloud] = counts.get(w.cloud, 0) + 1
    return counts
