"""The embedded batch system's file: its schema, its migrations and its rows as jobs.

Version 2 added job attributes and partitions: ``jobs.attributes`` (JSON object),
``jobs.partition`` (the job's one partition, ``''`` for the default one) and
``nodes.partition``. Version 3 added ``nodes.owner``, the user whose jobs alone a
node runs (``''``: anyone's). An older file is migrated in place when opened; nothing
in it is lost (its jobs and nodes are in the default partition and nobody's, as before).
"""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
from collections.abc import Mapping
from typing import NamedTuple

from elasticsite import attributes
from elasticsite.batch.base import BatchError, JobRequest, UnknownJob, checked_command
from elasticsite.batch.identity import checked_submitter
from elasticsite.model import Job, JobState

__all__ = [
    "HELD_STATE",
    "JOB_COLUMNS",
    "QUEUE_ORDER",
    "SCHEMA_VERSION",
    "Assignment",
    "Queued",
    "checked_node",
    "checked_partition",
    "checked_request",
    "create_or_migrate",
    "job_from_row",
    "job_key",
]

SCHEMA_VERSION = 3
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
    attributes TEXT NOT NULL DEFAULT '{}'
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
    2: ("ALTER TABLE nodes ADD COLUMN owner TEXT NOT NULL DEFAULT ''",),
}
"""Statements taking a file from version N to N + 1."""

QUEUE_ORDER = "ORDER BY front DESC, priority DESC, id ASC"
JOB_COLUMNS = (
    "id, command, cores, walltime, user, priority, state, submitted_at, started_at, "
    "finished_at, node, exit_code, attributes"
)


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


def job_from_row(row: sqlite3.Row | tuple) -> Job:
    """A :data:`JOB_COLUMNS` row as a :class:`Job`."""
    (jid, command, cores, walltime, user, prio, state, sub, start, fin, node, code, attrs) = row
    runtime = fin - start if state == "done" and start is not None and fin is not None else None
    found = _attributes(attrs)
    if state == HELD_STATE:  # a held job is still queued, marked as held
        state = JobState.QUEUED
        found = {**found, attributes.HELD: "true"}
    return Job(
        id=str(jid),
        cores=cores,
        walltime=walltime,
        submitted_at=sub,
        state=JobState(state),
        command=shlex.join(json.loads(command)),
        runtime=runtime,
        started_at=start,
        finished_at=fin,
        node=node,
        exit_code=code,
        priority=prio,
        user=user,
        attributes=found,
    )


HELD_STATE = "held"
"""A job's ``state`` column while it is held: queued, but no pass starts it."""


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
