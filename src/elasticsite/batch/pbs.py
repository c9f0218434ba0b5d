"""PBS adapter: OpenPBS / PBS Professional (JSON output) and Torque (XML output).

Everything goes through the batch system's own commands, run by one
:data:`~elasticsite.batch.command.Runner` (tests replay recorded output through it):

=================  =====================================  =====================================
operation          OpenPBS / PBS Pro                      Torque
=================  =====================================  =====================================
jobs               ``qstat -f -F json``                   ``qstat -f -x``
nodes              ``pbsnodes -a -F json``                ``pbsnodes -x``
add_node           ``qmgr -c "create node X               ``qmgr -c "create node X np=N"``
                   resources_available.ncpus=N"``
drain              ``pbsnodes -o -C reason X``            ``pbsnodes -o -N reason X``
undrain            ``pbsnodes -r X``                      ``pbsnodes -c X``
remove_node        ``qrerun`` its jobs, then ``qmgr -c "delete node X"``
submit             ``qsub -l select=1:ncpus=C``           ``qsub -l nodes=1:ppn=C``
                   ``-l walltime=H:MM:SS -p P script``    ``-l walltime=H:MM:SS -p P script``
set_priority       ``qalter -p P id``
move_to_front      ``qalter -p`` one above the queue's highest (``qorder`` at the 1023 ceiling)
preempt            ``qrerun id`` (the job goes back to the queue, keeping its id)
=================  =====================================  =====================================

Native node states translate through one table, :data:`NODE_STATES`; a node reporting
several states (``"down,offline"``) takes the strongest by :data:`_PRECEDENCE`. A state
this module does not know becomes :attr:`NodeState.UNKNOWN` with one warning per word.
"""

from __future__ import annotations

import calendar
import json
import logging
import os
import re
import shlex
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from elasticsite.batch.base import (
    BatchError,
    BatchView,
    JobRequest,
    Node,
    NodeState,
    UnknownJob,
    UnknownNode,
    checked_command,
)
from elasticsite.batch.command import CommandError, Runner, run
from elasticsite.model import Job, JobState

__all__ = [
    "FLAVOURS",
    "NODE_STATES",
    "PbsBatch",
    "PbsJob",
    "create_node_command",
    "delete_node_command",
    "node_state",
    "nodes_command",
    "offline_command",
    "online_command",
    "parse_jobs",
    "parse_nodes",
    "parse_walltime",
    "qalter_priority_command",
    "qorder_command",
    "qrerun_command",
    "qstat_command",
    "qsub_command",
    "request_cores",
]

log = logging.getLogger(__name__)

FLAVOURS = ("openpbs", "torque")
"""``openpbs`` covers OpenPBS and PBS Professional (they share the ``-F json`` output)."""

PRIORITY_MIN, PRIORITY_MAX = -1024, 1023
"""The range ``qsub -p`` and ``qalter -p`` accept on both flavours."""

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


# -- command builders (pure) -------------------------------------------------------------


def _check_flavour(flavour: str) -> None:
    if flavour not in FLAVOURS:
        raise BatchError(f"unknown PBS flavour {flavour!r}; valid: {', '.join(FLAVOURS)}")


def qstat_command(flavour: str) -> list[str]:
    _check_flavour(flavour)
    return ["qstat", "-f", "-F", "json"] if flavour == "openpbs" else ["qstat", "-f", "-x"]


def nodes_command(flavour: str) -> list[str]:
    _check_flavour(flavour)
    return ["pbsnodes", "-a", "-F", "json"] if flavour == "openpbs" else ["pbsnodes", "-x"]


def create_node_command(flavour: str, name: str, cores: int) -> list[str]:
    _check_flavour(flavour)
    setting = f"resources_available.ncpus={cores}" if flavour == "openpbs" else f"np={cores}"
    return ["qmgr", "-c", f"create node {name} {setting}"]


def delete_node_command(name: str) -> list[str]:
    return ["qmgr", "-c", f"delete node {name}"]


def offline_command(flavour: str, name: str, reason: str) -> list[str]:
    _check_flavour(flavour)
    flag = "-C" if flavour == "openpbs" else "-N"
    return ["pbsnodes", "-o", flag, reason, name]


def online_command(flavour: str, name: str) -> list[str]:
    """Clear OFFLINE: ``-r`` on OpenPBS (hosts), ``-c`` on Torque (``-r`` there resets)."""
    _check_flavour(flavour)
    return ["pbsnodes", "-r" if flavour == "openpbs" else "-c", name]


def format_walltime(seconds: float) -> str:
    total = max(int(-(-seconds // 1)), 1)
    return f"{total // 3600}:{total % 3600 // 60:02d}:{total % 60:02d}"


def qsub_command(
    flavour: str,
    script: str,
    cores: int,
    walltime: float,
    priority: int = 0,
    queue: str = "",
    name: str = "elasticsite",
) -> list[str]:
    _check_flavour(flavour)
    shape = f"select=1:ncpus={cores}" if flavour == "openpbs" else f"nodes=1:ppn={cores}"
    argv = ["qsub", "-N", name, "-l", shape, "-l", f"walltime={format_walltime(walltime)}"]
    argv += ["-p", str(priority)]
    if queue:
        argv += ["-q", queue]
    return [*argv, script]


def qalter_priority_command(job_id: str, priority: int) -> list[str]:
    return ["qalter", "-p", str(priority), job_id]


def qorder_command(first: str, second: str) -> list[str]:
    return ["qorder", first, second]


def qrerun_command(job_id: str) -> list[str]:
    return ["qrerun", job_id]


# -- parsers (pure) ----------------------------------------------------------------------


@dataclass(slots=True)
class PbsJob:
    """One queued or running job and what :class:`~elasticsite.model.Job` has no field for."""

    job: Job
    queue: str
    native_state: str


_QUEUED_CODES = {"Q"}
"""Waiting for cores. Held (H), waiting for a start time (W) and array parents are not."""
_RUNNING_CODES = {"R", "E"}
"""Running, or exiting (its cores are still taken)."""


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


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def request_cores(resources: Mapping[str, Any]) -> int:
    """Cores a job asked for: ``ncpus``, else the sum over ``select=``, else ``nodes=N:ppn=M``."""
    ncpus = _int(resources.get("ncpus"), 0)
    if ncpus > 0:
        return ncpus
    select = str(resources.get("select") or "")
    if select:
        total = 0
        for chunk in select.split("+"):
            fields = chunk.split(":")
            count = _int(fields[0], 1) if fields[0].isdigit() else 1
            per = next((_int(f[6:], 1) for f in fields if f.startswith("ncpus=")), 1)
            total += count * per
        return max(total, 1)
    nodes = str(resources.get("nodes") or "")
    if nodes:
        total = 0
        for spec in nodes.split("+"):
            fields = spec.split(":")
            count = _int(fields[0], 1) if fields[0].isdigit() else 1
            per = next((_int(f[4:], 1) for f in fields if f.startswith("ppn=")), 1)
            total += count * per
        return max(total, 1)
    return 1


def _timestamp(value: Any, zone: ZoneInfo) -> float | None:
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


def _exec_node(attrs: Mapping[str, Any]) -> str | None:
    host = str(attrs.get("exec_host") or "")
    if host:
        return host.split("+")[0].split("/")[0] or None
    vnode = str(attrs.get("exec_vnode") or "")
    match = re.match(r"\(([^:)\[]+)", vnode)
    return match.group(1) if match else None


def _job(
    job_id: str, attrs: Mapping[str, Any], zone: ZoneInfo, default_walltime: float
) -> PbsJob | None:
    code = str(attrs.get("job_state", "")).strip()
    if code in _QUEUED_CODES:
        state = JobState.QUEUED
    elif code in _RUNNING_CODES:
        state = JobState.RUNNING
    else:
        return None
    resources = attrs.get("Resource_List") or {}
    if not isinstance(resources, Mapping):
        raise BatchError(f"PBS job {job_id}: Resource_List is not a mapping")
    walltime = parse_walltime(resources.get("walltime"))
    submitted = _timestamp(attrs.get("qtime") or attrs.get("ctime"), zone)
    started = _timestamp(attrs.get("stime") or attrs.get("start_time"), zone)
    owner = str(attrs.get("Job_Owner") or attrs.get("euser") or "")
    job = Job(
        id=job_id,
        cores=request_cores(resources),
        walltime=default_walltime if walltime is None else walltime,
        submitted_at=submitted or 0.0,
        state=state,
        command=str(attrs.get("Job_Name") or ""),
        started_at=started if state is JobState.RUNNING else None,
        node=_exec_node(attrs) if state is JobState.RUNNING else None,
        priority=_int(attrs.get("Priority"), 0),
        user=owner.split("@")[0],
    )
    return PbsJob(job, str(attrs.get("queue") or ""), code)


def _xml_value(element: ET.Element) -> Any:
    if len(element):
        return {child.tag: _xml_value(child) for child in element}
    return (element.text or "").strip()


def _load_json(text: str, what: str) -> dict[str, Any]:
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


def _load_xml(text: str, what: str) -> ET.Element | None:
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


def parse_jobs(
    text: str,
    flavour: str,
    *,
    timezone: str = "UTC",
    default_walltime: float = 3600.0,
) -> list[PbsJob]:
    """Queued and running jobs of ``qstat -f -F json`` / ``qstat -f -x``, in listed order.

    Finished, held and waiting jobs are left out. Malformed output raises one
    :class:`BatchError` saying what was wrong.
    """
    _check_flavour(flavour)
    zone = _zone(timezone)
    entries: Iterable[tuple[str, Mapping[str, Any]]]
    if flavour == "openpbs":
        data = _load_json(text, "qstat")
        jobs = data.get("Jobs", {})  # absent when the server has no job
        if not isinstance(jobs, dict):
            raise BatchError("qstat JSON: 'Jobs' is not an object")
        entries = jobs.items()
    else:
        root = _load_xml(text, "qstat -x")
        entries = []
        if root is not None:
            parsed = []
            for element in root.findall("Job"):
                attrs = _xml_value(element)
                job_id = attrs.get("Job_Id") if isinstance(attrs, dict) else None
                if not job_id:
                    raise BatchError("qstat -x: a <Job> without <Job_Id>")
                parsed.append((str(job_id), attrs))
            entries = parsed
    result = []
    for job_id, attrs in entries:
        if not isinstance(attrs, Mapping):
            raise BatchError(f"qstat: job {job_id} is not an object")
        job = _job(job_id, attrs, zone, default_walltime)
        if job is not None:
            result.append(job)
    return result


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
                count += (_int(high) - _int(low) + 1) if high else 1
            job_id = entry[prefix.end() :]
        else:  # PBS: "<job id>" or "<job id>/<index>"
            job_id, _, _ = entry.partition("/")
            count = 1
        cores[job_id] = cores.get(job_id, 0) + count
    return cores


def parse_nodes(text: str, flavour: str) -> list[Node]:
    """Every node of ``pbsnodes -a -F json`` / ``pbsnodes -x``, states through the table."""
    _check_flavour(flavour)
    nodes = []
    if flavour == "openpbs":
        data = _load_json(text, "pbsnodes")
        listed = data.get("nodes", {})
        if not isinstance(listed, dict):
            raise BatchError("pbsnodes JSON: 'nodes' is not an object")
        for name, attrs in listed.items():
            if not isinstance(attrs, dict):
                raise BatchError(f"pbsnodes JSON: node {name} is not an object")
            if "Error" in attrs:
                raise BatchError(f"pbsnodes: node {name}: {str(attrs['Error']).strip()}")
            if "state" not in attrs:
                raise BatchError(f"pbsnodes JSON: node {name} has no state")
            available = attrs.get("resources_available") or {}
            assigned = attrs.get("resources_assigned") or {}
            cores = _int(available.get("ncpus"), _int(attrs.get("pcpus"), 0))
            jobs = attrs.get("jobs") or []
            if isinstance(jobs, str):
                jobs = jobs.split(",")
            held = _job_cores(jobs)
            used = _int(assigned.get("ncpus"), sum(held.values()))
            nodes.append(_node(name, cores, attrs["state"], held, used, attrs.get("comment")))
    else:
        root = _load_xml(text, "pbsnodes -x")
        for element in [] if root is None else root.findall("Node"):
            attrs = _xml_value(element)
            if not isinstance(attrs, dict) or not attrs.get("name") or "state" not in attrs:
                raise BatchError("pbsnodes -x: a <Node> without <name> or <state>")
            # "0/1.srv, 1/1.srv" (Torque 4) or "0-3,5/1.srv,4/2.srv" (Torque 6)
            slots = re.findall(r"([\d,\-]*\d)/([^,\s]+)", str(attrs.get("jobs") or ""))
            held = _job_cores(f"{cores}/{job}" for cores, job in slots)
            node = _node(
                attrs["name"], _int(attrs.get("np")), attrs["state"], held,
                sum(held.values()), attrs.get("note"),
            )  # fmt: skip
            node.heartbeat_at = _rectime(attrs.get("status"))
            nodes.append(node)
    return nodes


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


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BatchError(
            f"unknown time zone {name!r} (an IANA name such as 'Europe/Paris')"
        ) from None


def detect_flavour(runner: Runner) -> str:
    """``openpbs`` if ``qstat --version`` names PBS (OpenPBS/PBS Pro print ``pbs_version``)."""
    try:
        result = runner(["qstat", "--version"])
    except CommandError as exc:
        raise BatchError(f"cannot tell the PBS flavour: {exc}; set flavour explicitly") from exc
    text = (result.stdout + result.stderr).lower()
    return "openpbs" if "pbs_version" in text else "torque"


# -- the adapter -------------------------------------------------------------------------

_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*")
"""What ``qmgr -c "create node ..."`` gets: a host name, never more qmgr syntax."""
_OPTIONS = ("flavour", "queue", "timezone", "default_walltime", "job_name", "script_dir")


class PbsBatch:
    """A PBS/Torque server driven through its commands.

    ``flavour`` is ``"openpbs"`` (also PBS Pro), ``"torque"`` or ``None`` (ask ``qstat
    --version`` once). ``timezone`` is the server's zone: OpenPBS prints times as local
    wall-clock text. ``default_walltime`` stands in for jobs that ask for none.
    """

    def __init__(
        self,
        flavour: str | None = None,
        *,
        runner: Runner = run,
        queue: str = "",
        timezone: str = "UTC",
        default_walltime: float = 3600.0,
        job_name: str = "elasticsite",
        script_dir: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.runner = runner
        self.flavour = detect_flavour(runner) if flavour is None else flavour
        _check_flavour(self.flavour)
        _zone(timezone)
        if not default_walltime > 0:
            raise BatchError(f"default_walltime must be > 0 seconds, got {default_walltime}")
        self.queue = queue
        self.timezone = timezone
        self.default_walltime = float(default_walltime)
        self.job_name = job_name
        self.script_dir = script_dir
        self.clock = clock
        self.queues: dict[str, str] = {}
        """Job id -> queue, as of the last listing."""

    @classmethod
    def from_options(cls, options: Mapping[str, Any], runner: Runner = run) -> PbsBatch:
        """Build from a site config's ``batch`` options; an unknown key is an error."""
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise BatchError(
                f"unknown PBS option(s) {', '.join(unknown)}; valid: {', '.join(_OPTIONS)}"
            )
        kwargs = dict(options)
        flavour = kwargs.pop("flavour", None)
        if "default_walltime" in kwargs:
            try:
                kwargs["default_walltime"] = float(kwargs["default_walltime"])
            except (TypeError, ValueError):
                raise BatchError(
                    "PBS option default_walltime must be seconds, "
                    f"got {options['default_walltime']!r}"
                ) from None
        return cls(flavour, runner=runner, **kwargs)

    # -- reading ------------------------------------------------------------------------

    def _run(self, argv: Sequence[str]) -> str:
        return self.runner(argv).stdout

    def _jobs(self) -> list[PbsJob]:
        jobs = parse_jobs(
            self._run(qstat_command(self.flavour)), self.flavour,
            timezone=self.timezone, default_walltime=self.default_walltime,
        )  # fmt: skip
        self.queues = {j.job.id: j.queue for j in jobs}
        return jobs

    def _nodes(self) -> list[Node]:
        return parse_nodes(self._run(nodes_command(self.flavour)), self.flavour)

    def snapshot(self) -> BatchView:
        """Jobs then nodes (two commands: PBS has no single consistent read of both)."""
        now = self.clock()
        jobs = self._jobs()
        nodes = self._nodes()
        queued = [j.job for j in jobs if j.job.state is JobState.QUEUED]
        # The server starts the highest priority first and keeps its own order
        # (submission, or qorder's swaps) among equals: a stable sort keeps that order.
        queued.sort(key=lambda j: -j.priority)
        running = [j.job for j in jobs if j.job.state is JobState.RUNNING]
        return BatchView(taken_at=now, queued=queued, running=running, nodes=nodes)

    def _find(self, jobs: list[PbsJob], job_id: str) -> PbsJob:
        for candidate in jobs:
            full = candidate.job.id
            if job_id in (full, full.split(".")[0]):
                return candidate
        raise UnknownJob(f"no job {job_id!r} queued or running on the PBS server")

    def _node_names(self) -> set[str]:
        return {n.name for n in self._nodes()}

    def _require_node(self, name: str) -> None:
        if name not in self._node_names():
            raise UnknownNode(f"no node {name!r} on the PBS server")

    def _act(self, argv: Sequence[str], job_id: str = "", node: str = "") -> None:
        try:
            self.runner(argv)
        except CommandError as exc:
            output = exc.output.lower()
            if job_id and "unknown job" in output:
                raise UnknownJob(f"no job {job_id!r} on the PBS server ({exc})") from exc
            if node and "unknown node" in output:
                raise UnknownNode(f"no node {node!r} on the PBS server ({exc})") from exc
            raise

    # -- nodes --------------------------------------------------------------------------

    def add_node(self, name: str, cores: int) -> None:
        """``qmgr create node``; a node the server already knows is left alone."""
        if not _NODE_NAME.fullmatch(name) or cores < 1:
            raise BatchError(f"add_node: need a host name and cores >= 1, got {name!r}, {cores}")
        if name in self._node_names():
            return
        self._act(create_node_command(self.flavour, name, cores))

    def drain(self, name: str, reason: str) -> None:
        """Mark the node OFFLINE with ``reason`` as its comment/note."""
        self._require_node(name)
        self._act(
            offline_command(self.flavour, name, reason or "drained by elasticsite"), node=name
        )

    def undrain(self, name: str) -> None:
        self._require_node(name)
        self._act(online_command(self.flavour, name), node=name)

    def remove_node(self, name: str) -> None:
        """Offline it, requeue its jobs (``qrerun``), delete it; an unknown node is a no-op."""
        if name not in self._node_names():
            return
        on_node = [
            j.job.id for j in self._jobs() if j.job.state is JobState.RUNNING and j.job.node == name
        ]
        if on_node:  # offline first, or the scheduler restarts them right there
            self._act(offline_command(self.flavour, name, "removed by elasticsite"), node=name)
        for job_id in on_node:
            self._act(qrerun_command(job_id), job_id=job_id)
        self._act(delete_node_command(name), node=name)

    # -- jobs ---------------------------------------------------------------------------

    def submit(self, request: JobRequest) -> str:
        """Write a script running ``request.command`` and ``qsub`` it; returns the job id."""
        argv = checked_command(request)
        _check_priority(request.priority)
        script = f"#!/bin/sh\nexec {shlex.join(argv)}\n"
        fd, path = tempfile.mkstemp(prefix="elasticsite-", suffix=".sh", dir=self.script_dir)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(script)
            result = self.runner(
                qsub_command(
                    self.flavour, path, request.cores, request.walltime, request.priority,
                    self.queue, self.job_name,
                )
            )  # fmt: skip
        finally:
            os.unlink(path)  # qsub copies the script at submission
        job_id = result.stdout.strip().splitlines()[-1].strip() if result.stdout.strip() else ""
        if not re.fullmatch(r"\d+(\[\d*\])?(\.[\w.\-]+)?", job_id):
            raise BatchError(f"qsub printed {result.stdout.strip()!r}, expected a job id")
        return job_id

    def set_priority(self, job_id: str, priority: int) -> None:
        _check_priority(priority)
        job = self._find(self._jobs(), job_id)
        self._act(qalter_priority_command(job.job.id, priority), job_id=job_id)

    def move_to_front(self, job_id: str) -> None:
        """One above the queue's highest priority; at the ceiling, also swap with the head."""
        jobs = self._jobs()
        job = self._find(jobs, job_id)
        if job.job.state is not JobState.QUEUED:
            return
        queued = sorted(
            (j.job for j in jobs if j.job.state is JobState.QUEUED), key=lambda j: -j.priority
        )
        head = queued[0]
        if head.id == job.job.id:
            return
        if head.priority < PRIORITY_MAX:
            self._act(qalter_priority_command(job.job.id, head.priority + 1), job_id=job_id)
            return
        self._act(qalter_priority_command(job.job.id, PRIORITY_MAX), job_id=job_id)
        self._act(qorder_command(job.job.id, head.id), job_id=job_id)

    def preempt(self, job_id: str) -> None:
        """``qrerun`` a running job (it needs to be rerunnable); a queued job is left alone."""
        job = self._find(self._jobs(), job_id)
        if job.job.state is JobState.RUNNING:
            self._act(qrerun_command(job.job.id), job_id=job_id)


def _check_priority(priority: int) -> None:
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise BatchError(
            f"PBS priority must be within {PRIORITY_MIN}..{PRIORITY_MAX}, got {priority}"
        )
