"""Reading PBS output: jobs from ``qstat -f``, nodes from ``pbsnodes``, in both formats.

OpenPBS and PBS Professional print JSON (``qstat -f -F json``, ``pbsnodes -a -F json``);
Torque prints XML (``qstat -f -x``, ``pbsnodes -x``), or nothing at all when the
server has no job or node. Every reader here is a pure function of a command's output,
tested against recorded output of several versions (``tests/batch/fixtures/pbs``).

Nodes and their state table are read in :mod:`~elasticsite.batch.pbs_nodes`, the
values of both formats in :mod:`~elasticsite.batch.pbs_values`; this module offers
their names too. Malformed output is one :class:`BatchError` naming the command.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from elasticsite import attributes
from elasticsite.batch.base import BatchError
from elasticsite.batch.pbs_nodes import (
    NODE_STATES,
    node_state,
    parse_pbsnodes_json,
    parse_pbsnodes_xml,
)
from elasticsite.batch.pbs_states import job_state
from elasticsite.batch.pbs_values import (
    as_int,
    load_json,
    load_xml,
    parse_walltime,
    request_cores,
    time_zone,
    timestamp,
    xml_value,
)
from elasticsite.model import Job, JobState

__all__ = [
    "NODE_STATES",
    "STATE_ATTRIBUTE",
    "PbsJob",
    "as_int",
    "exec_nodes",
    "job_attributes",
    "load_json",
    "load_xml",
    "node_state",
    "parse_pbsnodes_json",
    "parse_pbsnodes_xml",
    "parse_qstat_json",
    "parse_qstat_xml",
    "parse_walltime",
    "request_cores",
    "runs",
    "time_zone",
    "timestamp",
    "xml_value",
]


# -- jobs --------------------------------------------------------------------------------


@dataclass(slots=True)
class PbsJob:
    """One queued or running job and its one-letter PBS state (``Q``, ``R``, ``E`` ...).

    The job's queue, account and exec hosts are in its
    :attr:`~elasticsite.model.Job.attributes` (the queue as ``partition``).
    """

    job: Job
    native_state: str


_QUEUED_CODES = {"Q"}
"""Waiting for cores. Held (H), waiting for a start time (W) and array parents are not."""
_RUNNING_CODES = {"R", "E"}
"""Running, or exiting (its cores are still taken). Every other letter is left out of
a snapshot; one the state table (:mod:`~elasticsite.batch.pbs_states`) lacks is
warned of once."""


def exec_nodes(attrs: Mapping[str, Any]) -> list[str]:
    """The hosts a running job holds, in order, without repeats."""
    host = str(attrs.get("exec_host") or "")
    if host:
        names = [part.split("/")[0] for part in host.split("+")]
    else:
        names = re.findall(r"\(([^:)\[]+)", str(attrs.get("exec_vnode") or ""))
    return list(dict.fromkeys(n for n in names if n))


def _node_requests(resources: Mapping[str, Any]) -> tuple[str, str]:
    """The node properties a job asks for (Torque ``nodes=1:ppn=2:PROP``) and the
    ``vm_type`` it selects (OpenPBS ``select=1:ncpus=2:vm_type=NAME``)."""
    properties: list[str] = []
    vm_type = str(resources.get("vm_type") or "")
    for spec in str(resources.get("nodes") or "").split("+"):
        for part in spec.split(":")[1:]:
            if part and "=" not in part:
                properties.append(part)
    for chunk in str(resources.get("select") or "").split("+"):
        for part in chunk.split(":"):
            key, _, value = part.partition("=")
            if key == "vm_type" and value:
                vm_type = vm_type or value
    return ",".join(dict.fromkeys(properties)), vm_type


def runs(attrs: Mapping[str, Any]) -> int:
    """How many times a job started (``run_count``; Torque's ``start_count``)."""
    return as_int(attrs.get("run_count"), as_int(attrs.get("start_count"), 0))


def job_attributes(
    attrs: Mapping[str, Any], code: str, nodes: Sequence[str], resources: Mapping[str, Any]
) -> Mapping[str, str]:
    features, vm_type = _node_requests(resources)
    found = {
        attributes.FEATURES: features,
        attributes.VM_TYPE: vm_type,
        attributes.PARTITION: str(attrs.get("queue") or ""),
        attributes.ACCOUNT: str(attrs.get("Account_Name") or ""),
        attributes.NAME: str(attrs.get("Job_Name") or ""),
        attributes.NODES: ",".join(nodes),
        STATE_ATTRIBUTE: code,
    }
    return {k: v for k, v in found.items() if v and v.isprintable()}


STATE_ATTRIBUTE = "pbs.state"
"""The job's one-letter PBS state."""


def _job(
    job_id: str, attrs: Mapping[str, Any], zone: ZoneInfo, default_walltime: float
) -> PbsJob | None:
    code = str(attrs.get("job_state", "")).strip()
    state, _ = job_state(code, runs(attrs))
    if code not in _QUEUED_CODES and code not in _RUNNING_CODES:
        return None
    resources = attrs.get("Resource_List") or {}
    if not isinstance(resources, Mapping):
        raise BatchError(f"PBS job {job_id}: Resource_List is not a mapping")
    walltime = parse_walltime(resources.get("walltime"))
    submitted = timestamp(attrs.get("qtime") or attrs.get("ctime"), zone)
    started = timestamp(attrs.get("stime") or attrs.get("start_time"), zone)
    owner = str(attrs.get("Job_Owner") or attrs.get("euser") or "")
    nodes = exec_nodes(attrs) if state is JobState.RUNNING else []
    job = Job(
        id=job_id,
        cores=request_cores(resources),
        walltime=default_walltime if walltime is None else walltime,
        submitted_at=submitted or 0.0,
        state=state,
        command=str(attrs.get("Job_Name") or ""),
        started_at=started if state is JobState.RUNNING else None,
        node=nodes[0] if nodes else None,
        priority=as_int(attrs.get("Priority"), 0),
        user=owner.split("@")[0],
        attributes=job_attributes(attrs, code, nodes, resources),
    )
    return PbsJob(job, code)


def _jobs(
    entries: Iterable[tuple[str, Any]], zone: ZoneInfo, default_walltime: float
) -> list[PbsJob]:
    result = []
    for job_id, attrs in entries:
        if not isinstance(attrs, Mapping):
            raise BatchError(f"qstat: job {job_id} is not an object")
        job = _job(job_id, attrs, zone, default_walltime)
        if job is not None:
            result.append(job)
    return result


def parse_qstat_json(
    text: str, *, timezone: str = "UTC", default_walltime: float = 3600.0
) -> list[PbsJob]:
    """Queued and running jobs of ``qstat -f -F json``, in listed order.

    Finished, held and waiting jobs are left out. Malformed output raises one
    :class:`BatchError` saying what was wrong.
    """
    zone = time_zone(timezone)
    data = load_json(text, "qstat")
    jobs = data.get("Jobs", {})  # absent when the server has no job
    if not isinstance(jobs, dict):
        raise BatchError("qstat JSON: 'Jobs' is not an object")
    return _jobs(jobs.items(), zone, default_walltime)


def parse_qstat_xml(
    text: str, *, timezone: str = "UTC", default_walltime: float = 3600.0
) -> list[PbsJob]:
    """Queued and running jobs of Torque's ``qstat -f -x``, in listed order (as above)."""
    zone = time_zone(timezone)
    root = load_xml(text, "qstat -x")
    entries = []
    for element in [] if root is None else root.findall("Job"):
        attrs = xml_value(element)
        job_id = attrs.get("Job_Id") if isinstance(attrs, dict) else None
        if not job_id:
            raise BatchError("qstat -x: a <Job> without <Job_Id>")
        entries.append((str(job_id), attrs))
    return _jobs(entries, zone, default_walltime)
