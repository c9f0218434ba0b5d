"""One PBS or Torque job's detail, from ``qstat -f -F json -x ID`` or ``qstat -f -x ID``.

OpenPBS and PBS Professional keep finished jobs while the server's
``job_history_enable`` is on (``-x`` shows them, state ``F``); Torque keeps completed
jobs ``keep_completed`` seconds (state ``C``). States and exit statuses go through
:mod:`~elasticsite.batch.pbs_states`. Output paths are the server's
``Output_Path``/``Error_Path`` without their ``host:``; with ``Join_Path`` ``oe``
stderr goes to the stdout file (``eo`` the other way). Each reader is a pure function
of the command's output, tested against recorded output (``tests/batch/fixtures/pbs``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo

from elasticsite.batch.base import BatchError, JobDetail
from elasticsite.batch.pbs_output import (
    as_int,
    exec_nodes,
    job_attributes,
    load_json,
    load_xml,
    parse_walltime,
    request_cores,
    runs,
    time_zone,
    timestamp,
    xml_value,
)
from elasticsite.batch.pbs_states import FINISHED, ending, job_state
from elasticsite.model import Job, JobState

__all__ = ["detail_from_json", "detail_from_xml"]


def detail_from_json(text: str, job_id: str, *, timezone: str = "UTC") -> JobDetail:
    """Job ``job_id`` (its full id or just its number) of ``qstat -f -F json -x``."""
    data = load_json(text, "qstat")
    jobs = data.get("Jobs", {})
    if not isinstance(jobs, dict):
        raise BatchError("qstat JSON: 'Jobs' is not an object")
    for full, attrs in jobs.items():
        if job_id in (full, full.split(".")[0]) and isinstance(attrs, Mapping):
            return _detail(str(full), attrs, time_zone(timezone))
    raise BatchError(f"qstat: job {job_id} is not in the output")


def detail_from_xml(text: str, job_id: str, *, timezone: str = "UTC") -> JobDetail:
    """Job ``job_id`` of Torque's ``qstat -f -x``."""
    root = load_xml(text, "qstat -x")
    for element in [] if root is None else root.findall("Job"):
        attrs = xml_value(element)
        full = str(attrs.get("Job_Id", "")) if isinstance(attrs, dict) else ""
        if full and job_id in (full, full.split(".")[0]):
            return _detail(full, attrs, time_zone(timezone))
    raise BatchError(f"qstat -x: job {job_id} is not in the output")


def _path(value: Any) -> str:
    """``host:/path`` as ``/path``."""
    text = str(value or "")
    host, sep, path = text.partition(":")
    return path if sep and "/" not in host else text


def _detail(job_id: str, attrs: Mapping[str, Any], zone: ZoneInfo) -> JobDetail:
    code = str(attrs.get("job_state", "")).strip()
    started_count = runs(attrs)
    state, reason = job_state(code, started_count)
    status_text = attrs.get("Exit_status", attrs.get("exit_status"))
    status = None if status_text in (None, "") else as_int(status_text)
    exit_code = signal = None
    if code in FINISHED:  # its exit status tells how it ended
        substate = as_int(attrs.get("substate"), -1)
        state, exit_code, signal, reason = ending(status, substate)
    elif state.waiting or state is JobState.UNKNOWN:
        reason = reason or str(attrs.get("comment") or "")
    resources = attrs.get("Resource_List") or {}
    if not isinstance(resources, Mapping):
        resources = {}
    walltime = parse_walltime(resources.get("walltime"))
    ran = bool(attrs.get("exec_host") or attrs.get("exec_vnode")) and not state.waiting
    nodes = exec_nodes(attrs) if ran else []
    started = timestamp(attrs.get("stime") or attrs.get("start_time"), zone) if ran else None
    ended = None
    if state.finished:
        ended = timestamp(attrs.get("obittime") or attrs.get("comp_time") or attrs.get("mtime"),
                          zone)  # fmt: skip
    owner = str(attrs.get("Job_Owner") or "").split("@")[0] or str(attrs.get("euser") or "")
    stdout, stderr = _path(attrs.get("Output_Path")), _path(attrs.get("Error_Path"))
    join = str(attrs.get("Join_Path") or "n")
    if join == "oe":
        stderr = stdout
    elif join == "eo":
        stdout = stderr
    job = Job(
        id=job_id,
        cores=request_cores(resources),
        walltime=math.inf if walltime is None else walltime,
        submitted_at=timestamp(attrs.get("qtime") or attrs.get("ctime"), zone) or 0.0,
        state=state,
        command=str(attrs.get("Job_Name") or ""),
        started_at=started,
        finished_at=ended,
        runtime=ended - started if ended and started else None,
        node=nodes[0] if nodes else None,
        exit_code=exit_code,
        priority=as_int(attrs.get("Priority"), 0),
        user=owner,
        attributes=job_attributes(attrs, code, nodes, resources),
        signal=signal,
        reason=reason,
        attempts=started_count,
    )
    group = str(attrs.get("egroup") or attrs.get("group_list") or "")
    variables = attrs.get("Variable_List")
    workdir = str(variables.get("PBS_O_WORKDIR", "")) if isinstance(variables, Mapping) else ""
    return JobDetail.of(
        job, native_state=code, group=group, stdout=stdout, stderr=stderr,
        directory=str(attrs.get("jobdir") or workdir),
    )  # fmt: skip
