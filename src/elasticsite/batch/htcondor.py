"""HTCondor adapter: the schedd's job queue and the collector's startds, through the bindings.

Everything HTCondor-specific goes through :class:`CondorPool`, a small interface the
real :class:`BindingsPool` implements with the ``htcondor2``/``classad2`` modules of the
``htcondor`` wheel (or the classic ``htcondor``/``classad`` modules when those are what is
installed). Tests substitute a pool built from recorded ``condor_q -long`` and
``condor_status -long`` output.

How the contract maps onto a pool whose startds join by themselves:

==============  ===============================================================================
snapshot        ``Schedd.query`` of idle (1) and running (2) jobs; ``Collector.query`` of
                startd ads, grouped by ``Machine`` into nodes (partitionable slots count
                their ``TotalSlotCpus``, dynamic and claimed static slots are running jobs)
add_node        records an expectation: the node is listed DOWN until a startd of that
                ``Machine`` reports (HTCondor has no way to pre-declare a node)
drain           ``Startd.drainJobs`` (graceful by default: running jobs finish)
undrain         ``Startd.cancelDrainJobs``
remove_node     the startd is drained, its running jobs vacated back to the queue (hold +
                release), its master told ``DaemonsOffPeaceful``; the expectation is dropped
submit          ``Schedd.submit`` (vanilla universe, ``request_cpus``,
                ``allowed_execute_duration`` for the walltime, ``priority``)
set_priority    ``Schedd.edit(JobPrio)``
move_to_front   ``JobPrio`` one above the highest queued ``JobPrio``
preempt         ``Schedd.act(Hold)`` then ``Release``: the job leaves its slot and is idle again
==============  ===============================================================================

``queued`` is ordered as the schedd orders one submitter's jobs: ``JobPrio`` descending,
then cluster and process id. Across submitters the negotiator's fair share decides, which
no job attribute shows.

Cloud Scheduler (paper 003) carries each job's VM needs in job attributes (``VMType``
usually inside ``Requirements``, ``VMAMI``, ``VMLoc``, ``VMCPUArch``, ``VMCPUCores``,
``VMMem``, ``VMStorage``, ``VMNetwork``). :class:`~elasticsite.model.Job` has no field for
them, so :meth:`CondorBatch.requirements` returns them per job id from the last snapshot.
"""

from __future__ import annotations

import importlib
import logging
import re
import shlex
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from pydantic import Field, field_validator

from elasticsite import plugins
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
from elasticsite.model import Job, JobState
from elasticsite.plugins import BatchPlugin, PluginOptions, validate_options

if TYPE_CHECKING:
    from elasticsite.plugins import SiteInfo

__all__ = [
    "CLOUD_SCHEDULER_ATTRIBUTES",
    "SLOT_STATES",
    "BindingsPool",
    "CondorBatch",
    "CondorOptions",
    "CondorPool",
    "condor_arguments",
    "job_requirements",
    "load_bindings",
    "parse_jobs",
    "parse_long",
    "parse_nodes",
    "slot_state",
    "submit_description",
    "submit_string",
]

log = logging.getLogger(__name__)

IDLE, RUNNING = 1, 2
"""``JobStatus`` values of the jobs a snapshot lists (held, removed, completed are not)."""

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


def _value(ad: Mapping[str, Any], key: str, default: Any = None) -> Any:
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


def _int(ad: Mapping[str, Any], key: str, default: int = 0) -> int:
    value = _value(ad, key, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _float(ad: Mapping[str, Any], key: str) -> float | None:
    value = _value(ad, key)
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


# -- pure translations -------------------------------------------------------------------


def job_requirements(ad: Mapping[str, Any]) -> dict[str, str | int]:
    """The Cloud Scheduler VM attributes of one job ad (``VMType`` also from ``Requirements``)."""
    found: dict[str, str | int] = {}
    for key in CLOUD_SCHEDULER_ATTRIBUTES:
        value = _value(ad, key)
        if value is None:
            continue
        if key in _INTEGER_VM_ATTRIBUTES:
            try:
                found[key] = int(str(value).strip())
                continue
            except ValueError:
                pass
        found[key] = str(value)
    if "VMType" not in found and "Requirements" in ad:
        match = re.search(r'VMType\s*(?:=\?=|==|is)\s*"([^"]*)"', str(ad["Requirements"]))
        if match:
            found["VMType"] = match.group(1)
    return found


@dataclass(slots=True)
class CondorJob:
    """One idle or running job, and its Cloud Scheduler requirements."""

    job: Job
    requirements: dict[str, str | int] = field(default_factory=dict)


def _walltime(ad: Mapping[str, Any], default: float) -> float:
    allowed = _float(ad, "AllowedExecuteDuration")
    if allowed:
        return allowed
    minutes = _float(ad, "MaxWallTimeMins")  # the glideinWMS/OSG convention
    return minutes * 60.0 if minutes else default


def parse_jobs(
    ads: Iterable[Mapping[str, Any]], default_walltime: float = 3600.0
) -> list[CondorJob]:
    """Idle and running jobs of schedd ads, in the schedd's order for one submitter."""
    result = []
    for ad in ads:
        status = _int(ad, "JobStatus", -1)
        if status not in (IDLE, RUNNING):
            continue
        if "ClusterId" not in ad:
            raise BatchError("a job ad without ClusterId: not condor_q output")
        job_id = f"{_int(ad, 'ClusterId')}.{_int(ad, 'ProcId')}"
        running = status == RUNNING
        remote = str(_value(ad, "RemoteHost", "") or "")
        command = str(_value(ad, "Cmd", "") or "")
        arguments = str(_value(ad, "Arguments", "") or "")
        job = Job(
            id=job_id,
            cores=max(_int(ad, "RequestCpus", 1), 1),
            walltime=_walltime(ad, default_walltime),
            submitted_at=_float(ad, "QDate") or 0.0,
            state=JobState.RUNNING if running else JobState.QUEUED,
            command=f"{command} {arguments}".strip(),
            started_at=_float(ad, "JobCurrentStartDate") if running else None,
            node=(remote.rsplit("@", 1)[-1] or None) if running else None,
            priority=_int(ad, "JobPrio", 0),
            user=str(_value(ad, "Owner", "") or ""),
        )
        result.append(CondorJob(job, job_requirements(ad)))
    return result


def queue_order(jobs: Iterable[Job]) -> list[Job]:
    """``JobPrio`` descending, then cluster and process id (one submitter's start order)."""

    def key(job: Job) -> tuple[int, int, int]:
        cluster, _, proc = job.id.partition(".")
        return (-job.priority, int(cluster or 0), int(proc or 0))

    return sorted(jobs, key=key)


def parse_nodes(ads: Iterable[Mapping[str, Any]]) -> list[Node]:
    """Startd slot ads grouped into one node per ``Machine``, states through :data:`SLOT_STATES`."""
    machines: dict[str, list[Mapping[str, Any]]] = {}
    for ad in ads:
        name = _value(ad, "Machine")
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
    for ad in slots:
        slot_type = str(_value(ad, "SlotType", "Static"))
        state = str(_value(ad, "State", ""))
        activity = str(_value(ad, "Activity", ""))
        states.add(slot_state(state, activity))
        draining = draining or bool(_value(ad, "Draining", False))
        reason = reason or str(_value(ad, "DrainReason", "") or "")
        beat = _float(ad, "LastHeardFrom") or _float(ad, "MyCurrentTime")
        if beat is not None:
            heartbeat = beat if heartbeat is None else max(heartbeat, beat)
        born = _float(ad, "DaemonStartTime")
        if born is not None:
            registered = born if registered is None else min(registered, born)
        if slot_type == "Partitionable":
            cores += _int(ad, "TotalSlotCpus", _int(ad, "Cpus"))
            free += _int(ad, "Cpus")
        elif slot_type == "Dynamic":
            running += state == "Claimed"
        else:
            cores += _int(ad, "Cpus")
            if state == "Claimed":
                running += 1
            elif state == "Unclaimed":
                free += _int(ad, "Cpus")
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
    return Node(name, cores, translated, running, free, reason, heartbeat, registered)


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
    for key, value in (extra or {}).items():
        if any(c in f"{key}{value}" for c in _LINE_BREAKS):
            raise BatchError(f"submit: {key} = {value!r}: a line break or NUL cannot be sent")
        description[key] = value
    return description


# -- the pool interface and its real implementation ---------------------------------------


class CondorPool(Protocol):
    """What the adapter asks of a pool; one implementation per bindings, one fake for tests."""

    def jobs(self, constraint: str) -> list[Any]: ...

    def slots(self) -> list[Any]: ...

    def submit(self, description: Mapping[str, str]) -> int: ...

    def edit(self, job_ids: Sequence[str], attribute: str, value: str) -> None: ...

    def act(self, action: str, job_ids: Sequence[str], reason: str) -> None: ...

    def drain(self, machine: str, mode: str, reason: str) -> None: ...

    def cancel_drain(self, machine: str) -> None: ...

    def off_peaceful(self, machine: str) -> None: ...


class BindingsPool:
    """A pool reached through the HTCondor Python bindings (``collector`` and ``schedd``: names
    of the daemons to use; ``None`` for the local configuration's)."""

    def __init__(self, collector: str | None = None, schedd: str | None = None) -> None:
        self.htcondor, self.classad = load_bindings()
        self.collector_name = collector
        self.schedd_name = schedd

    def _collector(self) -> Any:
        return (
            self.htcondor.Collector(self.collector_name)
            if self.collector_name
            else (self.htcondor.Collector())
        )

    def _schedd(self) -> Any:
        if self.schedd_name is None:
            return self.htcondor.Schedd()
        location = self._collector().locate(self.htcondor.DaemonTypes.Schedd, self.schedd_name)
        return self.htcondor.Schedd(location)

    def _startd(self, machine: str) -> Any:
        location = self._collector().locate(self.htcondor.DaemonTypes.Startd, machine)
        return self.htcondor.Startd(location)

    def jobs(self, constraint: str) -> list[Any]:
        return list(self._schedd().query(constraint))

    def slots(self) -> list[Any]:
        return list(self._collector().query(self.htcondor.AdTypes.Startd))

    def submit(self, description: Mapping[str, str]) -> int:
        result = self._schedd().submit(self.htcondor.Submit(dict(description)))
        return int(result.cluster())

    def edit(self, job_ids: Sequence[str], attribute: str, value: str) -> None:
        self._schedd().edit(list(job_ids), attribute, value)

    def act(self, action: str, job_ids: Sequence[str], reason: str) -> None:
        self._schedd().act(getattr(self.htcondor.JobAction, action), list(job_ids), reason)

    def drain(self, machine: str, mode: str, reason: str) -> None:
        how = getattr(self.htcondor.DrainTypes, mode.capitalize())
        startd = self._startd(machine)
        try:
            startd.drainJobs(how, reason=reason)
        except TypeError:  # the classic bindings have no reason argument
            startd.drainJobs(how)

    def cancel_drain(self, machine: str) -> None:
        self._startd(machine).cancelDrainJobs()

    def off_peaceful(self, machine: str) -> None:
        master = self._collector().locate(self.htcondor.DaemonTypes.Master, machine)
        self.htcondor.send_command(master, self.htcondor.DaemonCommands.DaemonsOffPeaceful)


# -- the adapter -------------------------------------------------------------------------

DRAIN_MODES = ("graceful", "quick", "fast")


class CondorOptions(PluginOptions):
    """An HTCondor site's ``[batch.options]`` (the table in docs/pbs-htcondor.md):
    the daemons to use (``None``: the local configuration's) and :class:`CondorBatch`'s
    arguments of the same names."""

    collector: str | None = None
    schedd: str | None = None
    drain_mode: str = "graceful"
    default_walltime: Annotated[float, plugins.number("seconds", text=True)] = Field(3600.0, gt=0)
    submit_attributes: dict[str, str] = Field(default_factory=dict)

    @field_validator("drain_mode")
    @classmethod
    def _known_mode(cls, v: str) -> str:
        if v not in DRAIN_MODES:
            raise ValueError(f"unknown drain_mode {v!r}; valid: {', '.join(DRAIN_MODES)}")
        return v

    @field_validator("submit_attributes", mode="before")
    @classmethod
    def _string_attributes(cls, v: Any) -> Any:
        if v is None:
            return {}
        if not isinstance(v, Mapping) or not all(
            isinstance(k, str) and isinstance(x, str) for k, x in v.items()
        ):
            raise ValueError("must map submit commands to strings")
        return v


class CondorBatch:
    """An HTCondor pool as a :class:`~elasticsite.batch.base.BatchSystem`.

    ``drain_mode`` is ``graceful`` (running jobs finish, within ``MaxJobRetirementTime``),
    ``quick`` or ``fast`` (jobs are evicted back to the queue). ``submit_attributes`` are
    added to every submit description (e.g. ``{"+VMType": '"small"'}``).
    """

    def __init__(
        self,
        pool: CondorPool | None = None,
        *,
        drain_mode: str = "graceful",
        default_walltime: float = 3600.0,
        submit_attributes: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if drain_mode not in DRAIN_MODES:
            raise BatchError(f"unknown drain_mode {drain_mode!r}; valid: {', '.join(DRAIN_MODES)}")
        if not default_walltime > 0:
            raise BatchError(f"default_walltime must be > 0 seconds, got {default_walltime}")
        self.pool: CondorPool = pool if pool is not None else BindingsPool()
        self.drain_mode = drain_mode
        self.default_walltime = float(default_walltime)
        self.submit_attributes = dict(submit_attributes or {})
        self.clock = clock
        self.expected: dict[str, int] = {}
        """Nodes declared with :meth:`add_node` (name -> cores), listed DOWN until they report."""
        self._requirements: dict[str, dict[str, str | int]] = {}

    @classmethod
    def from_options(cls, options: CondorOptions | Mapping[str, Any]) -> CondorBatch:
        """Build from validated :class:`CondorOptions`, or from a plain options table
        (validated here, before the bindings are needed: an unknown key or a bad value is
        one :class:`BatchError` line)."""
        if not isinstance(options, CondorOptions):
            valid = list(CondorOptions.model_fields)
            unknown = sorted(set(options) - set(valid))
            if unknown:
                raise BatchError(
                    f"unknown HTCondor option(s) {', '.join(unknown)}; valid: {', '.join(valid)}"
                )
            options = validate_options(CondorOptions, options, "HTCondor", BatchError)
        pool = BindingsPool(options.collector, options.schedd)
        return cls(
            pool,
            drain_mode=options.drain_mode,
            default_walltime=options.default_walltime,
            submit_attributes=options.submit_attributes,
        )

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        """Run one bindings call; anything it raises becomes a BatchError naming ``what``."""
        try:
            return call()
        except BatchError:
            raise
        except Exception as exc:  # the bindings raise HTCondorException, RuntimeError, ...
            raise BatchError(f"HTCondor {what} failed: {exc}") from exc

    # -- reading ------------------------------------------------------------------------

    def _jobs(self) -> list[CondorJob]:
        ads = self._call(
            "job query", lambda: self.pool.jobs(f"JobStatus == {IDLE} || JobStatus == {RUNNING}")
        )
        jobs = parse_jobs(ads, self.default_walltime)
        self._requirements = {j.job.id: j.requirements for j in jobs}
        return jobs

    def _nodes(self) -> list[Node]:
        nodes = parse_nodes(self._call("startd query", self.pool.slots))
        seen = {n.name for n in nodes}
        for name, cores in sorted(self.expected.items()):
            if name not in seen:
                nodes.append(Node(name, cores, NodeState.DOWN))
        return nodes

    def snapshot(self) -> BatchView:
        now = self.clock()
        jobs = self._jobs()
        nodes = self._nodes()
        queued = queue_order(j.job for j in jobs if j.job.state is JobState.QUEUED)
        running = [j.job for j in jobs if j.job.state is JobState.RUNNING]
        return BatchView(taken_at=now, queued=queued, running=running, nodes=nodes)

    def requirements(self, job_id: str) -> dict[str, str | int]:
        """The Cloud Scheduler VM attributes of a job seen in the last snapshot (``{}`` if none)."""
        if job_id not in self._requirements:
            self._jobs()
        if job_id not in self._requirements:
            raise UnknownJob(f"no idle or running job {job_id!r} in the HTCondor queue")
        return dict(self._requirements[job_id])

    def _find(self, job_id: str) -> Job:
        for job in self._jobs():
            if job.job.id == job_id or (("." not in job_id) and job.job.id == f"{job_id}.0"):
                return job.job
        raise UnknownJob(f"no idle or running job {job_id!r} in the HTCondor queue")

    def _node(self, name: str) -> Node:
        for node in self._nodes():
            if node.name == name:
                return node
        raise UnknownNode(f"no startd on machine {name!r} and no node declared by that name")

    # -- nodes --------------------------------------------------------------------------

    def add_node(self, name: str, cores: int) -> None:
        """Expect a startd on ``name``: DOWN until it reports (startds join by themselves)."""
        if not name or cores < 1:
            raise BatchError(f"add_node: need a name and cores >= 1, got {name!r}, {cores}")
        self.expected.setdefault(name, cores)

    def drain(self, name: str, reason: str) -> None:
        """``drainJobs`` in :attr:`drain_mode`; a node already draining or down is left alone."""
        node = self._node(name)
        if node.state in (NodeState.IDLE, NodeState.BUSY, NodeState.UNKNOWN):
            self._call(f"drain of {name}", lambda: self.pool.drain(name, self.drain_mode, reason))

    def undrain(self, name: str) -> None:
        node = self._node(name)
        if node.state in (NodeState.DRAINING, NodeState.DRAINED):
            self._call(f"cancelling the drain of {name}", lambda: self.pool.cancel_drain(name))

    def remove_node(self, name: str) -> None:
        """Vacate its jobs back to the queue and turn its daemons off peacefully."""
        self.expected.pop(name, None)
        if name not in {n.name for n in parse_nodes(self._call("startd query", self.pool.slots))}:
            return
        on_node = [j.job.id for j in self._jobs() if j.job.node == name]
        if on_node:  # drain first, or the negotiator matches them right back here
            if self._node(name).state not in (NodeState.DRAINING, NodeState.DRAINED):
                reason = f"node {name} removed by elasticsite"
                self._call(f"drain of {name}", lambda: self.pool.drain(name, "graceful", reason))
            self._vacate(on_node, f"node {name} removed by elasticsite")
        self._call(f"turning off {name}", lambda: self.pool.off_peaceful(name))

    # -- jobs ---------------------------------------------------------------------------

    def submit(self, request: JobRequest) -> str:
        checked_command(request)
        description = submit_description(request, self.submit_attributes)
        cluster = self._call("submit", lambda: self.pool.submit(description))
        return f"{cluster}.0"

    def set_priority(self, job_id: str, priority: int) -> None:
        job = self._find(job_id)
        self._call(
            f"edit of {job.id}", lambda: self.pool.edit([job.id], "JobPrio", str(int(priority)))
        )

    def move_to_front(self, job_id: str) -> None:
        """``JobPrio`` one above every other queued job's (running jobs: no-op)."""
        jobs = [j.job for j in self._jobs()]
        job = next((j for j in jobs if j.id == job_id), None)
        if job is None:
            raise UnknownJob(f"no idle or running job {job_id!r} in the HTCondor queue")
        if job.state is not JobState.QUEUED:
            return
        order = queue_order(j for j in jobs if j.state is JobState.QUEUED)
        if order[0].id == job.id:
            return
        top = order[0].priority + 1
        self._call(f"edit of {job.id}", lambda: self.pool.edit([job.id], "JobPrio", str(top)))

    def preempt(self, job_id: str) -> None:
        """Hold then release a running job: it leaves its slot and is idle again."""
        job = self._find(job_id)
        if job.state is JobState.RUNNING:
            self._vacate([job.id], "preempted by elasticsite")

    def redirect(self, job_id: str, target: str) -> None:
        """HTCondor has no partitions: jobs reach cloud workers through their
        requirements (``VMType``), so there is nothing to redirect to."""
        raise BatchError(
            f"redirect {job_id} to {target!r}: HTCondor has no partitions; send jobs to "
            "cloud workers through their requirements (VMType) instead"
        )

    def _vacate(self, job_ids: list[str], reason: str) -> None:
        self._call("hold", lambda: self.pool.act("Hold", job_ids, reason))
        self._call("release", lambda: self.pool.act("Release", job_ids, reason))


def _create(options: CondorOptions, site: SiteInfo) -> CondorBatch:
    return CondorBatch.from_options(options)


plugin = BatchPlugin(CondorOptions, _create)
"""The ``htcondor`` entry point of ``elasticsite.batch``."""
