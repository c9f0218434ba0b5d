"""Slurm, driven through its own commands and their machine-readable output.

One snapshot is two commands: one ``squeue`` for the jobs and ``sinfo --json`` for
the nodes (with their state flags), or ``scontrol show nodes --json`` on Slurm 23.02
and later, where ``sinfo --json`` reports partitions instead of nodes.

Jobs are read by default from ``squeue --array --format`` with a field separator
(:data:`SQUEUE_FIELDS`): those format codes have not changed in a decade, and at
10,000 queued jobs ``squeue --json`` costs seconds and 3 kB of JSON per job
(benchmarks/slurm_sense.py). ``jobs_from="json"`` reads ``squeue --json`` instead.
The JSON is read with plain dict access and no schema: its layout changed between
releases (22.05's plain numbers became ``{"set", "infinite", "number"}`` objects in
23.02, ``job_state`` a list, ``job_resources`` a tree in 24.05), and a monitoring
loop must keep working on whatever version a site runs.

Nodes the manager adds are Slurm *dynamic nodes* (``scontrol create node ...
state=cloud``) carrying a feature (``elastic`` by default) that a ``Nodeset`` of
slurm.conf puts in a partition; the cloud worker then runs ``slurmd -Z`` and
registers under that name. Every native node state, with its flags, is translated
by :func:`node_state` (the table is in its docstring and in docs/slurm.md).

Errors: every failure is a :class:`BatchError`; a job or node Slurm does not know
is :class:`UnknownJob` / :class:`UnknownNode`.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shlex
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
from elasticsite.batch.command import CommandError, CommandResult, Runner, run
from elasticsite.batch.hostlist import HostlistError, expand
from elasticsite.model import Job, JobState

__all__ = [
    "SlurmBatch",
    "SlurmJobInfo",
    "expand_hostlist",
    "jobs_per_node",
    "node_state",
    "parse_nodes",
    "parse_squeue",
    "parse_squeue_format",
]

log = logging.getLogger(__name__)

# ---- the node state table --------------------------------------------------------

_BASE: dict[str, NodeState] = {
    "IDLE": NodeState.IDLE,
    "ALLOCATED": NodeState.BUSY,
    "MIXED": NodeState.BUSY,
    "COMPLETING": NodeState.BUSY,
    "DOWN": NodeState.DOWN,
    "FUTURE": NodeState.DOWN,
    "UNKNOWN": NodeState.DOWN,
    "ERROR": NodeState.DOWN,
}
"""Slurm's base node state (the first word of ``sinfo``'s state) -> ours."""

_NOT_THERE = frozenset(
    {
        "NOT_RESPONDING",
        "POWERED_DOWN",
        "POWERING_UP",
        "POWERING_DOWN",
        "POWER_DOWN",
        "INVALID_REG",
        "REBOOT_ISSUED",
        "DYNAMIC_FUTURE",
    }
)
"""Flags saying the node's slurmd is not (or no longer) reporting: the node is DOWN."""

_NO_NEW_JOBS = frozenset({"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING"})
"""Flags (or compact states) saying the node takes no new job."""

_HARMLESS = frozenset(
    {
        "CLOUD",
        "DYNAMIC_NORM",
        "COMPLETING",
        "RESERVED",
        "MAINTENANCE",
        "MAINT",
        "PLANNED",
        "REBOOT_REQUESTED",
        "POWER_UP",
        "POWER_DRAIN",
        "RESUME",
        "UNDRAIN",
        "BLOCKED",
        "EXTERNAL",
    }
)
"""Flags that do not change what the manager may do with the node (see node_state)."""

_warned: set[str] = set()


def _warn_once(kind: str, value: str) -> None:
    """Log an untranslatable state or flag once per process, not once per snapshot."""
    key = f"{kind}:{value}"
    if key not in _warned:
        _warned.add(key)
        effect = "the node is UNKNOWN" if kind == "node state" else "ignored"
        log.warning("slurm: unknown %s %r: %s (see docs/slurm.md)", kind, value, effect)


def node_state(tokens: Sequence[str], alloc_cpus: int = 0) -> NodeState:
    """Translate Slurm's node state and flags, in this order of precedence:

    ====================================================  ==========================
    Slurm (base state + flags)                            NodeState
    ====================================================  ==========================
    any base + ``DRAIN``/``FAIL``, cores allocated or     DRAINING
    base ALLOCATED/MIXED/COMPLETING
    any base + ``DRAIN``/``FAIL``, nothing allocated      DRAINED
    ``DOWN``, ``FUTURE``, ``UNKNOWN`` (not registered)    DOWN
    any base + ``NOT_RESPONDING``, ``POWERED_DOWN``,      DOWN
    ``POWERING_UP``, ``POWERING_DOWN``, ``POWER_DOWN``,
    ``INVALID_REG``, ``REBOOT_ISSUED``, ``DYNAMIC_FUTURE``
    ``IDLE``                                              IDLE
    ``ALLOCATED``, ``MIXED``, ``COMPLETING``              BUSY
    flags ``CLOUD``, ``DYNAMIC_NORM``, ``RESERVED``,      (no effect)
    ``MAINTENANCE``, ``PLANNED``, ``REBOOT_REQUESTED``,
    ``POWER_UP``, ``COMPLETING`` ...
    a base state not listed here                          UNKNOWN (warned once)
    ====================================================  ==========================

    A drained node that is also powered down is DRAINED, not DOWN: it runs nothing
    and takes nothing, which is what the manager needs to know to remove it. An
    unknown flag is ignored with a warning (once per flag).
    """
    words = [t.upper() for t in tokens if t]
    if not words:
        _warn_once("node state", "")
        return NodeState.UNKNOWN
    base, flags = words[0], set(words[1:])
    if base in ("DRAINED", "DRAINING"):  # compact forms: the drain is the base word
        flags.add(base)
        base = "ALLOCATED" if base == "DRAINING" else "IDLE"
    for flag in flags - _NOT_THERE - _NO_NEW_JOBS - _HARMLESS:
        _warn_once("node flag", flag)
    mapped = _BASE.get(base)
    if mapped is None:
        _warn_once("node state", base)
        return NodeState.UNKNOWN
    if flags & _NO_NEW_JOBS:
        busy = mapped is NodeState.BUSY or alloc_cpus > 0 or "COMPLETING" in flags
        return NodeState.DRAINING if busy else NodeState.DRAINED
    if mapped is NodeState.DOWN or flags & _NOT_THERE:
        return NodeState.DOWN
    if mapped is NodeState.IDLE and "COMPLETING" in flags:
        return NodeState.BUSY
    return mapped


# ---- version-tolerant field access -------------------------------------------------


def _num(value: Any, default: float | None = None) -> float | None:
    """A number as any Slurm version writes it: plain, or ``{"set", "infinite", "number"}``.

    Unset and infinite values, and 22.05's NO_VAL/INFINITE sentinels, give ``default``.
    """
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return default
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    if value in (0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFE):
        return default  # INFINITE / NO_VAL (32 and 64 bit)
    return value


def _int(value: Any, default: int = 0) -> int:
    number = _num(value)
    return default if number is None else int(number)


def _time(value: Any) -> float | None:
    """An epoch time; 0 (never) and unset give None."""
    number = _num(value)
    return float(number) if number else None


def _words(value: Any) -> list[str]:
    """A state as a list of words: 22.05 writes ``"RUNNING"``, 23.02+ ``["RUNNING"]``."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def _text(value: Any) -> str:
    if isinstance(value, list):  # 24.05+ writes features as a list
        return ",".join(str(v) for v in value)
    return value if isinstance(value, str) else ""


def expand_hostlist(expr: str) -> list[str]:
    """Slurm's compact host list (``"n[01-03,7],gpu1"``) as a list of names."""
    try:
        return expand(expr)
    except HostlistError as exc:
        raise BatchError(f"slurm: {exc}") from None


def _array_tasks(spec: str) -> list[int]:
    """Task ids of a pending array: ``"0-9999"``, ``"1,3,5-9:2"``, ``"0-4%2"``."""
    spec = spec.split("%", 1)[0]
    tasks: list[int] = []
    for item in spec.split(","):
        rng, _, step = item.partition(":")
        lo, _, hi = rng.partition("-")
        if not lo.strip().isdigit():
            continue
        end = int(hi) if hi.strip().isdigit() else int(lo)
        tasks.extend(range(int(lo), end + 1, int(step) if step.isdigit() and step != "0" else 1))
    return tasks


# ---- parsing -------------------------------------------------------------------


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise BatchError(f"{what}: output is not JSON ({exc}); got {text[:80]!r}") from exc
    if not isinstance(data, dict):
        raise BatchError(f"{what}: expected a JSON object, got {type(data).__name__}")
    errors = data.get("errors") or []
    if errors:
        first = errors[0]
        detail = (
            first.get("description") or first.get("error") if isinstance(first, dict) else first
        )
        raise BatchError(f"{what}: slurm reported an error: {detail}")
    return data


@dataclass(frozen=True, slots=True)
class SlurmJobInfo:
    """What Slurm knows about a job beyond :class:`~elasticsite.model.Job`'s fields."""

    partition: str
    qos: str
    account: str
    features: str
    name: str
    nodes: tuple[str, ...]
    node_count: int
    state: str
    """Slurm's own state words, e.g. ``"PENDING"`` or ``"RUNNING"``."""
    reason: str
    """Why a job waits (``Priority``, ``Resources``, ``JobHeldUser`` ...)."""
    held: bool


_QUEUED = frozenset(
    {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT"}
)
"""Waiting to start. CONFIGURING: given nodes that are still booting (powered down,
or declared and not yet registered); it has not started, and ``SlurmJobInfo.nodes``
says which nodes it waits for."""
_RUNNING = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "STAGE_OUT"})
# Everything else (COMPLETED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL, PREEMPTED, BOOT_FAIL,
# DEADLINE, OUT_OF_MEMORY, ...) has finished: the snapshot leaves it out.


def _job_nodes(raw: dict[str, Any]) -> tuple[str, ...]:
    resources = raw.get("job_resources")
    if isinstance(resources, dict):
        nodes = resources.get("nodes")
        if isinstance(nodes, dict):  # 24.05+: {"list": "...", "allocation": [{"name"}]}
            names = [a.get("name") for a in nodes.get("allocation") or [] if isinstance(a, dict)]
            if all(names) and names:
                return tuple(str(n) for n in names)
        allocated = resources.get("allocated_nodes")
        if isinstance(allocated, list):  # 22.05 - 23.11
            names = [a.get("nodename") for a in allocated if isinstance(a, dict)]
            if all(names) and names:
                return tuple(str(n) for n in names)
    nodes_text = raw.get("nodes")
    return tuple(expand_hostlist(nodes_text)) if isinstance(nodes_text, str) else ()


def parse_squeue(
    text: str, default_walltime: float = 3600.0, include_held: bool = False
) -> tuple[list[Job], list[Job], dict[str, SlurmJobInfo]]:
    """``squeue --json`` output -> (queued in priority order, running, details by job id).

    A pending job array not yet split into tasks counts as one queued job per task
    (ids ``ARRAY_TASK``); held jobs are left out of the queue unless ``include_held``,
    since no added node would start them.
    """
    data = _load(text, "squeue --json")
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise BatchError("squeue --json: no 'jobs' list in the output")
    queued: list[tuple[float, float, int, int, Job]] = []
    running: list[Job] = []
    details: dict[str, SlurmJobInfo] = {}
    try:
        for raw in jobs:
            words = [w.upper() for w in _words(raw.get("job_state"))]
            if not words:
                continue
            base = words[0]
            if base in _QUEUED:
                state = JobState.QUEUED
            elif base in _RUNNING:
                state = JobState.RUNNING
            else:
                continue
            job_id = int(raw["job_id"])
            array_id = _int(raw.get("array_job_id"))
            task = _num(raw.get("array_task_id"))
            priority = _int(raw.get("priority"))
            reason = _text(raw.get("state_reason"))
            held = (
                bool(raw.get("hold"))
                or reason.startswith("JobHeld")
                or (state is JobState.QUEUED and priority == 0)
            )
            cores = _int(raw.get("cpus"))
            if cores <= 0:
                cores = max(1, _int(raw.get("tasks"), 1) * _int(raw.get("cpus_per_task"), 1))
            limit = _num(raw.get("time_limit"))
            walltime = limit * 60.0 if limit else default_walltime
            submitted = _time(raw.get("submit_time")) or 0.0
            nodes = _job_nodes(raw) if base in _RUNNING or base == "CONFIGURING" else ()
            info = SlurmJobInfo(
                partition=_text(raw.get("partition")),
                qos=_text(raw.get("qos")),
                account=_text(raw.get("account")),
                features=_text(raw.get("features")),
                name=_text(raw.get("name")),
                nodes=nodes,
                node_count=_int(raw.get("node_count"), 1),
                state=" ".join(words),
                reason=reason,
                held=held,
            )
            if task is not None:
                ids = [(f"{array_id}_{int(task)}", int(task))]
            elif array_id and _text(raw.get("array_task_string")):
                ids = [(f"{array_id}_{t}", t) for t in _array_tasks(raw["array_task_string"])]
            else:
                ids = [(str(job_id), 0)]
            running_now = state is JobState.RUNNING and bool(nodes)
            for jid, order in ids:
                job = Job(
                    id=jid,
                    cores=cores,
                    walltime=walltime,
                    submitted_at=submitted,
                    state=state,
                    command=_text(raw.get("command")) or info.name,
                    started_at=_time(raw.get("start_time")) if running_now else None,
                    node=nodes[0] if running_now else None,
                    priority=priority,
                    user=_text(raw.get("user_name")),
                )
                details[jid] = info
                if state is JobState.RUNNING:
                    running.append(job)
                elif include_held or not held:
                    queued.append((-priority, submitted, job_id, order, job))
    except (KeyError, TypeError, ValueError) as exc:
        raise BatchError(f"squeue --json: unexpected job record ({exc!r})") from exc
    queued.sort(key=lambda q: q[:4])
    return [q[4] for q in queued], running, details


SEP = "\x1f"
"""Field separator of the formatted squeue (ASCII unit separator: in no name or feature)."""
SQUEUE_FIELDS = ("%i", "%T", "%C", "%l", "%Q", "%V", "%S", "%P", "%q", "%a", "%u", "%D", "%r",
                 "%N", "%f", "%j")  # fmt: skip
"""Job id (ARRAY_TASK for array tasks), state, CPUs, time limit, priority, submit and
start time, partition, QOS, account, user, node count, reason, nodes, features, name."""
SQUEUE_STATES = ",".join(sorted(_QUEUED | _RUNNING))
SQUEUE_FORMAT_ARGV = (
    "squeue", "--noheader", "--array", f"--states={SQUEUE_STATES}",
    f"--format={SEP.join(SQUEUE_FIELDS)}",
)  # fmt: skip
"""The command behind ``jobs_from="format"`` (the default)."""


def _duration(text: str) -> float | None:
    """Slurm's ``[D-]HH:MM:SS`` / ``MM:SS`` / ``MM`` in seconds; UNLIMITED and the like: None."""
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    if not all(p.isdigit() for p in parts) or len(parts) > 3 or (days and not days.isdigit()):
        return None
    if len(parts) == 1:  # minutes
        seconds = int(parts[0]) * 60
    else:
        seconds = 0
        for part in parts:
            seconds = seconds * 60 + int(part)
    return seconds + int(days or 0) * 86400.0


def _local_time(text: str) -> float | None:
    """squeue's local ``YYYY-MM-DDTHH:MM:SS`` as epoch seconds; N/A, Unknown, None: None."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def _field(text: str) -> str:
    return "" if text in ("(null)", "N/A") else text


def parse_squeue_format(
    text: str, default_walltime: float = 3600.0, include_held: bool = False
) -> tuple[list[Job], list[Job], dict[str, SlurmJobInfo]]:
    """Output of :data:`SQUEUE_FORMAT_ARGV` -> (queued in priority order, running, details).

    Same result as :func:`parse_squeue` on ``squeue --json``; pending arrays come one
    line per task already (``--array``).
    """
    queued: list[tuple[float, float, int, int, Job]] = []
    running: list[Job] = []
    details: dict[str, SlurmJobInfo] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split(SEP)
        if len(fields) != len(SQUEUE_FIELDS):
            raise BatchError(
                f"squeue: line {number} has {len(fields)} fields, expected "
                f"{len(SQUEUE_FIELDS)} (not the --format elasticsite asked for?): {line[:80]!r}"
            )
        (jid, state_text, cpus, limit, prio, submit, start, partition, qos, account, user,
         node_count, reason, nodes_text, features, name) = fields  # fmt: skip
        base = state_text.split()[0].upper() if state_text.strip() else ""
        if base in _QUEUED:
            state = JobState.QUEUED
        elif base in _RUNNING:
            state = JobState.RUNNING
        else:
            continue
        head, _, task = jid.partition("_")
        if not head.isdigit() or not cpus.isdigit() or not prio.isdigit():
            raise BatchError(f"squeue: line {number} is not a job line: {line[:80]!r}")
        priority = int(prio)
        held = reason.startswith("JobHeld") or (state is JobState.QUEUED and priority == 0)
        nodes = tuple(expand_hostlist(nodes_text))
        running_now = state is JobState.RUNNING and bool(nodes)
        submitted = _local_time(submit) or 0.0
        info = SlurmJobInfo(
            partition=partition,
            qos=_field(qos),
            account=_field(account),
            features=_field(features),
            name=name,
            nodes=nodes,
            node_count=int(node_count) if node_count.isdigit() else 1,
            state=base,
            reason=reason,
            held=held,
        )
        job = Job(
            id=jid,
            cores=max(1, int(cpus)),
            walltime=_duration(limit) or default_walltime,
            submitted_at=submitted,
            state=state,
            command=name,
            started_at=_local_time(start) if running_now else None,
            node=nodes[0] if running_now else None,
            priority=priority,
            user=user,
        )
        details[jid] = info
        if state is JobState.RUNNING:
            running.append(job)
        elif include_held or not held:
            order = int(task) if task.isdigit() else 0
            queued.append((-priority, submitted, int(head), order, job))
    queued.sort(key=lambda q: q[:4])
    return [q[4] for q in queued], running, details


def jobs_per_node(running: Iterable[Job], info: Mapping[str, SlurmJobInfo]) -> dict[str, int]:
    """How many running jobs each node holds (a multi-node job counts on each)."""
    counts: dict[str, int] = {}
    for job in running:
        details = info.get(job.id)
        names = details.nodes if details else ((job.node,) if job.node else ())
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return counts


def parse_nodes(text: str, running_jobs: Mapping[str, int] | None = None) -> list[Node]:
    """``sinfo --json`` (22.05) or ``scontrol show nodes --json`` (23.02+) -> nodes.

    ``running_jobs`` (from the same snapshot) gives each node its count of running jobs.
    """
    return _nodes_from(_load(text, "slurm node list"), running_jobs)


def _nodes_from(data: Mapping[str, Any], running_jobs: Mapping[str, int] | None) -> list[Node]:
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list):
        raise BatchError("slurm node list: no 'nodes' list in the output")
    per_node = running_jobs or {}
    nodes: list[Node] = []
    try:
        for raw in raw_nodes:
            name = str(raw["name"])
            cores = _int(raw.get("cpus"))
            alloc = _int(raw.get("alloc_cpus"))
            tokens = _words(raw.get("state")) + _words(raw.get("state_flags"))
            state = node_state(tokens, alloc)
            free = max(0, cores - alloc) if state in (NodeState.IDLE, NodeState.BUSY) else 0
            nodes.append(
                Node(
                    name=name,
                    cores=cores,
                    state=state,
                    running_jobs=per_node.get(name, 0),
                    free_cores=free,
                    reason=_text(raw.get("reason")),
                    heartbeat_at=None,
                    registered_at=_time(raw.get("slurmd_start_time")),
                )
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise BatchError(f"slurm node list: unexpected node record ({exc!r})") from exc
    return nodes


# ---- the adapter ---------------------------------------------------------------------

_OPTIONS = frozenset(
    {
        "partition",
        "node_feature",
        "default_walltime",
        "include_held",
        "jobs_from",
        "demand_partitions",
        "remove_timeout",
        "command_timeout",
    }
)


class SlurmBatch:
    """A Slurm cluster as a :class:`~elasticsite.batch.base.BatchSystem`.

    ``partition`` is where :meth:`submit` sends jobs (Slurm's default partition if
    None); ``node_feature`` is the feature given to nodes :meth:`add_node` creates,
    which slurm.conf's ``Nodeset`` maps to the partition of elastic nodes.
    ``jobs_info`` holds what the last snapshot learnt beyond :class:`Job`'s fields
    (partition, QOS, features, nodes ...), by job id. ``jobs_from`` picks how jobs
    are read: ``"format"`` (fast, the default) or ``"json"`` (``squeue --json``).
    ``demand_partitions``, when given, limits the jobs a snapshot reports to those
    submitted to one of these partitions (a job submitted to several counts if any is
    listed): the jobs cloud workers can serve, so jobs waiting for the static part of
    the cluster do not make the manager launch workers that cannot take them.
    """

    def __init__(
        self,
        runner: Runner = run,
        partition: str | None = None,
        node_feature: str = "elastic",
        default_walltime: float = 3600.0,
        include_held: bool = False,
        jobs_from: str = "format",
        demand_partitions: Sequence[str] | None = None,
        remove_timeout: float = 15.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not node_feature or not re.fullmatch(r"[A-Za-z0-9_.-]+", node_feature):
            raise BatchError(f"slurm: node_feature must be a plain word, got {node_feature!r}")
        if jobs_from not in ("format", "json"):
            raise BatchError(f"slurm: jobs_from must be 'format' or 'json', got {jobs_from!r}")
        self.jobs_from = jobs_from
        if isinstance(demand_partitions, str) or (
            demand_partitions is not None
            and not all(isinstance(p, str) and p for p in demand_partitions)
        ):
            raise BatchError(
                f"slurm: demand_partitions must be a list of partition names, "
                f"got {demand_partitions!r}"
            )
        self.demand_partitions = frozenset(demand_partitions or ())
        self._run = runner
        self.partition = partition
        self.node_feature = node_feature
        self.default_walltime = float(default_walltime)
        self.include_held = include_held
        self.remove_timeout = remove_timeout
        self.clock = clock
        self.jobs_info: dict[str, SlurmJobInfo] = {}
        self._nodes_argv: tuple[str, ...] = ("sinfo", "--json")

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SlurmBatch:
        """Build from the site config's ``[batch]`` options table (unknown keys refused)."""
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise BatchError(
                f"slurm: unknown option(s) {', '.join(unknown)} "
                f"(known: {', '.join(sorted(_OPTIONS))})"
            )
        kwargs = {k: v for k, v in options.items() if k != "command_timeout"}
        timeout = options.get("command_timeout")
        if timeout is not None:
            seconds = float(timeout)

            def timed(argv: Sequence[str]) -> CommandResult:
                return run(argv, timeout=seconds)

            kwargs["runner"] = timed
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise BatchError(f"slurm: bad option value ({exc})") from exc

    # -- commands ------------------------------------------------------------------

    def _cmd(self, *argv: str) -> str:
        return self._run(argv).stdout

    def _try(self, *argv: str) -> tuple[bool, str]:
        """Run a command; (True, output) or (False, its error output)."""
        try:
            return True, self._cmd(*argv)
        except CommandError as exc:
            return False, exc.output

    # -- sensing ---------------------------------------------------------------------

    def _read_jobs(
        self, include_held: bool
    ) -> tuple[list[Job], list[Job], dict[str, SlurmJobInfo]]:
        if self.jobs_from == "json":
            text = self._cmd("squeue", "--json")
            return parse_squeue(text, self.default_walltime, include_held)
        text = self._cmd(*SQUEUE_FORMAT_ARGV)
        return parse_squeue_format(text, self.default_walltime, include_held)

    def snapshot(self) -> BatchView:
        """Queued and running jobs and all nodes: one ``squeue`` and one node query."""
        taken = self.clock()
        queued, running, info = self._read_jobs(self.include_held)
        data = _load(self._cmd(*self._nodes_argv), " ".join(self._nodes_argv))
        if "nodes" not in data and "sinfo" in data:  # 23.02+: sinfo --json lists partitions
            self._nodes_argv = ("scontrol", "show", "nodes", "--json")
            data = _load(self._cmd(*self._nodes_argv), " ".join(self._nodes_argv))
        nodes = _nodes_from(data, jobs_per_node(running, info))
        self.jobs_info = info
        if self.demand_partitions:
            wanted = self.demand_partitions

            def served(job: Job) -> bool:
                i = info.get(job.id)
                return i is not None and not wanted.isdisjoint(i.partition.split(","))

            queued = [j for j in queued if served(j)]
            running = [j for j in running if served(j)]
        return BatchView(taken_at=taken, queued=queued, running=running, nodes=nodes)

    # -- nodes -------------------------------------------------------------------------

    def _node_exists(self, name: str) -> bool:
        ok, out = self._try("scontrol", "show", "node", name, "--oneliner")
        if ok:
            return f"NodeName={name} " in out
        if "not found" in out:
            return False
        raise BatchError(f"node {name}: cannot ask slurm about it: {out}")

    def add_node(self, name: str, cores: int) -> None:
        """Create a dynamic node (powered down, DOWN) that a ``slurmd -Z`` will fill."""
        _check_name(name)
        if cores < 1:
            raise BatchError(f"add_node: cores must be >= 1, got {cores}")
        ok, out = self._try(
            "scontrol", "create", f"nodename={name}", f"cpus={cores}",
            f"feature={self.node_feature}", "state=cloud",
        )  # fmt: skip
        if not ok and not self._node_exists(name):
            raise BatchError(f"add_node {name}: scontrol create node failed: {out}")

    def drain(self, name: str, reason: str) -> None:
        """``state=drain``: running jobs go on, no new job starts there."""
        _check_name(name)
        reason = " ".join(reason.split()) or "drained by elasticsite"
        self._node_update(name, "state=drain", f"reason={reason}")

    def undrain(self, name: str) -> None:
        """``state=undrain``: clears the drain, leaves the rest (power, down) as it is."""
        _check_name(name)
        self._node_update(name, "state=undrain")

    def _node_update(self, name: str, *settings: str) -> None:
        # Ask first: slurmctld 22.05 was seen to crash (in slurm_conf_get_nodename) on
        # ``scontrol update nodename=X`` for an unknown X after dynamic nodes came and went.
        if not self._node_exists(name):
            raise UnknownNode(f"no node {name!r} in slurm")
        ok, out = self._try("scontrol", "update", f"nodename={name}", *settings)
        if not ok:
            if "Invalid node name" in out:
                raise UnknownNode(f"no node {name!r} in slurm")
            raise BatchError(f"node {name}: scontrol update {' '.join(settings)} failed: {out}")

    def remove_node(self, name: str) -> None:
        """Requeue what still runs there, then ``scontrol delete``; an unknown node: no-op."""
        _check_name(name)
        if not self._node_exists(name):  # already gone (and see _node_update)
            return
        deadline = time.monotonic() + self.remove_timeout
        requeued = False
        while True:
            ok, out = self._try("scontrol", "delete", f"nodename={name}")
            if ok or "Invalid node name" in out:
                return
            if "busy" not in out:
                raise BatchError(f"remove_node {name}: scontrol delete failed: {out}")
            if not requeued:
                jobs = self._jobs_on(name)
                if jobs:
                    log.info("node %s removed: requeueing %s", name, ", ".join(jobs))
                    self._try("scontrol", "requeue", ",".join(jobs))
                requeued = True
            if time.monotonic() > deadline:
                raise BatchError(
                    f"remove_node {name}: still busy after {self.remove_timeout:g} s "
                    f"(jobs completing there?): {out}"
                )
            time.sleep(0.3)

    def _jobs_on(self, name: str) -> list[str]:
        _, running, info = self._read_jobs(include_held=True)
        return [j.id for j in running if name in info[j.id].nodes]

    # -- jobs --------------------------------------------------------------------------

    def submit(self, request: JobRequest) -> str:
        """``sbatch --parsable --wrap``: one task with ``cores`` CPUs, walltime in minutes."""
        argv = checked_command(request)
        sbatch = [
            "sbatch", "--parsable", "--ntasks=1", f"--cpus-per-task={request.cores}",
            f"--time={max(1, math.ceil(request.walltime / 60.0))}",
            "--output=/dev/null", f"--job-name={_job_name(argv)}",
        ]  # fmt: skip
        if self.partition:
            sbatch.append(f"--partition={self.partition}")
        if request.priority:
            sbatch.append(f"--nice={-request.priority}")
        sbatch += ["--wrap", shlex.join(argv)]
        out = self._cmd(*sbatch).strip()
        job_id = out.split(";", 1)[0].strip()
        if not job_id.isdigit():
            raise BatchError(f"submit: sbatch printed no job id: {out!r}")
        return job_id

    def _job_update(self, verb: str, job_id: str, *argv: str) -> tuple[bool, str]:
        _check_job(job_id)
        ok, out = self._try(*argv)
        if not ok and "configuration not available now" in out:
            # Slurm re-checks the job after the change and finds its partition without a
            # usable node yet (elastic nodes not booted): the change itself was applied.
            log.debug("%s %s: applied; slurm notes: %s", verb, job_id, out)
            ok = True
        if not ok and "Invalid job id" in out:
            raise UnknownJob(f"no job {job_id!r} in slurm")
        if not ok and "already completed" in out.lower():
            raise BatchError(f"{verb}: job {job_id} has already finished")
        return ok, out

    def set_priority(self, job_id: str, priority: int) -> None:
        """Raise (or lower) a job ``priority`` points above its normal Slurm priority.

        Done with ``nice=-priority`` (``scontrol update jobid=X nice=N``), the same knob
        :meth:`submit` turns: ``set_priority(job, 0)`` restores Slurm's own order, and
        the job keeps aging as usual. Negative nice values need a Slurm administrator.
        """
        ok, out = self._job_update(
            "set_priority", job_id, "scontrol", "update", f"jobid={job_id}", f"nice={-priority}"
        )
        if not ok:
            raise BatchError(f"set_priority: job {job_id}: {out}")

    def move_to_front(self, job_id: str) -> None:
        """``scontrol top``; if the job is still not first, a priority above every other.

        ``scontrol top`` only reorders a user's own jobs (same partition, account and
        QOS), so a job of someone else can stay behind: the priority raise covers it.
        A running job: no-op.
        """
        ok, out = self._job_update("move_to_front", job_id, "scontrol", "top", job_id)
        if not ok and "no longer pending" in out:
            return  # running already
        queued, running, _ = self._read_jobs(include_held=True)
        if any(j.id == job_id for j in running):
            return
        ahead = [j for j in queued if j.id != job_id]
        mine = next((j for j in queued if j.id == job_id), None)
        if mine is None:
            raise BatchError(f"move_to_front: job {job_id} is not queued")
        if ahead and queued[0].id != job_id:  # fix its Slurm priority above all others
            top = max(j.priority for j in ahead)
            ok, out = self._job_update(
                "move_to_front", job_id, "scontrol", "update", f"jobid={job_id}",
                f"priority={min(top + 1, 0xFFFFFFFD)}",
            )  # fmt: skip
            if not ok:
                raise BatchError(f"move_to_front: job {job_id}: {out}")

    def preempt(self, job_id: str) -> None:
        """``scontrol requeue``: the running job is killed and queued again. Queued: no-op."""
        ok, out = self._job_update("preempt", job_id, "scontrol", "requeue", job_id)
        if not ok and "is pending" not in out:
            raise BatchError(f"preempt: job {job_id}: {out}")

    def cancel(self, job_id: str) -> None:
        """``scancel`` (tests and the CLI); cancelling a finished job is a no-op."""
        _check_job(job_id)
        self._cmd("scancel", job_id)


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_JOB = re.compile(r"\d+(_\d+)?")


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name or ""):
        raise BatchError(f"slurm: {name!r} is not a valid node name")


def _check_job(job_id: str) -> None:
    if not _JOB.fullmatch(str(job_id)):
        raise UnknownJob(f"no job {job_id!r} in slurm (ids are numbers, or ARRAY_TASK)")


def _job_name(argv: Sequence[str]) -> str:
    base = argv[0].rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", base)[:40] or "job"
