"""The data every part of elasticsite shares: jobs, workers, clouds, decisions.

Nothing here reads the clock, opens a socket or touches a file: time always comes in
as an argument, so the live manager and the simulator drive the same objects.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from elasticsite.attributes import EVERY_JOB, Selector
from elasticsite.jobs import Job, JobState, outcome, signal_name, state_text

WasteEstimate = Literal["observed", "fixed"]
"""Where a cloud's boot and shutdown estimates come from: what the core observed of
its workers (starting from the configured times), or the configured times alone."""

__all__ = [
    "Assign",
    "Cause",
    "CloudSpec",
    "Decision",
    "Drain",
    "InvalidTransition",
    "Job",
    "JobState",
    "Launch",
    "Redirect",
    "Refusal",
    "Terminate",
    "Transition",
    "Undrain",
    "VMType",
    "WasteEstimate",
    "Worker",
    "WorkerState",
    "billed_cost",
    "outcome",
    "signal_name",
    "state_text",
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


@dataclass(frozen=True, slots=True)
class VMType:
    """A size of instance a cloud offers."""

    name: str
    cores: int = 1
    memory_mb: int = 2048


@dataclass(frozen=True, slots=True)
class CloudSpec:
    """What a policy needs to know about one cloud.

    ``billing_increment`` is in seconds: 3600 bills each started hour in full,
    1 bills by the second. ``boot_time + shutdown_time`` is the estimated waste time
    paper 000's policies weigh queued work against.
    """

    name: str
    driver: str = "local"
    max_instances: int = 10
    price_per_hour: float = 0.0
    billing_increment: float = 1.0
    boot_time: float = 60.0
    shutdown_time: float = 6.0
    vm_types: tuple[VMType, ...] = (VMType("small"),)
    serves: Selector = EVERY_JOB
    """The jobs this cloud's workers can run (by job attributes); empty: every job."""
    spot: bool = False
    """Spot (preemptible) capacity: cheaper, and the cloud may take instances back."""
    spot_price_cap: float | None = None
    """The most a spot instance may cost per hour (the provider's bid); None: on-demand's."""
    volunteer: bool = False
    """The site offers its workers there as targets of the cloud's urgent policies
    (a finite cloud shared with urgent users takes volunteers first)."""
    quota: int | None = None
    """The provider's hard limit on this site's instances there (its account quota),
    which even urgent bursts past ``max_instances`` stop at; None: no known limit."""
    waste_estimate: WasteEstimate = "observed"
    """``observed``: the core replaces ``boot_time`` and ``shutdown_time`` with the running
    means of what it saw (once it saw any); ``fixed``: they stay as configured."""
    images: tuple[tuple[str, str], ...] = ()
    """``(vm type, image)``: what a worker of each type boots, as far as the cloud's
    driver says (a job asking for another image is not served there); empty: unknown."""

    @property
    def waste_time(self) -> float:
        return self.boot_time + self.shutdown_time

    @property
    def default_vm(self) -> VMType:
        return self.vm_types[0]

    @property
    def hourly_billing(self) -> bool:
        """Bills in increments long enough that an idle, paid-for worker is worth keeping."""
        return self.billing_increment >= 600


def billed_cost(duration: float, price_per_hour: float, increment: float) -> float:
    """Money owed for one instance alive ``duration`` seconds: every started increment is paid."""
    if duration <= 0 or price_per_hour <= 0:
        return 0.0
    increment = max(increment, 1e-9)
    return math.ceil(duration / increment - 1e-9) * increment * price_per_hour / 3600.0


@dataclass(frozen=True, slots=True)
class Launch:
    """Start ``count`` workers of ``vm_type`` on ``cloud``.

    ``nodes``, when given (one per worker), are the batch-system names the workers
    must take, for batch systems that name their cloud nodes themselves (Slurm's
    power saving); otherwise each worker's node is named after the worker.
    """

    cloud: str
    vm_type: str
    count: int
    cause: Cause
    nodes: tuple[str, ...] = ()
    urgency: str = ""
    """``red``, ``orange`` or ``yellow`` when launched for an urgent job: a finite cloud
    gives the launch that urgency's policy."""
    user: str = ""
    """The user whose share the workers are for: their nodes run that user's jobs only
    (:attr:`Worker.owner`); ``""``: anyone's."""


@dataclass(frozen=True, slots=True)
class Assign:
    """Make a worker's node run ``user``'s jobs only from now on (``""``: anyone's). A
    job already running there goes on."""

    worker_id: str
    user: str
    cause: Cause


@dataclass(frozen=True, slots=True)
class Drain:
    """Stop giving jobs to a worker; it is terminated once its jobs are done."""

    worker_id: str
    cause: Cause


@dataclass(frozen=True, slots=True)
class Undrain:
    """Put a draining worker back into service."""

    worker_id: str
    cause: Cause


@dataclass(frozen=True, slots=True)
class Terminate:
    """Give a worker's instance back to its cloud now."""

    worker_id: str
    cause: Cause


@dataclass(frozen=True, slots=True)
class Redirect:
    """Send a queued job to ``target``: the partition (or queue) the cloud's workers
    serve, where the batch system starts it on a cloud worker instead of the site."""

    job_id: str
    target: str
    cause: Cause | str = Cause.REDIRECTED


@dataclass(frozen=True, slots=True)
class Refusal:
    """Launches a limit held back, and why: the budget (``limit``), which the period's
    ``forecast`` spend would have passed with them (``allowed``: the budget, plus the
    urgent extra for urgent launches), to the period's end ``until``."""

    launch: Launch
    limit: Literal["budget"]
    forecast: float
    allowed: float
    until: float


@dataclass(slots=True)
class Decision:
    """What one policy evaluation asks the driver (manager or simulator) to do."""

    launch: list[Launch] = field(default_factory=list)
    drain: list[Drain] = field(default_factory=list)
    undrain: list[Undrain] = field(default_factory=list)
    terminate: list[Terminate] = field(default_factory=list)
    redirect: list[Redirect] = field(default_factory=list)
    hold: list[Job] = field(default_factory=list)
    """Queued jobs to keep from starting (fair share: their user has more than theirs)."""
    release: list[str] = field(default_factory=list)
    """Ids of jobs held before that may start again."""
    assign: list[Assign] = field(default_factory=list)
    """Workers handed to another user (fair share: lent, or given back)."""
    refused: list[Refusal] = field(default_factory=list)
    """Launches the budget held back (nothing to carry out: for reports and logs)."""
    unservable: dict[str, str] = field(default_factory=dict)
    """Queued jobs no cloud could run, and why (job id -> reason): nothing is launched
    for them (:mod:`elasticsite.feasibility`). Not an action: the manager shows them."""

    def launched(self, cloud: str | None = None) -> int:
        return sum(x.count for x in self.launch if cloud is None or x.cloud == cloud)

    def __bool__(self) -> bool:
        return bool(
            self.launch or self.drain or self.undrain or self.terminate or self.redirect
            or self.hold or self.release or self.assign
        )  # fmt: skip

    def extend(self, other: Decision) -> None:
        self.launch.extend(other.launch)
        self.drain.extend(other.drain)
        self.undrain.extend(other.undrain)
        self.terminate.extend(other.terminate)
        self.redirect.extend(other.redirect)
        self.hold.extend(other.hold)
        self.release.extend(other.release)
        self.assign.extend(other.assign)
        self.refused.extend(other.refused)
        self.unservable.update(other.unservable)

    def summary(self) -> str:
        parts = []
        if self.launch:
            parts.append(
                "launch " + ", ".join(f"{x.count}x{x.vm_type}@{x.cloud}" for x in self.launch)
            )
        for label, items in (
            ("drain", self.drain),
            ("undrain", self.undrain),
            ("terminate", self.terminate),
            ("redirect", self.redirect),
            ("hold", self.hold),
            ("release", self.release),
            ("assign", self.assign),
        ):
            if items:
                parts.append(f"{label} {len(items)}")
        if self.refused:
            parts.append(f"refused {sum(r.launch.count for r in self.refused)} (budget)")
        return "; ".join(parts) or "nothing"


def count_by_cloud(workers: Iterable[Worker]) -> dict[str, int]:
    """Live workers per cloud (what counts against ``max_instances``)."""
    counts: dict[str, int] = {}
    for w in workers:
        if w.state.live:
            counts[w.cloud] = counts.get(w.cloud, 0) + 1
    return counts
