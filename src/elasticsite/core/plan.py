"""What the core works on and what it hands back: records, commands, outcomes, plans.

The core (:mod:`.observe`, :mod:`.actuate`) moves workers through their state
machine and says what must be done about it, as data. A driver (the live manager,
the simulator) carries the :class:`Plan` out: it persists the transitions, the
changed records and the state the plan says changed (clouds' health, held jobs,
pending departures), then runs each :class:`Command` against its batch system, its
clouds and its broker, and hands back an :class:`Outcome` per finished command at
its next step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from elasticsite.model import CloudSpec, Decision, Job, Transition, Worker

if TYPE_CHECKING:
    from elasticsite.core.estimates import ObservedTimes
    from elasticsite.core.health import CloudHealth

__all__ = [
    "AddAndLaunch",
    "Command",
    "CoreConfig",
    "CoreState",
    "DrainNode",
    "ForgetNode",
    "HoldJob",
    "InFlight",
    "Outcome",
    "OwnNode",
    "Plan",
    "Problem",
    "RedirectJob",
    "ReleaseJob",
    "RemoveNode",
    "TerminateInstance",
    "UndrainNode",
    "WorkerRecord",
    "command_key",
    "worker_id",
    "worker_number",
]


def worker_id(cloud: str, number: int) -> str:
    """The id of worker ``number`` of ``cloud``; its instance is named after it."""
    return f"{cloud}-{number:05d}"


def worker_number(wid: str) -> int | None:
    """The number in a worker id made by :func:`worker_id`; None for any other name."""
    head, sep, tail = wid.rpartition("-")
    return int(tail) if head and sep and tail.isascii() and tail.isdigit() else None


@dataclass(slots=True)
class WorkerRecord:
    """A worker plus the bookkeeping for retries and cleanup."""

    worker: Worker
    attempts: int = 0
    next_attempt_at: float = 0.0
    instance_gone: bool = False
    last_error: str = ""
    ended_at: float | None = None
    """When the cloud says the instance stopped (not every cloud does)."""
    urgency: str = ""
    """Launched for an urgent job: its retries carry the urgency too (not persisted; a
    restarted manager retries it as a normal launch)."""


# --- commands: what a driver runs, as data -----------------------------------------


@dataclass(frozen=True, slots=True)
class AddAndLaunch:
    """Declare the worker's node (unless ``add_node`` is false: the batch system
    declared it itself) and launch its instance, named after the worker."""

    worker_id: str
    cloud: str
    vm_type: str
    node: str
    cores: int
    add_node: bool = True
    pool: str = ""
    """The VM type the node serves, for batch systems that match jobs to it (Cloud
    Scheduler mode); empty: any job."""
    urgency: str = ""
    """Set when launched for an urgent job: the instance is tagged with it."""
    owner: str = ""
    """The user whose jobs alone the node runs (set before the instance boots, so no
    other user's job starts there); empty: anyone's."""
    kind = "launch"


@dataclass(frozen=True, slots=True)
class TerminateInstance:
    """Give an instance back to its cloud; ``worker_id`` is empty for a stray."""

    worker_id: str
    cloud: str
    instance_id: str
    kind = "terminate"


@dataclass(frozen=True, slots=True)
class DrainNode:
    """Stop giving the worker's node jobs; the worker drains once this is done."""

    worker_id: str
    node: str
    reason: str
    kind = "drain"


@dataclass(frozen=True, slots=True)
class UndrainNode:
    """Put the worker's node back into service."""

    worker_id: str
    node: str
    kind = "undrain"


@dataclass(frozen=True, slots=True)
class OwnNode:
    """Start only ``user``'s jobs on the worker's node (``""``: anyone's)."""

    worker_id: str
    node: str
    user: str
    kind = "own"


@dataclass(frozen=True, slots=True)
class RemoveNode:
    """Forget the node of a worker whose instance is gone (its jobs are requeued)."""

    worker_id: str
    node: str
    kind = "remove"


@dataclass(frozen=True, slots=True)
class ForgetNode:
    """Record in the broker context that the node left; kept pending in the core's
    :attr:`CoreState.departures` and sent again until the broker has it."""

    node: str
    worker_id: str = ""
    kind = "forget"


@dataclass(frozen=True, slots=True)
class RedirectJob:
    """Move a queued job to the partition (queue) ``target`` the cloud's workers serve."""

    job_id: str
    target: str
    kind = "redirect"


@dataclass(frozen=True, slots=True)
class HoldJob:
    """Keep a queued job from starting (its user is over their share of the VMs)."""

    job: Job
    kind = "hold"


@dataclass(frozen=True, slots=True)
class ReleaseJob:
    """Let a job this site held start again."""

    job_id: str
    kind = "release"


Command = (
    AddAndLaunch
    | TerminateInstance
    | DrainNode
    | UndrainNode
    | OwnNode
    | RemoveNode
    | ForgetNode
    | RedirectJob
    | HoldJob
    | ReleaseJob
)


class InFlight(NamedTuple):
    """What identifies a command in flight (:func:`command_key`): one of each kind per
    worker (or node, stray instance, job)."""

    kind: str
    """The command's ``kind`` (``launch``, ``drain`` ...; ``stray`` for a stray's
    termination)."""
    of: str
    """The worker's id (or the node's name, the stray instance's id, the job's id; a
    departure's node, which a later worker may take: one departure per node)."""


STRAY = "stray"
"""The :attr:`InFlight.kind` of a stray instance's termination (keyed by instance)."""


def command_key(command: Command) -> InFlight:
    """What identifies ``command`` in flight."""
    if isinstance(command, RedirectJob | ReleaseJob):
        return InFlight(command.kind, command.job_id)
    if isinstance(command, HoldJob):
        return InFlight(command.kind, command.job.id)
    if isinstance(command, ForgetNode):
        return InFlight(command.kind, command.node)
    if isinstance(command, TerminateInstance):
        if not command.worker_id:
            return InFlight(STRAY, command.instance_id)
        return InFlight(command.kind, command.worker_id)
    return InFlight(command.kind, command.worker_id or command.node)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a command ended: at ``at`` (when the cloud or batch system answered),
    with ``error`` None on success; ``instance_id`` is a launched instance's."""

    command: Command
    at: float
    error: str | None = None
    instance_id: str | None = None
    error_kind: str | None = None
    """Why a cloud call failed (:class:`~elasticsite.clouds.errors.ErrorKind`), if known."""
    call: str | None = None
    """The provider's API call that failed (``RunInstances`` ...), if the driver said."""


# --- the state a driver keeps and the plan it gets ---------------------------------


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """The settings the core reads (from the manager's configuration)."""

    site_id: str
    clouds: tuple[CloudSpec, ...]
    interval: float = 5.0
    max_attempts: int = 5
    retry_backoff: float = 5.0
    retry_backoff_max: float = 300.0
    power_save: bool = False
    """Slurm's power saving owns the node list: nodes are neither added nor removed."""
    power_down_grace: float = 15.0
    """Seconds a joined node may look down under power saving before it counts as lost."""
    capacity_cooldown: float = 300.0
    """Seconds a cloud takes no launch after refusing one for capacity or quota."""
    protect_after: int = 3
    """Workers of one cloud failing in a row before joining that protect it (0: never)."""
    protect_cooldown: float = 1800.0
    """Seconds a protected cloud takes no launch (unless an operator resets it)."""
    typed_nodes: bool = False
    """Each worker's node serves only jobs asking for its VM type (Cloud Scheduler mode)."""

    @property
    def grace(self) -> float:
        """How long an instance may be missing from ``describe()`` (eventual
        consistency) before its worker counts as lost."""
        return max(30.0, 3 * self.interval)

    def backoff(self, attempts: int) -> float:
        """Seconds to wait before the next try after ``attempts`` failures."""
        return min(self.retry_backoff * 2 ** min(attempts - 1, 32), self.retry_backoff_max)


@dataclass
class CoreState:
    """Everything the core reads and updates between two steps, kept by the driver.

    ``records`` are the unfinished workers; ``known`` every worker id ever given
    (so a tagged instance of a finished worker is a stray, not an adoption);
    ``inflight`` the keys (:func:`command_key`) of commands running now.
    """

    records: dict[str, WorkerRecord] = field(default_factory=dict)
    known: set[str] = field(default_factory=set)
    inflight: set[InFlight] = field(default_factory=set)
    strays: dict[str, float] = field(default_factory=dict)
    """Stray instance ids being terminated -> when to try again."""
    down_since: dict[str, float] = field(default_factory=dict)
    shutting_down: bool = False
    shutdown_now: bool = False
    """While shutting down: terminate every worker at once instead of draining it."""
    health: dict[str, CloudHealth] = field(default_factory=dict)
    """Clouds closed for a while or until reset, and their failure counts
    (:mod:`.health`); a cloud with no record is open."""
    held: dict[str, Job] = field(default_factory=dict)
    """Queued jobs this site holds (a user over their share), by id, until released."""
    times: dict[str, ObservedTimes] = field(default_factory=dict)
    """Each cloud's boot and shutdown times seen so far (:mod:`.estimates`)."""
    departures: dict[str, str] = field(default_factory=dict)
    """Nodes that left whose departure the broker has not recorded yet -> the worker
    that held each (``""`` if not known), in the order they left (:mod:`.departures`)."""

    def running(
        self, command: type[AddAndLaunch | DrainNode | TerminateInstance], worker_id: str
    ) -> bool:
        """Whether a command of that class is in flight for worker ``worker_id``."""
        return InFlight(command.kind, worker_id) in self.inflight


class Problem(str):
    """A message for the operator (a :attr:`Plan.errors` entry) that also carries the
    ids it is about (worker, cloud, instance, job), for structured logs."""

    ids: dict[str, str]

    def __new__(cls, message: str, **ids: str | None) -> Problem:
        self = super().__new__(cls, message)
        self.ids = {k: v for k, v in ids.items() if v}
        return self


@dataclass
class Plan:
    """What one step changed and what must now be done.

    ``new`` are records created this step, ``dirty`` the ids of records changed (both
    to persist, before any command runs), ``commands`` the work to run, ``counts``
    what happened, by counter name.
    """

    transitions: list[Transition] = field(default_factory=list)
    new: list[WorkerRecord] = field(default_factory=list)
    dirty: set[str] = field(default_factory=set)
    commands: list[Command] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    """Ids of records that reached their end (terminated, or failed with the
    instance gone): the driver drops them from memory once persisted."""
    health_changed: bool = False
    """A cloud's health record changed: the driver persists them."""
    held_changed: bool = False
    """The jobs held changed: the driver persists them."""
    departures_changed: bool = False
    """The pending departures changed: the driver persists them, before any command
    runs."""
    alike: dict[tuple[str, str], int] = field(default_factory=dict)
    """Failures of one kind with the same error (a batch of terminations refused
    together) past the first, reported as one line each."""
    decision: Decision = field(default_factory=Decision)
    """What the step decided (:func:`~elasticsite.core.step.step`)."""

    def count(self, name: str, by: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + by

    def run(self, command: Command, state: CoreState) -> None:
        """Queue ``command`` unless one like it is already in flight."""
        key = command_key(command)
        if key not in state.inflight:
            state.inflight.add(key)
            self.commands.append(command)
