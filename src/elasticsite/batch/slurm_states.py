"""Slurm's job states: one table from every native state to ours.

A native state is a base word (``PENDING``, ``RUNNING``, ``TIMEOUT`` ...) and, from
Slurm 23.02, flags after it (``REQUEUED``, ``COMPLETING`` ...). :data:`JOB_STATES` maps
each, with the reason an ended one implies (TIMEOUT: walltime exceeded, NODE_FAIL: node
lost); a base word not in it is UNKNOWN, warned once, never an error. A pending job
that ran before (``Restarts`` > 0, or the REQUEUED flag) is REQUEUED; a held one (a
``JobHeld...`` reason, or priority 0) HELD. docs/jobs.md has the table.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from elasticsite.batch.base import NODE_LOST, PREEMPTED, WALLTIME_EXCEEDED
from elasticsite.model import JobState

__all__ = ["JOB_STATES", "job_state", "translate"]

log = logging.getLogger("elasticsite.batch.slurm")

JOB_STATES: dict[str, tuple[JobState, str]] = {
    # waiting
    "PENDING": (JobState.QUEUED, ""),
    "CONFIGURING": (JobState.QUEUED, ""),  # given nodes that are still booting
    "REQUEUED": (JobState.REQUEUED, ""),
    "REQUEUE_FED": (JobState.REQUEUED, ""),
    "REQUEUE_HOLD": (JobState.HELD, ""),
    "SPECIAL_EXIT": (JobState.HELD, "requeued held after a special exit code"),
    "RESV_DEL_HOLD": (JobState.HELD, "its reservation was deleted"),
    # started (cores held)
    "RUNNING": (JobState.RUNNING, ""),
    "COMPLETING": (JobState.RUNNING, ""),
    "SUSPENDED": (JobState.RUNNING, "suspended"),
    "STOPPED": (JobState.RUNNING, "stopped"),
    "RESIZING": (JobState.RUNNING, ""),
    "SIGNALING": (JobState.RUNNING, ""),
    "STAGE_OUT": (JobState.RUNNING, ""),
    # ended
    "COMPLETED": (JobState.COMPLETED, ""),
    "CANCELLED": (JobState.CANCELLED, ""),
    "FAILED": (JobState.FAILED, ""),
    "TIMEOUT": (JobState.FAILED, WALLTIME_EXCEEDED),
    "NODE_FAIL": (JobState.FAILED, NODE_LOST),
    "BOOT_FAIL": (JobState.FAILED, "its node failed to boot"),
    "DEADLINE": (JobState.FAILED, "its deadline passed"),
    "OUT_OF_MEMORY": (JobState.FAILED, "out of memory"),
    "PREEMPTED": (JobState.FAILED, PREEMPTED),  # preempted and not requeued
    "REVOKED": (JobState.CANCELLED, "it runs on another cluster of the federation"),
}
"""Every native job state (the first word, and the flags that change it) -> ours and
the reason it implies."""

_HOLD_FLAGS = ("REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD")
_warned: set[str] = set()


def job_state(words: Sequence[str], restarts: int = 0, held: bool = False) -> JobState:
    """Our state for Slurm's state ``words`` (base first, then flags), the job's
    ``restarts`` and whether it is held; an unknown base is UNKNOWN, warned once
    (:func:`translate` gives the reason it implies too)."""
    return translate(words, restarts, held)[0]


def translate(words: Sequence[str], restarts: int = 0, held: bool = False) -> tuple[JobState, str]:
    """:func:`job_state` and the reason the native state implies (``""`` if none)."""
    upper = [w.upper() for w in words if w]
    base = upper[0] if upper else ""
    if base not in JOB_STATES:
        if base not in _warned:
            _warned.add(base)
            log.warning("slurm: unknown job state %r: shown as unknown (see docs/jobs.md)", base)
        return JobState.UNKNOWN, f"slurm state {base or '(none)'}"
    state, reason = JOB_STATES[base]
    hold_flag = next((f for f in upper[1:] if f in _HOLD_FLAGS), None)
    if state.waiting and hold_flag is not None:
        return JOB_STATES[hold_flag]
    if state is JobState.QUEUED:
        if held:
            return JobState.HELD, reason
        if restarts or "REQUEUED" in upper[1:]:
            return JobState.REQUEUED, reason
    return state, reason
