"""The contract every batch-system adapter fulfils.

Errors: every adapter raises :class:`BatchError` (or a subclass) and nothing else,
translating its own failures at the boundary with ``raise ... from exc``.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Protocol, runtime_checkable

from elasticsite.jobs import Job

__all__ = [
    "COMMAND_CANNOT_RUN",
    "COMMAND_NOT_FOUND",
    "KILLED",
    "NODE_LOST",
    "PREEMPTED",
    "WALLTIME_EXCEEDED",
    "BatchError",
    "BatchSystem",
    "BatchView",
    "JobDetail",
    "JobRequest",
    "Node",
    "NodeState",
    "UnknownJob",
    "UnknownNode",
    "checked_command",
    "exit_reason",
]


_JOB_FIELDS = tuple(f.name for f in fields(Job))


class BatchError(Exception):
    """A batch-system command or query failed; the message says which and why."""


class UnknownJob(BatchError):
    """No job with that id."""


class UnknownNode(BatchError):
    """No node with that name."""


class NodeState(enum.StrEnum):
    """A node's state as the manager needs it, whatever the batch system calls it."""

    DOWN = "down"
    """Declared but not (or no longer) reporting: booting, crashed or lost."""
    IDLE = "idle"
    """Up, accepting jobs, running none."""
    BUSY = "busy"
    """Up, running at least one job (allocated or mixed)."""
    DRAINING = "draining"
    """Takes no new job, still running some."""
    DRAINED = "drained"
    """Takes no new job and runs none: safe to remove."""
    UNKNOWN = "unknown"
    """A native state this adapter cannot translate (logged with a warning)."""


# -- the words every adapter uses for why a job ended or waits again ----------------------

WALLTIME_EXCEEDED = "walltime exceeded"
NODE_LOST = "node lost"
PREEMPTED = "preempted"
COMMAND_NOT_FOUND = "command not found"
COMMAND_CANNOT_RUN = "command cannot run"
KILLED = int(signal.SIGKILL)
"""The signal a batch system kills a job with when it must (walltime, cancel)."""

_SHELL_EXITS = {126: COMMAND_CANNOT_RUN, 127: COMMAND_NOT_FOUND}


def exit_reason(code: int | None) -> str:
    """What an exit code means by the shell's convention every batch system's job
    script follows (126: cannot run, 127: not found); ``""`` for any other."""
    return _SHELL_EXITS.get(code, "") if code is not None else ""


@dataclass(slots=True)
class JobDetail(Job):
    """Everything a batch system tells of one job (:meth:`BatchSystem.job`): the
    :class:`~elasticsite.model.Job` (state, exit code or signal and reason, times,
    attempts, node, user, attributes) and more.

    The paths are where the batch system put the job's output, ``""`` where it does not
    say; ``notes`` are what else is worth knowing or could not be learnt, one line each
    (read from ``sacct``, the job's event log ...).
    """

    native_state: str = ""
    """The batch system's own words for the state (``FAILED``, ``F``, ``4`` ...)."""
    group: str = ""
    stdout: str = ""
    stderr: str = ""
    directory: str = ""
    """Where the job ran (its working directory)."""
    worker: str = ""
    """The manager's worker whose node ran the job (filled in by the site)."""
    worker_log: str = ""
    """The log of the worker (the embedded cloud's process) that ran it."""
    notes: tuple[str, ...] = ()

    @classmethod
    def of(cls, job: Job, **more: object) -> JobDetail:
        """``job``'s fields with ``more`` of the detail's own."""
        fields = {name: getattr(job, name) for name in _JOB_FIELDS}
        return cls(**fields, **more)  # type: ignore[arg-type]


@dataclass(slots=True)
class Node:
    """One compute node of the batch system."""

    name: str
    cores: int
    state: NodeState
    running_jobs: int = 0
    free_cores: int = 0
    reason: str = ""
    heartbeat_at: float | None = None
    registered_at: float | None = None
    """When the node last came up (its worker joined), if the batch system says."""
    owner: str | None = None
    """The user whose jobs alone it runs (``""``: anyone's); None where the batch
    system does not say."""


@dataclass(slots=True)
class BatchView:
    """What the batch system looks like at ``taken_at``.

    ``queued`` holds the jobs waiting to start (queued, requeued, and held ones where a
    system lists them, marked with attribute ``held``), in the order the batch system
    would start them (priority order); ``running`` the jobs started and not ended.
    Finished jobs are left out (:meth:`BatchSystem.job` tells of them).
    """

    taken_at: float
    queued: list[Job] = field(default_factory=list)
    running: list[Job] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What a user asks for when submitting a job."""

    command: Sequence[str]
    cores: int = 1
    walltime: float = 3600.0
    user: str = ""
    priority: int = 0
    attributes: Mapping[str, str] = field(default_factory=dict)
    """Job attributes (:mod:`elasticsite.attributes`) to submit with: each adapter
    passes those its batch system has a flag for (a partition or queue, a QOS, an
    account) and ignores the others."""


def checked_command(request: JobRequest) -> list[str]:
    """The request's command as a list, once the checks every adapter's ``submit`` makes
    have passed (non-empty list of strings, cores >= 1, walltime > 0); else BatchError."""
    argv = list(request.command)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise BatchError(f"submit: command must be a non-empty list of strings, got {argv!r}")
    if request.cores < 1:
        raise BatchError(f"submit: cores must be >= 1, got {request.cores}")
    if not request.walltime > 0:
        raise BatchError(f"submit: walltime must be > 0 seconds, got {request.walltime}")
    return argv


@runtime_checkable
class BatchSystem(Protocol):
    """A batch system the manager senses and drives.

    Every method is idempotent where the operation allows it (adding a node that
    exists, draining a draining node, removing a removed node are no-ops), so a
    manager that retries after a crash never fails on its own earlier work.
    """

    def snapshot(self) -> BatchView:
        """Queued and running jobs and all nodes, in one consistent read."""
        ...

    def add_node(self, name: str, cores: int, pool: str = "") -> None:
        """Declare a node the cloud is bringing up; it stays DOWN until it reports.
        ``pool``, when given, is the VM type the node serves: jobs that ask for that
        type (attribute ``vm_type``) run there (a feature, a property, a partition)."""
        ...

    def drain(self, name: str, reason: str) -> None:
        """Give the node no new job; its running jobs go on."""
        ...

    def undrain(self, name: str) -> None:
        """Accept jobs on the node again."""
        ...

    def remove_node(self, name: str) -> None:
        """Forget the node. A job still recorded on it goes back to the queue."""
        ...

    def submit(self, request: JobRequest) -> str:
        """Queue a job; returns its id."""
        ...

    def set_priority(self, job_id: str, priority: int) -> None:
        """Raise or lower a queued job's priority."""
        ...

    def move_to_front(self, job_id: str) -> None:
        """Make a queued job the next to run."""
        ...

    def preempt(self, job_id: str) -> None:
        """Stop a running job and put it back in the queue."""
        ...

    def hold(self, job_id: str) -> None:
        """Keep a queued job from starting until :meth:`release`; it leaves the snapshot's
        queue (or is listed with attribute ``held``). Holding a held job is a no-op; a
        job that started or ended raises :class:`UnknownJob`."""
        ...

    def release(self, job_id: str) -> None:
        """Let a held job start again; releasing a job that is not held is a no-op."""
        ...

    def set_owner(self, name: str, user: str) -> None:
        """Start only ``user``'s jobs on node ``name`` from now on (``""``: anyone's);
        a job running there goes on. Setting the owner it has is a no-op; a system
        that cannot keep a node for one user raises :class:`BatchError` saying so."""
        ...

    def redirect(self, job_id: str, target: str) -> None:
        """Move a queued job to partition (or queue) ``target``, where cloud workers
        run it. Redirecting a job already there is a no-op; a job that started or
        ended meanwhile raises :class:`UnknownJob`; a batch system without such
        targets raises :class:`BatchError` saying so."""
        ...

    def cancel(self, job_id: str) -> None:
        """Remove a queued, held or running job (a running one is killed); it ends
        CANCELLED. Cancelling a cancelled job is a no-op; a job that ended otherwise
        raises :class:`BatchError` saying how it ended; an id the system does not
        know raises :class:`UnknownJob`. Who may cancel whose job is the batch
        system's rule (another user's job: root, or its administrators)."""
        ...

    def job(self, job_id: str) -> JobDetail:
        """What the system tells of one job, finished ones included for as long as it
        keeps them (:class:`JobDetail`); :class:`UnknownJob` for an id it does not
        know, or no longer knows."""
        ...
