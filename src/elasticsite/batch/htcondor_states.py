"""HTCondor's job states: one table from ``JobStatus`` to ours, and how a job ended.

``JobStatus`` goes through :data:`JOB_STATUSES`; a number not in it is UNKNOWN, warned
once, never an error. An idle job that started before (``NumJobStarts`` or
``JobRunCount`` > 0) is REQUEUED. A completed job (4) is told apart
by :func:`ending`: ``ExitBySignal`` and ``ExitSignal``, else ``ExitCode`` (0
completed, any other failed). A held job's reason is its ``HoldReason``, a removed
one's its ``RemoveReason``. docs/jobs.md has the table.
"""

from __future__ import annotations

import logging

from elasticsite.batch.base import exit_reason
from elasticsite.model import JobState

__all__ = ["COMPLETED", "JOB_STATUSES", "ending", "job_status"]

log = logging.getLogger("elasticsite.batch.htcondor")

COMPLETED = 4
JOB_STATUSES: dict[int, tuple[JobState, str]] = {
    1: (JobState.QUEUED, ""),  # Idle
    2: (JobState.RUNNING, ""),  # Running
    3: (JobState.CANCELLED, ""),  # Removed
    4: (JobState.COMPLETED, ""),  # Completed: ending() tells how
    5: (JobState.HELD, ""),  # Held
    6: (JobState.RUNNING, "transferring its output"),  # Transferring Output
    7: (JobState.RUNNING, "suspended"),  # Suspended
}
"""Every ``JobStatus`` -> ours and the reason it implies."""
_warned: set[int] = set()


def job_status(status: int, runs: int = 0) -> tuple[JobState, str]:
    """Our state for ``JobStatus`` ``status`` (``runs``: times it started) and the reason
    it implies; an unknown number is UNKNOWN, warned once."""
    found = JOB_STATUSES.get(status)
    if found is None:
        if status not in _warned:
            _warned.add(status)
            log.warning(
                "unknown HTCondor JobStatus %d: shown as unknown (see docs/jobs.md)", status
            )
        return JobState.UNKNOWN, f"HTCondor JobStatus {status}"
    if found[0] is JobState.QUEUED and runs:
        return JobState.REQUEUED, found[1]
    return found


def ending(
    by_signal: bool, signal: int | None, code: int | None
) -> tuple[JobState, int | None, int | None, str]:
    """A completed job's (state, exit code, signal, reason)."""
    if by_signal and signal:
        return JobState.FAILED, None, signal, ""
    if code == 0:
        return JobState.COMPLETED, 0, None, ""
    if code is None:
        return JobState.FAILED, None, None, "its exit code is not known"
    return JobState.FAILED, code, None, exit_reason(code)
