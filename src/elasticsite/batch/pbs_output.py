"""Reading PBS output: jobs from ``qstat -f``, nodes from ``pbsnodes``, in both formats.

OpenPBS and PBS Professional print JSON (``qstat -f -F json``, ``pbsnodes -a -F json``);
Torque prints XML (``qstat -f -x``, ``pbsnodes -x``), or nothing at all when the
server has no job or node. Every reader here is a pure function of a command's output,
tested against recorded output of several versions (``tests/batch/fixtures/pbs``).

Native node states translate through one table, :data:`NODE_STATES`; a node reporting
several states (``"down,offline"``) takes the strongest by :data:`_PRECEDENCE`. A state
this module does not know becomes :attr:`NodeState.UNKNOWN` with one warning per word.
Malformed output is one :class:`BatchError` naming the command.
"""

from __future__ import annotations

import calendar
import json
import logging
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from elasticsite import attributes
from elasticsite.batch.base import BatchError, Node, NodeState
from elasticsite.batch.pbs_states import job_state
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

# The adapter's logger: a site filtering PBS messages names one logger, whichever
# module of the adapter speaks.
log = logging.getLogger("elasticsite.batch.pbs")

# -- the node state table ----------------------------------------------------------------

NODE_STATES: dict[str, NodeState] = {
    # up and accepting work: IDLE, or BUSY when jobs are listed on the node
    "free": NodeState.IDLE,
    "time-shared": NodeState.IDLE,  # Torque
    # up and (partly) in use
    "job-busy": NodeState.BUSY,
    "job-exclusive": NodeState.BUSY,
    "job-sharing": NodeState.BUSY,
    "busy": NodeState.BUSY,  # load above the MoM's ideal_load
    "resv-exclusive": NodeState.BUSY,  # held by an advance reservation
    "reserve": NodeState.BUSY,  # Torque
    # takes no new job: DRAINED, or DRAINING while jobs are still listed on it
    "offline": NodeState.DRAINED,
    "maintenance": NodeState.DRAINED,
    # not reporting (yet, or any more)
    "down": NodeState.DOWN,
    "state-unknown": NodeState.DOWN,
    "unknown": NodeState.DOWN,  # Torque's spelling
    "stale": NodeState.DOWN,
    "unresolvable": NodeState.DOWN,
    "provisioning": NodeState.DOWN,
    "wait-provisioning": NodeState.DOWN,
    "initializing": NodeState.DOWN,
    "sleep": NodeState.DOWN,  # powered down by the PBS power hook
    "mom-list-not-sent": NodeState.DOWN,  # Torque, a MoM that just started
}
"""Every native PBS/Torque node state word (lower case) and what it means to the manager."""

_PRECEDENCE = (NodeState.DOWN, NodeState.UNKNOWN, NodeState.DRAINED, NodeState.BUSY)
"""In a combined state the first of these present wins; otherwise the node is IDLE."""

_warned: set[str] = set()


def node_state(native: str, running_jobs: int) -> NodeState:
    """Translate a native (possibly comma-separated) state; jobs refine IDLE and DRAINED."""
    found: set[NodeState] = set()
    for word in (w.strip().lower() for w in native.split(",")):
        if not word:
            continue
        state = NODE_STATES.get(word)
        if state is None:
            if word not in _warned:
                _warned.add(word)
                log.warning("unknown PBS node state %r: reported as unknown", word)
            state = NodeState.UNKNOWN
        found.add(state)
    if not found:
        return NodeState.UNKNOWN
    for state in _PRECEDENCE:
        if state in found:
            if state is NodeState.DRAINED and running_jobs:
                return NodeState.DRAINING
            return state
    return NodeState.BUSY if running_jobs else NodeState.IDLE


# -- values ------------------------------------------------------------------------------


def parse_walltime(text: Any) -> float | None:
    """``[[[D:]HH:]MM:]SS`` (or plain seconds) to seconds; ``None`` when absent."""
    if text is None or text == "":
        return None
    if isinstance(text, int | float):
        return float(text)
    parts = str(text).strip().split(":")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        raise BatchError(f"PBS walltime {text!r} is not [[HH:]MM:]SS") from None
    seconds = 0.0
    for factor, value in zip((1, 60, 3600, 86400), reversed(numbers), strict=False):
        seconds += factor * value
    return seconds


def as_int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def request_cores(resources: Mapping[str, Any]) -> int:
    """Cores a job asked for: ``ncpus``, else the sum over ``select=``, else ``nodes=N:ppn=M``."""
    ncpus = as_int(resources.get("ncpus"), 0)
    if ncpus > 0:
        return ncpus
    select = str(resources.get("select") or "")
    if select:
        total = 0
        for chunk in select.split("+"):
            fields = chunk.split(":")
            count = as_int(fields[0], 1) if fields[0].isdigit() else 1
            per = next((as_int(f[6:], 1) for f in fields if f.startswith("ncpus=")), 1)
            total += count * per
        return max(total, 1)
    nodes = str(resources.get("nodes") or "")
    if nodes:
        total = 0
        for spec in nodes.split("+"):
            fields = spec.split(":")
            count = as_int(fields[0], 1) if fields[0].isdigit() else 1
            per = next((as_int(f[4:], 1) for f in fields if f.startswith("ppn=")), 1)
            total += count * per
        return max(total, 1)
    return 1


def time_zone(name: str) -> ZoneInfo:
    """The server's zone by IANA name; an unknown name is one :class:`BatchError`."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BatchError(
            f"unknown time zone {name!r} (an IANA name such as 'Europe/Paris')"
        ) from None


def timestamp(value: Any, zone: ZoneInfo) -> float | None:
    """Epoch seconds (Torque) or PBS's ``"Wed Apr 14 23:34:17 2021"`` in the server's zone."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float) or str(value).strip().isdigit():
        return float(value)
    try:
        parsed = time.strptime(str(value).strip(), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        raise BatchError(f"PBS time {value!r} is not like 'Wed Apr 14 23:34:17 2021'") from None
    naive = calendar.timegm(parsed)
    # the zone's offset at that instant (DST-aware), found from the UTC reading
    offset = datetime.fromtimestamp(naive, zone).utcoffset()
    return float(naive - (offset.total_seconds() if offset else 0.0))


# -- the two formats ---------------------------------------------------------------------


def xml_value(element: ET.Element) -> Any:
    if len(element):
        return {child.tag: xml_value(child) for child in element}
    return (element.text or "").strip()


def load_json(text: str, what: str) -> dict[str, Any]:
    if not text.strip():
        raise BatchError(f"{what} printed nothing (expected JSON from `-F json`)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BatchError(
            f"{what} printed malformed JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    if not isinstance(data, dict):
        raise BatchError(f"{what} printed JSON that is not an object")
    return data


def load_xml(text: str, what: str) -> ET.Element | None:
    """The ``<Data>`` root, or ``None`` when the command printed nothing (no jobs/nodes)."""
    text = text.strip()
    if not text:
        return None
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise BatchError(f"{what} printed malformed XML ({exc})") from None
    if root.tag != "Data":
        raise BatchError(f"{what} printed XML rooted at <{root.tag}>, expected <Data>")
    return root


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


# -- nodes -------------------------------------------------------------------------------

_SLOT_PREFIX = re.compile(r"^\s*[\d,\-]+/")


def _job_cores(entries: Iterable[str]) -> dict[str, int]:
    """Job id -> cores held, from PBS ``jobs`` lists or Torque ``0-3/12.server, 5/13.server``."""
    cores: dict[str, int] = {}
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        prefix = _SLOT_PREFIX.match(entry)
        if prefix:  # Torque: "<cores>/<job id>"
            count = 0
            for part in prefix.group(0)[:-1].split(","):
                low, _, high = part.partition("-")
                count += (as_int(high) - as_int(low) + 1) if high else 1
            job_id = entry[prefix.end() :]
        else:  # PBS: "<job id>" or "<job id>/<index>"
            job_id, _, _ = entry.partition("/")
            count = 1
        cores[job_id] = cores.get(job_id, 0) + count
    return cores


def _node(
    name: str, cores: int, state: str, held: Mapping[str, int], used: int, reason: Any
) -> Node:
    running = len(held)
    translated = node_state(str(state), running)
    free = max(cores - used, 0) if translated in (NodeState.IDLE, NodeState.BUSY) else 0
    return Node(str(name), cores, translated, running, free, str(reason or ""))


def _rectime(status: Any) -> float | None:
    match = re.search(r"(?:^|,)rectime=(\d+)", str(status or ""))
    return float(match.group(1)) if match else None


def parse_pbsnodes_json(text: str) -> list[Node]:
    """Every node of ``pbsnodes -a -F json``, states through the table."""
    data = load_json(text, "pbsnodes")
    listed = data.get("nodes", {})
    if not isinstance(listed, dict):
        raise BatchError("pbsnodes JSON: 'nodes' is not an object")
    nodes = []
    for name, attrs in listed.items():
        if not isinstance(attrs, dict):
            raise BatchError(f"pbsnodes JSON: node {name} is not an object")
        if "Error" in attrs:
            raise BatchError(f"pbsnodes: node {name}: {str(attrs['Error']).strip()}")
        if "state" not in attrs:
            raise BatchError(f"pbsnodes JSON: node {name} has no state")
        available = attrs.get("resources_available") or {}
        assigned = attrs.get("resources_assigned") or {}
        cores = as_int(available.get("ncpus"), as_int(attrs.get("pcpus"), 0))
        jobs = attrs.get("jobs") or []
        if isinstance(jobs, str):
            jobs = jobs.split(",")
        held = _job_cores(jobs)
        used = as_int(assigned.get("ncpus"), sum(held.values()))
        nodes.append(_node(name, cores, attrs["state"], held, used, attrs.get("comment")))
    return nodes


def parse_pbsnodes_xml(text: str) -> list[Node]:
    """Every node of Torque's ``pbsnodes -x``, with its last MoM report as heartbeat."""
    root = load_xml(text, "pbsnodes -x")
    nodes = []
    for element in [] if root is None else root.findall("Node"):
        attrs = xml_value(element)
        if not isinstance(attrs, dict) or not attrs.get("name") or "state" not in attrs:
            raise BatchError("pbsnodes -x: a <Node> without <name> or <state>")
        # "0/1.srv, 1/1.srv" (Torque 4) or "0-3,5/1.srv,4/2.srv" (Torque 6)
        slots = re.findall(r"([\d,\-]*\d)/([^,\s]+)", str(attrs.get("jobs") or ""))
        held = _job_cores(f"{cores}/{job}" for cores, job in slots)
        node = _node(
            attrs["name"], as_int(attrs.get("np")), attrs["state"], held,
            sum(held.values()), attrs.get("note"),
        )  # fmt: skip
        node.heartbeat_at = _rectime(attrs.get("status"))
        nodes.append(node)
    return nodes
