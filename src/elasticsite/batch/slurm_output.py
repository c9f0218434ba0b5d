"""Reading Slurm's output: jobs from ``squeue``, nodes from ``sinfo``/``scontrol``.

Jobs are read by default from ``squeue --array --format`` with a field separator
(:data:`SQUEUE_FIELDS`): those format codes have not changed in a decade, and at
10,000 queued jobs ``squeue --json`` costs seconds and 3 kB of JSON per job
(benchmarks/slurm_sense.py). ``squeue --json`` is read too. The JSON is read with
plain dict access and no schema: its layout changed between releases (22.05's plain
numbers became ``{"set", "infinite", "number"}`` objects in 23.02, ``job_state`` a
list, ``job_resources`` a tree in 24.05), and a monitoring loop must keep working
on whatever version a site runs.

Nodes and their state table are read in :mod:`~elasticsite.batch.slurm_nodes`, the
version-tolerant values in :mod:`~elasticsite.batch.slurm_values`; this module offers
their names too. Malformed output is one :class:`BatchError` naming the command.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from elasticsite import attributes
from elasticsite.batch.base import (
    BatchError,
)
from elasticsite.batch.slurm_nodes import jobs_per_node, node_state, nodes_from, parse_nodes
from elasticsite.batch.slurm_states import job_state, translate
from elasticsite.batch.slurm_values import (
    expand_hostlist,
    load_json,
    read_int,
    read_number,
    read_text,
    read_time,
    read_words,
)
from elasticsite.model import Job, JobState

__all__ = [
    "SQUEUE_FORMAT_ARGV",
    "STATE_ATTRIBUTE",
    "expand_hostlist",
    "job_attributes",
    "jobs_per_node",
    "load_json",
    "node_state",
    "nodes_from",
    "parse_nodes",
    "parse_squeue",
    "parse_squeue_format",
    "read_duration",
    "read_local_time",
    "read_number",
    "read_text",
    "read_time",
    "read_words",
]


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


def job_attributes(
    partition: str,
    qos: str,
    account: str,
    features: str,
    name: str,
    nodes: Sequence[str],
    node_count: int,
    state: str,
    reason: str,
    held: bool,
) -> Mapping[str, str]:
    """A job's :mod:`~elasticsite.attributes` from squeue's fields (empty ones left out).

    Slurm's own state words (``PENDING``, ``CONFIGURING`` ...) go under ``slurm.state``.
    """
    found = {
        attributes.PARTITION: partition,
        attributes.QOS: qos,
        attributes.ACCOUNT: account,
        attributes.FEATURES: features,
        attributes.NAME: name,
        attributes.NODES: ",".join(nodes),
        attributes.NODE_COUNT: str(node_count),
        attributes.REASON: "" if reason == "None" else reason,
        attributes.HELD: "true" if held else "",
        STATE_ATTRIBUTE: state,
    }
    return {k: v for k, v in found.items() if v and v.isprintable()}


STATE_ATTRIBUTE = "slurm.state"
"""Slurm's own state words for a job, e.g. ``"PENDING"`` or ``"RUNNING"``."""


_QUEUED = frozenset(
    {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT"}
)
"""Waiting to start. CONFIGURING: given nodes that are still booting (powered down,
or declared and not yet registered); it has not started, and its ``nodes`` attribute
says which nodes it waits for."""
_RUNNING = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "STAGE_OUT"})
# Everything else (COMPLETED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL, PREEMPTED, BOOT_FAIL,
# DEADLINE, OUT_OF_MEMORY, ...) has finished: the snapshot leaves it out, as it does a
# state the table (batch/slurm_states.py) does not know, with a warning.


def _listed(words: Sequence[str], held: bool) -> JobState | None:
    """The state of a job a snapshot lists (waiting: QUEUED, REQUEUED or HELD; or
    RUNNING), or None for one it leaves out."""
    if not words or words[0] not in _LISTED:
        job_state(words)  # an ended job; a state the table lacks is warned of here
        return None
    return translate(words, 0, held)[0]


_LISTED = _QUEUED | _RUNNING


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
) -> tuple[list[Job], list[Job]]:
    """``squeue --json`` output -> (queued in priority order, running), with attributes.

    A pending job array not yet split into tasks counts as one queued job per task
    (ids ``ARRAY_TASK``); held jobs are left out of the queue unless ``include_held``,
    since no added node would start them.
    """
    data = load_json(text, "squeue --json")
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise BatchError("squeue --json: no 'jobs' list in the output")
    queued: list[tuple[float, float, int, int, Job]] = []
    running: list[Job] = []
    try:
        for raw in jobs:
            words = [w.upper() for w in read_words(raw.get("job_state"))]
            priority = read_int(raw.get("priority"))
            reason = read_text(raw.get("state_reason"))
            held = (
                bool(raw.get("hold"))
                or reason.startswith("JobHeld")
                or (bool(words) and words[0] in _QUEUED and priority == 0)
            )
            listed = _listed(words, held)
            if listed is None:
                continue
            state, base = listed, words[0]
            held = held or state is JobState.HELD
            job_id = int(raw["job_id"])
            array_id = read_int(raw.get("array_job_id"))
            task = read_number(raw.get("array_task_id"))
            cores = read_int(raw.get("cpus"))
            if cores <= 0:
                cores = max(
                    1, read_int(raw.get("tasks"), 1) * read_int(raw.get("cpus_per_task"), 1)
                )
            limit = read_number(raw.get("time_limit"))
            walltime = limit * 60.0 if limit else default_walltime
            submitted = read_time(raw.get("submit_time")) or 0.0
            nodes = _job_nodes(raw) if base in _RUNNING or base == "CONFIGURING" else ()
            name = read_text(raw.get("name"))
            attrs = job_attributes(
                partition=read_text(raw.get("partition")),
                qos=read_text(raw.get("qos")),
                account=read_text(raw.get("account")),
                features=read_text(raw.get("features")),
                name=name,
                nodes=nodes,
                node_count=read_int(raw.get("node_count"), 1),
                state=" ".join(words),
                reason=reason,
                held=held,
            )
            if task is not None:
                ids = [(f"{array_id}_{int(task)}", int(task))]
            elif array_id and read_text(raw.get("array_task_string")):
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
                    command=read_text(raw.get("command")) or name,
                    started_at=read_time(raw.get("start_time")) if running_now else None,
                    node=nodes[0] if running_now else None,
                    priority=priority,
                    user=read_text(raw.get("user_name")),
                    attributes=attrs,
                )
                if state is JobState.RUNNING:
                    running.append(job)
                elif include_held or not held:
                    queued.append((-priority, submitted, job_id, order, job))
    except (KeyError, TypeError, ValueError) as exc:
        raise BatchError(f"squeue --json: unexpected job record ({exc!r})") from exc
    queued.sort(key=lambda q: q[:4])
    return [q[4] for q in queued], running


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


def read_duration(text: str) -> float | None:
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


def read_local_time(text: str) -> float | None:
    """squeue's local ``YYYY-MM-DDTHH:MM:SS`` as epoch seconds; N/A, Unknown, None: None."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def _field(text: str) -> str:
    return "" if text in ("(null)", "N/A") else text


def parse_squeue_format(
    text: str, default_walltime: float = 3600.0, include_held: bool = False
) -> tuple[list[Job], list[Job]]:
    """Output of :data:`SQUEUE_FORMAT_ARGV` -> (queued in priority order, running).

    Same result as :func:`parse_squeue` on ``squeue --json``; pending arrays come one
    line per task already (``--array``).
    """
    queued: list[tuple[float, float, int, int, Job]] = []
    running: list[Job] = []
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
        words = state_text.upper().split()[:1]
        if _listed(words, False) is None:
            continue
        head, _, task = jid.partition("_")
        if not head.isdigit() or not cpus.isdigit() or not prio.isdigit():
            raise BatchError(f"squeue: line {number} is not a job line: {line[:80]!r}")
        priority = int(prio)
        base = words[0]
        held = reason.startswith("JobHeld") or (base in _QUEUED and priority == 0)
        state = translate(words, 0, held)[0]
        held = held or state is JobState.HELD
        nodes = tuple(expand_hostlist(nodes_text))
        running_now = state is JobState.RUNNING and bool(nodes)
        submitted = read_local_time(submit) or 0.0
        attrs = job_attributes(
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
            walltime=read_duration(limit) or default_walltime,
            submitted_at=submitted,
            state=state,
            command=name,
            started_at=read_local_time(start) if running_now else None,
            node=nodes[0] if running_now else None,
            priority=priority,
            user=user,
            attributes=attrs,
        )
        if state is JobState.RUNNING:
            running.append(job)
        elif include_held or not held:
            order = int(task) if task.isdigit() else 0
            queued.append((-priority, submitted, int(head), order, job))
    queued.sort(key=lambda q: q[:4])
    return [q[4] for q in queued], running
