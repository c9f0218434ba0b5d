"""A batch job, its states and how they read: what every batch system reports of a job.

Nothing here reads the clock, opens a socket or touches a file (:mod:`elasticsite.model`
re-exports all of it).
"""

from __future__ import annotations

import enum
import signal as signal_module
from collections.abc import Mapping
from dataclasses import dataclass

from elasticsite.attributes import EMPTY as EMPTY_ATTRIBUTES

__all__ = ["Job", "JobState", "outcome", "signal_name", "state_text"]


class JobState(enum.StrEnum):
    """Where a batch job is in its life, whatever its batch system calls it.

    Each adapter translates its system's native states through one table (the tables
    are in docs/jobs.md); a native state it cannot translate is :attr:`UNKNOWN`, with a
    warning, never an error. ``waiting`` and ``finished`` name the groups. A mark the
    manager puts on a waiting job (unservable by any cloud, say) is an attribute of the
    job, not a state of its own.
    """

    QUEUED = "queued"
    """Waiting in the batch queue for cores; it has never started."""
    HELD = "held"
    """Kept from starting (by a user, an administrator or the manager) until released."""
    REQUEUED = "requeued"
    """Waiting again after a run was cut short: its node was lost or removed, it was
    preempted, or its worker was drained, killed or restarted. ``attempts`` counts the
    runs so far and ``reason`` says what happened to the last one."""
    RUNNING = "running"
    """Dispatched to a node and started (suspended, or exiting, still counts)."""
    COMPLETED = "completed"
    """Finished with exit code 0."""
    FAILED = "failed"
    """Finished otherwise: a non-zero exit code, a signal, its walltime exceeded, its
    node lost for good, a command that could not start. ``exit_code`` or ``signal``
    and ``reason`` say which."""
    CANCELLED = "cancelled"
    """Removed (queued or running) by a user, an administrator or the batch system."""
    UNKNOWN = "unknown"
    """A native state the adapter cannot translate (logged with a warning)."""
    DONE = "completed"
    """The former name of :attr:`COMPLETED` (an alias: the same member)."""

    # Looked up in hot loops over thousands of jobs: plain set membership.
    @property
    def waiting(self) -> bool:
        """Queued, held or requeued: not started (again) yet."""
        return self in _WAITING

    @property
    def finished(self) -> bool:
        """Completed, failed or cancelled: final."""
        return self in _FINISHED


_J = JobState
_WAITING = frozenset({_J.QUEUED, _J.HELD, _J.REQUEUED})
_FINISHED = frozenset({_J.COMPLETED, _J.FAILED, _J.CANCELLED})


@dataclass(slots=True)
class Job:
    """A batch job as the site's batch system reports it.

    ``walltime`` is the user's requested limit (what schedulers plan with);
    ``runtime`` is the actual run time when known (simulator, finished jobs).
    ``attributes`` holds what the batch system says beyond these fields (partition,
    QOS, account, requested VM type ...), keyed as in :mod:`elasticsite.attributes`;
    jobs without any share one empty, read-only mapping.

    A finished job's end: ``exit_code`` is its exit status when it exited (0-255, or a
    batch system's own negative code), ``signal`` the signal that killed it, and
    ``reason`` why it ended or waits again in words ("command not found", "walltime
    exceeded", "node lost"). ``attempts`` counts the times it started.
    """

    id: str
    cores: int
    walltime: float
    submitted_at: float
    state: JobState = JobState.QUEUED
    command: str = ""
    runtime: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    node: str | None = None
    exit_code: int | None = None
    priority: int = 0
    user: str = ""
    attributes: Mapping[str, str] = EMPTY_ATTRIBUTES
    signal: int | None = None
    reason: str = ""
    attempts: int = 0


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``signal 99`` for a number this system does not name."""
    try:
        return signal_module.Signals(number).name
    except ValueError:
        return f"signal {number}"


def outcome(job: Job) -> str:
    """How a job ended or why it waits again, in a few words: ``exit 127: command not
    found``, ``killed by signal 9 (SIGKILL): walltime exceeded``, ``node lost``; ``""``
    when there is nothing to say (a job that waits, runs, or completed)."""
    parts = []
    if job.signal is not None:
        parts.append(f"killed by signal {job.signal} ({signal_name(job.signal)})")
    elif job.exit_code is not None and (job.exit_code or job.state is JobState.FAILED):
        parts.append(f"exit {job.exit_code}")
    if job.reason:
        parts.append(job.reason)
    return ": ".join(parts)


def state_text(job: Job) -> str:
    """The job's state as a person reads it: ``failed (exit 127: command not found)``,
    ``requeued (attempt 2: node w-3 removed)``, ``running``."""
    said = outcome(job)
    if job.state is JobState.REQUEUED:
        runs = f"after {job.attempts} run{'s' if job.attempts != 1 else ''}"
        return f"requeued ({runs}: {said})" if said else f"requeued ({runs})"
    if said and (job.state.finished or job.state in (JobState.HELD, JobState.UNKNOWN)):
        return f"{job.state.value} ({said})"
    return job.state.value
