"""The embedded batch system's file: its schema, its migrations and its rows as jobs.

Version 2 added job attributes and partitions: ``jobs.attributes`` (JSON object),
``jobs.partition`` (the job's one partition, ``''`` for the default one) and
``nodes.partition``. Version 3 tells how each job ended and where its files are:
``jobs.signal``, ``jobs.reason``, ``jobs.workdir`` (its ``stdout`` and ``stderr`` are
there) and ``jobs.worker_log``; a job that ended is ``completed`` (exit code 0) or
``failed``, no longer ``done``. Version 4 added ``nodes.owner``, the user whose jobs
alone a node runs (``''``: anyone's). An older file is migrated in place when opened;
nothing in it is lost (its jobs and nodes are in the default partition and nobody's,
as before; its ``done`` jobs become completed or failed by their exit code).

The ``state`` column holds ``queued``, ``held``, ``running``, ``completed``,
``failed`` or ``cancelled``; a queued job that started before (``attempt`` > 0) is
read as requeued (:data:`STATES` is the translation table).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import sqlite3
from collections.abc import Mapping
from typing import NamedTuple

from elasticsite import attributes
from elasticsite.batch.base import BatchError, JobRequest, UnknownJob, checked_command
from elasticsite.batch.identity import checked_submitter
from elasticsite.jobs import Job, JobState

__all__ = [
    "FINISHED",
    "HELD_STATE",
    "JOB_COLUMNS",
    "QUEUE_ORDER",
    "SCHEMA_VERSION",
    "STATES",
    "Assignment",
    "Queued",
    "checked_node",
    "checked_partition",
    "checked_request",
    "create_or_migrate",
    "job_from_row",
    "job_key",
    "job_state",
]

log = logging.getLogger("elasticsite.batch.local")

SCHEMA_VERSION = 4
_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    command TEXT NOT NULL,
    cores INTEGER NOT NULL,
    walltime REAL NOT NULL,
    user TEXT NOT NULL DEFAULT '',
    priority INTEGER NOT NULL DEFAULT 0,
    front INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    node TEXT,
    exit_code INTEGER,
    pid INTEGER,
    attempt INTEGER NOT NULL DEFAULT 0,
    partition TEXT NOT NULL DEFAULT '',
    attributes TEXT NOT NULL DEFAULT '{}',
    signal INTEGER,
    reason TEXT NOT NULL DEFAULT '',
    workdir TEXT NOT NULL DEFAULT '',
    worker_log TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, node);
CREATE TABLE IF NOT EXISTS nodes (
    name TEXT PRIMARY KEY,
    cores INTEGER NOT NULL,
    up INTEGER NOT NULL DEFAULT 0,
    drain INTEGER NOT NULL DEFAULT 0,
    reason TEXT NOT NULL DEFAULT '',
    heartbeat_at REAL,
    registered_at REAL,
    declared_at REAL NOT NULL,
    partition TEXT NOT NULL DEFAULT '',
    owner TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "ALTER TABLE jobs ADD COLUMN partition TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE jobs ADD COLUMN attributes TEXT NOT NULL DEFAULT '{}'",
        "ALTER TABLE nodes ADD COLUMN partition TEXT NOT NULL DEFAULT ''",
    ),
    2: (
        "ALTER TABLE jobs ADD COLUMN signal INTEGER",
        "ALTER TABLE jobs ADD COLUMN reason TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE jobs ADD COLUMN workdir TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE jobs ADD COLUMN worker_log TEXT NOT NULL DEFAULT ''",
        # a negative code was a signal (-9 also a walltime kill, which is a signal too)
        "UPDATE jobs SET signal = -exit_code, exit_code = NULL "
        "WHERE state = 'done' AND exit_code < 0",
        "UPDATE jobs SET state = CASE WHEN exit_code = 0 THEN 'completed' ELSE 'failed' END "
        "WHERE state = 'done'",
    ),
    3: ("ALTER TABLE nodes ADD COLUMN owner TEXT NOT NULL DEFAULT ''",),
}
"""Statements taking a file from version N to N + 1."""

QUEUE_ORDER = "ORDER BY front DESC, priority DESC, id ASC"
JOB_COLUMNS = (
    "id, command, cores, walltime, user, priority, state, submitted_at, started_at, "
    "finished_at, node, exit_code, attributes, signal, reason, attempt"
)
HELD_STATE = "held"
"""A job's ``state`` column while it is held: queued, but no pass starts it."""

STATES: dict[str, JobState] = {
    "queued": JobState.QUEUED,  # JobState.REQUEUED once it started before
    HELD_STATE: JobState.HELD,
    "running": JobState.RUNNING,
    "completed": JobState.COMPLETED,
    "failed": JobState.FAILED,
    "cancelled": JobState.CANCELLED,
}
"""The ``state`` column's words and the job states they are."""
FINISHED = ("completed", "failed", "cancelled")


def create_or_migrate(tx: sqlite3.Connection, version: int) -> None:
    """Bring a file at ``version`` (0: new) to :data:`SCHEMA_VERSION`, in ``tx``."""
    if version == 0:
        for statement in filter(str.strip, _SCHEMA.split(";")):
            tx.execute(statement)
    else:
        for step in range(version, SCHEMA_VERSION):
            for statement in _MIGRATIONS[step]:
                tx.execute(statement)
    tx.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


class Assignment(NamedTuple):
    """A job a worker should be running: ``attempt`` tells a restart from the old run;
    ``user`` is whom it runs as (``""``: the worker's own account)."""

    job_id: str
    attempt: int
    argv: list[str]
    cores: int
    walltime: float
    user: str = ""


class Queued(NamedTuple):
    id: str
    cores: int
    walltime: float


def _attributes(text: str) -> Mapping[str, str]:
    if text == "{}":
        return attributes.EMPTY
    found = json.loads(text)
    return found if isinstance(found, dict) else attributes.EMPTY


_warned: set[str] = set()


def job_state(word: str, attempt: int) -> JobState:
    """The state of a job whose ``state`` column says ``word`` (see :data:`STATES`); a
    word this version does not know (a newer one wrote it) is UNKNOWN, warned once."""
    state = STATES.get(word)
    if state is None:
        if word not in _warned:
            _warned.add(word)
            log.warning("local batch: unknown job state %r: shown as unknown", word)
        return JobState.UNKNOWN
    if state is JobState.QUEUED and attempt:
        return JobState.REQUEUED
    return state


def job_from_row(row: sqlite3.Row | tuple) -> Job:
    """A :data:`JOB_COLUMNS` row as a :class:`Job`."""
    (jid, command, cores, walltime, user, prio, word, sub, start, fin, node, code, attrs,
     sig, reason, attempt) = row  # fmt: skip
    state = job_state(word, attempt)
    ran = state in (JobState.COMPLETED, JobState.FAILED)
    runtime = fin - start if ran and start is not None and fin is not None else None
    found = _attributes(attrs)
    if state is JobState.HELD:  # marked too, as every adapter marks a held job
        found = {**found, attributes.HELD: "true"}
    return Job(
        id=str(jid),
        cores=cores,
        walltime=walltime,
        submitted_at=sub,
        state=state,
        command=shlex.join(json.loads(command)),
        runtime=runtime,
        started_at=start,
        finished_at=fin,
        node=node,
        exit_code=code,
        priority=prio,
        user=user,
        attributes=found,
        signal=sig,
        reason=reason,
        attempts=attempt,
    )


def checked_node(doing: str, name: object, cores: object) -> None:
    """A node needs a non-empty name and a whole number of cores, at least one."""
    if not (isinstance(name, str) and name and isinstance(cores, int) and cores >= 1):
        raise BatchError(f"{doing}: need a name and cores >= 1, got {name!r}, {cores!r}")


def checked_partition(doing: str, partition: object) -> str:
    """One partition name (the embedded site runs a job in one partition only)."""
    if not isinstance(partition, str):
        raise BatchError(f"{doing}: partition must be a string, got {partition!r}")
    if partition and not (
        partition.isascii()
        and partition[0].isalnum()
        and partition.replace("-", "").replace("_", "").replace(".", "").isalnum()
    ):
        raise BatchError(
            f"{doing}: partition {partition!r}: one name of letters, digits, '-', '_' and '.'"
        )
    return partition


def checked_request(request: JobRequest) -> tuple[list[str], dict[str, str]]:
    """The request's command and attributes, once its fields have the types their
    columns hold and the checks every adapter makes (:func:`checked_command`) passed.

    A job for another user than this process's is taken only from root, for a user of
    this host with a home directory (its files go there): the workers run it as that
    user (:mod:`elasticsite.batch.identity`)."""
    if not isinstance(request, JobRequest):
        raise BatchError(f"submit: need a JobRequest, got {request!r}")
    for field, value, kind, told in (
        ("cores", request.cores, int, "an integer"),
        ("walltime", request.walltime, (int, float), "a number of seconds"),
        ("priority", request.priority, int, "an integer"),
        ("user", request.user, str, "a string"),
    ):
        if not isinstance(value, kind) or isinstance(value, bool):
            raise BatchError(f"submit: {field} must be {told}, got {value!r}")
    argv = checked_command(request)
    runs_as = checked_submitter(request.user)  # another user's job: as root only
    if runs_as is not None and not os.path.isdir(runs_as.home):
        raise BatchError(
            f"submit: user {runs_as.name} has no home directory ({runs_as.home}) for the "
            "job's files"
        )
    found = dict(request.attributes)
    for key, value in found.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise BatchError(f"submit: attributes must map strings to strings, got {key!r}")
        try:
            attributes.check(key, value)
        except attributes.InvalidAttribute as exc:
            raise BatchError(f"submit: {exc}") from None
    checked_partition("submit", found.get(attributes.PARTITION, ""))
    return argv, found


def job_key(job_id: str) -> int:
    """The row id of job ``job_id``, as :meth:`LocalBatch.submit` wrote it: digits only.

    Anything ``int()`` would also take (``" 1"``, ``"+1"``, ``"1_0"``, ``1.5``) names
    no job here, rather than another job than the caller meant.
    """
    if isinstance(job_id, str) and job_id.isascii() and job_id.isdigit():
        return int(job_id)
    raise UnknownJob(f"no job {job_id!r}: local batch job ids are integers")
