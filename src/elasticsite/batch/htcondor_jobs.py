"""One HTCondor job's detail, from its job ad in the schedd's queue or its history.

States go through :mod:`~elasticsite.batch.htcondor_states`. A job leaves the queue
when it completes or is removed, and stays in the schedd's history (``condor_history``)
as long as the history files keep it. Output paths are the ad's ``Out`` and ``Err``,
relative to ``Iwd``; the job's own event log (``UserLog``) is in its notes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from elasticsite.batch.base import JobDetail
from elasticsite.batch.htcondor_output import (
    ad_float,
    ad_int,
    ad_value,
    job_attributes,
    starts,
)
from elasticsite.batch.htcondor_states import COMPLETED, ending, job_status
from elasticsite.model import Job, JobState

__all__ = ["detail_from_ad"]


def _path(ad: Mapping[str, Any], key: str) -> str:
    value = str(ad_value(ad, key, "") or "")
    if not value or value == "/dev/null":
        return value
    iwd = str(ad_value(ad, "Iwd", "") or "")
    return os.path.join(iwd, value) if iwd and not os.path.isabs(value) else value


def _host(ad: Mapping[str, Any], key: str) -> str | None:
    """``slot1_2@node7`` -> ``node7``."""
    value = str(ad_value(ad, key, "") or "")
    return value.rsplit("@", 1)[-1] or None


def detail_from_ad(ad: Mapping[str, Any], *, from_history: bool = False) -> JobDetail:
    """The detail of the job whose ad (queue or history) is ``ad``."""
    status = ad_int(ad, "JobStatus", -1)
    runs = starts(ad)
    state, reason = job_status(status, runs)
    code = signal = None
    if status == COMPLETED:
        exit_code = ad_value(ad, "ExitCode")
        state, code, signal, reason = ending(
            bool(ad_value(ad, "ExitBySignal", False)),
            ad_int(ad, "ExitSignal", 0) or None,
            None if exit_code is None else ad_int(ad, "ExitCode"),
        )
    elif state is JobState.HELD:
        reason = str(ad_value(ad, "HoldReason", "") or "")
    elif state is JobState.CANCELLED:
        reason = str(ad_value(ad, "RemoveReason", "") or "")
    running = state is JobState.RUNNING
    started = ad_float(ad, "JobCurrentStartDate") or ad_float(ad, "JobStartDate")
    ended = ad_float(ad, "CompletionDate") or ad_float(ad, "EnteredCurrentStatus")
    ended = ended if state.finished else None
    started = started if runs and not state.waiting else None
    node = _host(ad, "RemoteHost") if running else _host(ad, "LastRemoteHost")
    allowed = ad_float(ad, "AllowedExecuteDuration")
    minutes = ad_float(ad, "MaxWallTimeMins")
    walltime = allowed or (minutes * 60.0 if minutes else math.inf)
    command = f"{ad_value(ad, 'Cmd', '') or ''} {ad_value(ad, 'Arguments', '') or ''}".strip()
    job = Job(
        id=f"{ad_int(ad, 'ClusterId')}.{ad_int(ad, 'ProcId')}",
        cores=max(ad_int(ad, "RequestCpus", 1), 1),
        walltime=walltime,
        submitted_at=ad_float(ad, "QDate") or 0.0,
        state=state,
        command=command,
        started_at=started,
        finished_at=ended,
        runtime=ended - started if ended and started else None,
        node=node if started else None,
        exit_code=code,
        priority=ad_int(ad, "JobPrio", 0),
        user=str(ad_value(ad, "Owner", "") or ""),
        attributes=job_attributes(ad),
        signal=signal,
        reason=reason,
        attempts=runs,
    )
    notes = ["from the schedd's history (the job left the queue)"] if from_history else []
    if _path(ad, "UserLog"):
        notes.append(f"its HTCondor event log: {_path(ad, 'UserLog')}")
    return JobDetail.of(
        job, native_state=str(status), stdout=_path(ad, "Out"), stderr=_path(ad, "Err"),
        directory=str(ad_value(ad, "Iwd", "") or ""), notes=tuple(notes),
    )  # fmt: skip
