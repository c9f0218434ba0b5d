"""Reading HTCondor: job and slot ClassAds as jobs and nodes, and requests as submit
descriptions.

Slots are grouped into one node per ``Machine`` and their (``State``, ``Activity``)
translated through one table, :data:`SLOT_STATES`. Cloud Scheduler (paper 003) carries
each job's VM needs in job attributes (``VMType``, often inside ``Requirements``,
``VMAMI``, ``VMLoc``, ``VMCPUArch``, ``VMCPUCores``, ``VMMem``, ``VMStorage``,
``VMNetwork``); they come in :attr:`~elasticsite.model.Job.attributes` as ``vm_type``,
``vm_image``, ``vm_location``, ``vm_arch``, ``vm_cores``, ``vm_memory``, ``vm_storage``
and ``vm_network``.
"""

from __future__ import annotations

import importlib
import logging
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any

from elasticsite import attributes
from elasticsite.batch.base import BatchError, JobRequest, Node, NodeState
from elasticsite.batch.htcondor_states import job_status
from elasticsite.model import Job, JobState

__all__ = [
    "CLOUD_SCHEDULER_ATTRIBUTES",
    "HELD",
    "IDLE",
    "OWNER_ATTR",
    "RUNNING",
    "SLOT_STATES",
    "ad_float",
    "ad_int",
    "ad_value",
    "ad_walltime",
    "condor_arguments",
    "job_attributes",
    "load_bindings",
    "parse_jobs",
    "parse_long",
    "parse_nodes",
    "queue_order",
    "slot_state",
    "starts",
    "submit_description",
    "submit_string",
]

log = logging.getLogger(__name__)

IDLE, RUNNING, HELD = 1, 2, 5
"""``JobStatus`` values: a snapshot lists idle and running jobs (held, removed and
completed ones are not)."""

CLOUD_SCHEDULER_ATTRIBUTES = (
    "VMType",
    "VMAMI",
    "VMLoc",
    "VMCPUArch",
    "VMCPUCores",
    "VMMem",
    "VMStorage",
    "VMNetwork",
)
_INTEGER_VM_ATTRIBUTES = {"VMCPUCores", "VMMem", "VMStorage"}

SLOT_STATES: dict[tuple[str, str], NodeState] = {
    ("Unclaimed", "Idle"): NodeState.IDLE,
    ("Unclaimed", "Benchmarking"): NodeState.IDLE,
    ("Backfill", "Idle"): NodeState.IDLE,  # backfill work yields to real jobs
    ("Backfill", "Busy"): NodeState.IDLE,
    ("Backfill", "Killing"): NodeState.IDLE,
    ("Matched", "Idle"): NodeState.BUSY,  # a job is on its way
    ("Claimed", "Idle"): NodeState.BUSY,  # claimed between two jobs
    ("Claimed", "Busy"): NodeState.BUSY,
    ("Claimed", "Suspended"): NodeState.BUSY,
    ("Claimed", "Retiring"): NodeState.DRAINING,  # finishing its job, then leaving
    ("Preempting", "Vacating"): NodeState.DRAINING,
    ("Preempting", "Killing"): NodeState.DRAINING,
    ("Drained", "Retiring"): NodeState.DRAINING,
    ("Drained", "Idle"): NodeState.DRAINED,
    ("Owner", "Idle"): NodeState.DRAINED,  # START is false: the machine takes no job
}
"""Every native (``State``, ``Activity``) pair of a slot and what it means to the manager."""

_warned: set[tuple[str, str]] = set()


def slot_state(state: str, activity: str) -> NodeState:
    """One slot's (``State``, ``Activity``) through :data:`SLOT_STATES` (unknown: warned once)."""
    key = (state, activity)
    found = SLOT_STATES.get(key)
    if found is None:
        if key not in _warned:
            _warned.add(key)
            log.warning("unknown HTCondor slot state %s/%s: reported as unknown", state, activity)
        return NodeState.UNKNOWN
    return found


# -- bindings ----------------------------------------------------------------------------


def load_bindings() -> tuple[ModuleType, ModuleType]:
    """``(htcondor, classad)`` modules: ``htcondor2``/``classad2`` first, then the classic ones."""
    for pair in (("htcondor2", "classad2"), ("htcondor", "classad")):
        try:
            return importlib.import_module(pair[0]), importlib.import_module(pair[1])
        except ImportError:
            continue
    raise BatchError(
        "the HTCondor adapter needs the HTCondor Python bindings: "
        "pip install 'elasticsite[htcondor]'"
    )


_ATTRIBUTE_LINE = re.compile(r"^\s*[A-Za-z_][\w.]*\s*=")


def parse_long(text: str, what: str = "ClassAds") -> list[Any]:
    """Ads of ``condor_q -long`` / ``condor_status -long`` text, parsed by ``classad``.

    The parser stops quietly at the first bad line; this counts attribute lines per ad and
    raises :class:`BatchError` naming the first one it lost, so truncated or corrupt
    output never passes as fewer attributes.
    """
    _, classad = load_bindings()
    blocks = [b for b in re.split(r"\n\s*\n", text.strip()) if b.strip()]
    ads = []
    for number, block in enumerate(blocks, 1):
        for line in block.splitlines():
            if line.strip() and not _ATTRIBUTE_LINE.match(line):
                raise BatchError(f"{what}: ad {number} has a line that is no attribute: {line!r}")
        names = [
            m.group(1).lower()
            for m in re.finditer(r"^\s*([A-Za-z_][\w.]*)\s*=", block, flags=re.MULTILINE)
        ]
        try:
            ad = classad.parseOne(block, classad.ParserType.Old)
        except Exception as exc:  # the bindings raise their own exception types
            raise BatchError(f"{what}: ad {number} does not parse: {exc}") from exc
        keys = {k.lower() for k in ad}
        missing = [n for n in names if n not in keys]
        if missing or not names:
            bad = missing[0] if missing else block.splitlines()[0][:60]
            raise BatchError(f"{what}: ad {number} is malformed near {bad!r}")
        ads.append(ad)
    return ads


def ad_value(ad: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """An attribute's value, evaluating expressions (``RequestCpus = 2 * 1``) in the ad."""
    if key not in ad:
        return default
    evaluate = getattr(ad, "eval", None)
    if evaluate is not None:
        try:
            value = evaluate(key)
        except Exception:  # an expression the ad alone cannot evaluate
            return default
    else:
        value = ad[key]
    if value is None or type(value).__name__ in ("Value", "ExprTree"):  # Undefined/Error
        return default
    return value


def ad_int(ad: Mapping[str, Any], key: str, default: int = 0) -> int:
    value = ad_value(ad, key, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def ad_float(ad: Mapping[str, Any], key: str) -> float | None:
    value = ad_value(ad, key)
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


# -- pure translations -------------------------------------------------------------------


_VM_KEYS = {
    "VMType": attributes.VM_TYPE,
    "VMAMI": attributes.VM_IMAGE,
    "VMLoc": attributes.VM_LOCATION,
    "VMCPUArch": attributes.VM_ARCH,
    "VMCPUCores": attributes.VM_CORES,
    "VMMem": attributes.VM_MEMORY,
    "VMStorage": attributes.VM_STORAGE,
    "VMNetwork": attributes.VM_NETWORK,
}
"""Cloud Scheduler's job attributes and the job attribute each one fills."""
_OTHER_KEYS = (
    ("AcctGroup", attributes.ACCOUNT),
    ("AccountingGroup", attributes.ACCOUNT),
    ("JobBatchName", attributes.NAME),
)


def job_attributes(ad: Mapping[str, Any]) -> Mapping[str, str]:
    """A job ad's :mod:`~elasticsite.attributes`: Cloud Scheduler's VM attributes
    (``VMType`` also from ``Requirements``; the attribute wins), integers as decimal
    strings, the accounting group and the batch name. A value that cannot be an
    attribute (a control character, too long) is left out, with a debug log line:
    it would reach logs and scripts otherwise."""
    found: dict[str, str] = {}
    for ad_key, key in (*_VM_KEYS.items(), *_OTHER_KEYS):
        if key in found:
            continue
        value = ad_value(ad, ad_key)
        if value is None:
            continue
        text = str(value).strip()
        if ad_key in _INTEGER_VM_ATTRIBUTES and text.lstrip("+-").isdigit():
            text = str(int(text))
        _keep(found, key, text)
    if attributes.VM_TYPE not in found and "Requirements" in ad:
        match = re.search(r'VMType\s*(?:=\?=|==|is)\s*"([^"]*)"', str(ad["Requirements"]))
        if match:
            _keep(found, attributes.VM_TYPE, match.group(1))
    return found or attributes.EMPTY


def _keep(found: dict[str, str], key: str, text: str) -> None:
    try:
        attributes.check(key, text)
    except attributes.InvalidAttribute as exc:
        log.debug("job attribute left out: %s", exc)
        return
    if text:
        found[key] = text


def ad_walltime(ad: Mapping[str, Any], default: float) -> float:
    allowed = ad_float(ad, "AllowedExecuteDuration")
    if allowed:
        return allowed
    minutes = ad_float(ad, "MaxWallTimeMins")  # the glideinWMS/OSG convention
    return minutes * 60.0 if minutes else default


def parse_jobs(ads: Iterable[Mapping[str, Any]], default_walltime: float = 3600.0) -> list[Job]:
    """Idle and running jobs of schedd ads, in the schedd's order for one submitter."""
    result = []
    for ad in ads:
        status = ad_int(ad, "JobStatus", -1)
        if status not in (IDLE, RUNNING):
            continue
        if "ClusterId" not in ad:
            raise BatchError("a job ad without ClusterId: not condor_q output")
        job_id = f"{ad_int(ad, 'ClusterId')}.{ad_int(ad, 'ProcId')}"
        running = status == RUNNING
        remote = str(ad_value(ad, "RemoteHost", "") or "")
        command = str(ad_value(ad, "Cmd", "") or "")
        arguments = str(ad_value(ad, "Arguments", "") or "")
        state = JobState.RUNNING if running else job_status(status, starts(ad))[0]
        job = Job(
            id=job_id,
            cores=max(ad_int(ad, "RequestCpus", 1), 1),
            walltime=ad_walltime(ad, default_walltime),
            submitted_at=ad_float(ad, "QDate") or 0.0,
            state=state,
            command=f"{command} {arguments}".strip(),
            started_at=ad_float(ad, "JobCurrentStartDate") if running else None,
            node=(remote.rsplit("@", 1)[-1] or None) if running else None,
            priority=ad_int(ad, "JobPrio", 0),
            user=str(ad_value(ad, "Owner", "") or ""),
            attributes=job_attributes(ad),
        )
        result.append(job)
    return result


def starts(ad: Mapping[str, Any]) -> int:
    """How many times a job started: the larger of ``NumJobStarts`` and ``JobRunCount``
    (a recorded 7.4 schedd counts a running job's start in the second only)."""
    return max(ad_int(ad, "NumJobStarts", 0), ad_int(ad, "JobRunCount", 0))


def queue_order(jobs: Iterable[Job]) -> list[Job]:
    """``JobPrio`` descending, then cluster and process id (one submitter's start order)."""

    def key(job: Job) -> tuple[int, int, int]:
        cluster, _, proc = job.id.partition(".")
        return (-job.priority, int(cluster or 0), int(proc or 0))

    return sorted(jobs, key=key)


OWNER_ATTR = "ElasticsiteOwner"
"""The startd attribute naming the user whose jobs alone an elastic worker starts (its
``START`` expression requires the job's ``Owner`` to be it; ``""``: anyone's)."""


def parse_nodes(ads: Iterable[Mapping[str, Any]]) -> list[Node]:
    """Startd slot ads grouped into one node per ``Machine``, states through :data:`SLOT_STATES`."""
    machines: dict[str, list[Mapping[str, Any]]] = {}
    for ad in ads:
        name = ad_value(ad, "Machine")
        if not name:
            raise BatchError("a startd ad without Machine: not condor_status output")
        machines.setdefault(str(name), []).append(ad)
    return [_node(name, slots) for name, slots in sorted(machines.items())]


def _node(name: str, slots: list[Mapping[str, Any]]) -> Node:
    cores = free = running = 0
    states: set[NodeState] = set()
    draining = False
    heartbeat: float | None = None
    registered: float | None = None
    reason = ""
    owner: str | None = None
    for ad in slots:
        found = ad_value(ad, OWNER_ATTR)
        if found is not None and owner is None:  # advertised by an owned worker's startd
            owner = str(found)
        slot_type = str(ad_value(ad, "SlotType", "Static"))
        state = str(ad_value(ad, "State", ""))
        activity = str(ad_value(ad, "Activity", ""))
        states.add(slot_state(state, activity))
        draining = draining or bool(ad_value(ad, "Draining", False))
        reason = reason or str(ad_value(ad, "DrainReason", "") or "")
        beat = ad_float(ad, "LastHeardFrom") or ad_float(ad, "MyCurrentTime")
        if beat is not None:
            heartbeat = beat if heartbeat is None else max(heartbeat, beat)
        born = ad_float(ad, "DaemonStartTime")
        if born is not None:
            registered = born if registered is None else min(registered, born)
        if slot_type == "Partitionable":
            cores += ad_int(ad, "TotalSlotCpus", ad_int(ad, "Cpus"))
            free += ad_int(ad, "Cpus")
        elif slot_type == "Dynamic":
            running += state == "Claimed"
        else:
            cores += ad_int(ad, "Cpus")
            if state == "Claimed":
                running += 1
            elif state == "Unclaimed":
                free += ad_int(ad, "Cpus")
    if draining or states & {NodeState.DRAINING, NodeState.DRAINED}:
        translated = NodeState.DRAINING if running else NodeState.DRAINED
    elif NodeState.UNKNOWN in states:
        translated = NodeState.UNKNOWN
    elif running or NodeState.BUSY in states:
        translated = NodeState.BUSY
    else:
        translated = NodeState.IDLE
    if translated not in (NodeState.IDLE, NodeState.BUSY):
        free = 0
    return Node(name, cores, translated, running, free, reason, heartbeat, registered, owner)


def condor_arguments(argv: Sequence[str]) -> str:
    """``arguments`` in HTCondor's new syntax: double-quoted, each argument single-quoted."""
    quoted = []
    for arg in argv:
        text = arg.replace('"', '""').replace("'", "''")
        quoted.append(f"'{text}'")
    return '"' + " ".join(quoted) + '"'


_LINE_BREAKS = ("\n", "\r", "\0")


def submit_string(text: str) -> str:
    """``text`` as the string literal of a ``+Attribute`` line of a submit description.

    condor_submit reads those values as old ClassAds (``ParseClassAdRvalExpr`` sets
    ``SetOldClassAd(true)``), whose one escape is ``\\"``: a backslash stands for itself,
    including one just before the closing quote. So only double quotes are escaped;
    doubling backslashes, as new-ClassAd quoting (``classad.quote``) does, would put
    two of them in the job ad. A line break cannot be written at all: the description
    is read line by line, and one would end the value and start a line of its own
    (another attribute, another executable). Such text is refused (BatchError).
    """
    if any(c in text for c in _LINE_BREAKS):
        raise BatchError(f"submit: a line break or NUL cannot go into HTCondor: {text!r}")
    return '"' + text.replace('"', '\\"') + '"'


def submit_description(
    request: JobRequest, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The submit description for one request (what ``condor_submit`` would read)."""
    argv = list(request.command)
    for i, arg in enumerate(argv):
        if any(c in arg for c in _LINE_BREAKS):
            raise BatchError(
                f"submit: argument {i} of the command holds a line break or NUL, which "
                f"HTCondor's line-based submit description cannot carry: {arg!r}"
            )
    description = {
        "universe": "vanilla",
        "executable": argv[0],
        "arguments": condor_arguments(argv[1:]),
        "request_cpus": str(request.cores),
        "allowed_execute_duration": str(int(-(-request.walltime // 1))),
        "priority": str(request.priority),
        "+ElasticsiteCommand": submit_string(shlex.join(argv)),
    }
    for ad_key, key in _VM_KEYS.items():  # the request's VM needs, as Cloud Scheduler reads them
        value = request.attributes.get(key)
        if value is None:
            continue
        if ad_key in _INTEGER_VM_ATTRIBUTES:
            if not value.isdigit():
                raise BatchError(f"submit: {key} must be a whole number, got {value!r}")
            description[f"+{ad_key}"] = value
        else:
            description[f"+{ad_key}"] = submit_string(value)
    account = request.attributes.get(attributes.ACCOUNT)
    if account:
        description["accounting_group"] = submit_string(account)[1:-1]
    for key, value in (extra or {}).items():
        if any(c in f"{key}{value}" for c in _LINE_BREAKS):
            raise BatchError(f"submit: {key} = {value!r}: a line break or NUL cannot be sent")
        description[key] = value
    return description
