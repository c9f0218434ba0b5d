"""The layout of the manager's state file: its tables, and each record as a row and back.

:class:`~elasticsite.manager.store.StateStore` reads and writes the file; what a
worker, a transition, a bill or a held job looks like there is said here alone, and
so is how a file written by an older elasticsite gains the columns it lacks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from elasticsite.core.plan import WorkerRecord
from elasticsite.model import Job, Transition, Worker, WorkerState
from elasticsite.spend import Bill
from elasticsite.sqlite import Connection

__all__ = [
    "DONE",
    "SCHEMA",
    "WORKER_COLUMNS",
    "add_columns",
    "bill_row",
    "jobs_from_json",
    "jobs_to_json",
    "record_from_row",
    "record_row",
    "transition_from_row",
    "transition_row",
]

DONE = "(state = 'terminated' OR (state = 'failed' AND instance_gone = 1))"
"""A worker whose record the manager no longer loads: its instance is gone."""
WORKER_COLUMNS = (
    "id, cloud, vm_type, cores, node, instance_id, state, requested_at, joined_at, "
    "state_since, running_jobs, attempts, next_attempt_at, instance_gone, last_error, owner"
)
"""The columns of a worker's row, in the order :func:`record_row` gives them."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workers (
    id TEXT PRIMARY KEY,
    cloud TEXT NOT NULL,
    vm_type TEXT NOT NULL,
    cores INTEGER NOT NULL,
    node TEXT NOT NULL,
    instance_id TEXT,
    state TEXT NOT NULL,
    requested_at REAL NOT NULL,
    joined_at REAL,
    state_since REAL NOT NULL,
    running_jobs INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL DEFAULT 0,
    instance_gone INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT '',
    owner TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS workers_state ON workers(state);
CREATE TABLE IF NOT EXISTS transitions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    worker_id TEXT NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    at REAL NOT NULL,
    cause TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS transitions_worker ON transitions(worker_id);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS bills (
    worker_id TEXT PRIMARY KEY,
    cloud TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL NOT NULL,
    price REAL NOT NULL,
    increment REAL NOT NULL,
    cost REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS bills_ended ON bills(ended);
CREATE TABLE IF NOT EXISTS unservable_jobs (
    job_id TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    since REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS power_requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    action TEXT NOT NULL,
    node TEXT NOT NULL,
    at REAL NOT NULL
);
"""


_ADDED_COLUMNS = (("workers", "owner", "TEXT NOT NULL DEFAULT ''"),)
"""Columns added since the first release: (table, column, definition)."""


def add_columns(db: Connection) -> None:
    """Give a store written by an older elasticsite the columns it lacks (each with
    the default its rows meant); a store that has them takes no write lock."""
    for table, column, definition in _ADDED_COLUMNS:
        with db.transaction(immediate=False) as tx:
            known = {row[1] for row in tx.execute(f"PRAGMA table_info({table})")}
        if column in known:
            continue
        with db.transaction() as tx:  # another process may have added it meanwhile
            if column not in {row[1] for row in tx.execute(f"PRAGMA table_info({table})")}:
                tx.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")


def record_row(rec: WorkerRecord) -> tuple[object, ...]:
    """A worker's record as a row of :data:`WORKER_COLUMNS`."""
    w = rec.worker
    return (
        w.id,
        w.cloud,
        w.vm_type,
        w.cores,
        w.node,
        w.instance_id,
        w.state.value,
        w.requested_at,
        w.joined_at,
        w.state_since,
        w.running_jobs,
        rec.attempts,
        rec.next_attempt_at,
        int(rec.instance_gone),
        rec.last_error,
        w.owner,
    )


def record_from_row(row: Sequence[Any]) -> WorkerRecord:
    """A worker's record from a row of :data:`WORKER_COLUMNS`."""
    w = Worker(
        id=row[0],
        cloud=row[1],
        vm_type=row[2],
        cores=row[3],
        requested_at=row[7],
        state=WorkerState(row[6]),
        instance_id=row[5],
        node=row[4],
        joined_at=row[8],
        state_since=row[9],
        running_jobs=row[10],
        owner=row[15],
    )
    return WorkerRecord(w, row[11], row[12], bool(row[13]), row[14])


def transition_row(t: Transition) -> tuple[object, ...]:
    """``(worker_id, from_state, to_state, at, cause)`` of the transitions table."""
    return (
        t.worker_id,
        t.from_state.value if t.from_state else None,
        t.to_state.value,
        t.at,
        str(t.cause),
    )


def transition_from_row(r: Sequence[Any]) -> Transition:
    """A transition from ``(seq, worker_id, from_state, to_state, at, cause)``."""
    return Transition(r[1], WorkerState(r[2]) if r[2] else None, WorkerState(r[3]), r[4], r[5])


def bill_row(b: Bill) -> tuple[object, ...]:
    """A bill as a row of the bills table, its columns in order."""
    return (b.worker_id, b.cloud, b.start, b.end, b.price_per_hour, b.increment, b.cost)


def jobs_to_json(jobs: Iterable[Job]) -> str:
    """Held jobs as the manager keeps them between steps and restarts."""
    return json.dumps(
        [
            {
                "id": j.id,
                "cores": j.cores,
                "walltime": j.walltime,
                "submitted_at": j.submitted_at,
                "user": j.user,
                "attributes": dict(j.attributes),
            }
            for j in jobs
        ]
    )


def jobs_from_json(text: str) -> list[Job]:
    """What :func:`jobs_to_json` wrote; nothing where it cannot be read."""
    try:
        return [
            Job(
                str(d["id"]),
                int(d["cores"]),
                float(d["walltime"]),
                float(d["submitted_at"]),
                user=str(d.get("user", "")),
                attributes={str(k): str(v) for k, v in d.get("attributes", {}).items()},
            )
            for d in json.loads(text)
        ]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []
