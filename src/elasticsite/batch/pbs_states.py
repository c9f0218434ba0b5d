"""PBS and Torque job states and exit statuses: one table each, from native to ours.

A job's one-letter ``job_state`` goes through :data:`JOB_STATES`; a letter not in it
is UNKNOWN, warned once, never an error. A queued job that ran before (``run_count``
or Torque's ``start_count`` > 0) is REQUEUED. A finished job (``F``, ``X``; Torque's
``C``) is told apart by its ``Exit_status`` (:func:`ending`): 0 completed; 1-255 the
script's exit code; 256 + N killed by signal N; a negative value one of PBS's own
``JOB_EXEC_*`` codes (:data:`EXEC_CODES`: the job could not start, or was killed for
a resource limit); no exit status at all, or OpenPBS's substate 91, deleted
(cancelled). docs/jobs.md has the tables.
"""

from __future__ import annotations

import logging

from elasticsite.batch.base import NODE_LOST, WALLTIME_EXCEEDED, exit_reason
from elasticsite.model import JobState

__all__ = ["EXEC_CODES", "FINISHED", "JOB_STATES", "ending", "job_state"]

log = logging.getLogger("elasticsite.batch.pbs")

JOB_STATES: dict[str, tuple[JobState, str]] = {
    "Q": (JobState.QUEUED, ""),
    "W": (JobState.QUEUED, "waiting for its start time"),
    "T": (JobState.QUEUED, "being moved to another queue"),
    "H": (JobState.HELD, ""),
    "R": (JobState.RUNNING, ""),
    "E": (JobState.RUNNING, "exiting"),
    "B": (JobState.RUNNING, ""),  # an array job whose subjobs have begun
    "S": (JobState.RUNNING, "suspended"),
    "U": (JobState.RUNNING, "suspended: its workstation is busy"),
    "F": (JobState.COMPLETED, ""),  # finished (job history): the exit status says how
    "X": (JobState.COMPLETED, ""),  # a finished subjob of an array
    "C": (JobState.COMPLETED, ""),  # Torque: completed, kept for keep_completed seconds
    "M": (JobState.CANCELLED, "moved to another PBS server"),
}
"""Every native one-letter job state -> ours and the reason it implies."""
FINISHED = frozenset({"F", "X", "C"})
"""The letters of a job that ended: :func:`ending` settles its state."""

EXEC_CODES: dict[int, str] = {
    -1: "could not start (before its files were staged)",
    -2: "could not start (after its files were staged)",
    -3: "could not start (PBS retries it)",
    -4: "aborted when its node's MoM started",
    -5: "aborted when its node's MoM started",
    -6: "aborted when its node's MoM started",
    -7: "its restart failed",
    -10: "its user or group is not valid on the node",
    -11: "requeued to run again",
    -12: "checkpointed and killed",
    -13: "its user's password was wrong",
    -14: "requeued: a sister node failed",
    -15: "requeued to restart from its checkpoint",
    -16: "a hook rejected it; requeued",
    -17: "a hook rejected it",
    -18: "a hook requeued it",
    -19: "a hook deleted it",
    -20: f"{NODE_LOST} (its mother superior did not answer)",
    -21: "a security breach in PBS's directory",
    -22: "a hook failed or timed out",
    -23: "no Kerberos credentials",
    -24: "killed: used more CPUs than asked (burst)",
    -25: "killed: used more CPUs than asked",
    -26: "killed: used more virtual memory than asked",
    -27: "killed: used more memory than asked",
    -28: "killed: used more CPU time than asked",
    -29: WALLTIME_EXCEEDED,
    -30: "could not join its sister nodes",
}
"""PBS's negative ``JOB_EXEC_*`` exit statuses (OpenPBS ``src/include/job.h``; Torque
shares -1 to -13) and what each means."""

SIGNALLED = 256
"""An exit status above this is 256 + the signal that killed the job."""
DELETED_SUBSTATE = 91
"""OpenPBS's substate of a finished job that was deleted (``qdel``)."""
_warned: set[str] = set()


def job_state(code: str, runs: int = 0) -> tuple[JobState, str]:
    """Our state for PBS's one-letter ``code`` (and ``runs``, its run count) and the
    reason it implies; an unknown letter is UNKNOWN, warned once. A finished job's
    state is settled by :func:`ending`."""
    found = JOB_STATES.get(code)
    if found is None:
        if code not in _warned:
            _warned.add(code)
            log.warning("unknown PBS job state %r: shown as unknown (see docs/jobs.md)", code)
        return JobState.UNKNOWN, f"PBS state {code or '(none)'}"
    if found[0] is JobState.QUEUED and runs and code == "Q":
        return JobState.REQUEUED, found[1]
    return found


def ending(
    status: int | None, substate: int | None
) -> tuple[JobState, int | None, int | None, str]:
    """A finished job's (state, exit code, signal, reason) from its exit status and
    OpenPBS substate."""
    if substate == DELETED_SUBSTATE or status is None:
        sig = status - SIGNALLED if status is not None and status > SIGNALLED else None
        return JobState.CANCELLED, None, sig, ""
    if status > SIGNALLED:
        return JobState.FAILED, None, status - SIGNALLED, ""
    if status < 0:
        return JobState.FAILED, status, None, EXEC_CODES.get(status, f"PBS exit status {status}")
    if status == 0:
        return JobState.COMPLETED, 0, None, ""
    return JobState.FAILED, status, None, exit_reason(status)
