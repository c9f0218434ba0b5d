"""The manager's state: every worker, every transition and every counter, in SQLite (WAL).

Nothing the manager needs after a restart lives only in memory. A worker row is
written *before* its instance is asked of the cloud, so a manager killed at any
point finds, on restart, either the row (and adopts or relaunches its instance by
name) or nothing to clean up.

The file is written with ``synchronous=FULL``: a commit is on disk before the
manager acts on it, so a power loss cannot take back a worker row whose instance
was already requested. Worker ids come from a counter that only grows and is kept
beyond every id the clouds' tags show (:meth:`StateStore.new_worker_ids`,
:meth:`StateStore.reserve_worker_numbers`), so an id is never given twice.

The file and its directory are private to their owner (the store holds the broker
context's key and secret). A file that is corrupt, locked or unwritable raises
:class:`~elasticsite.files.StateFileError`, ``PATH: cause``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from elasticsite.core.plan import WorkerRecord, worker_id, worker_number
from elasticsite.files import StateFileError, private_dir
from elasticsite.model import Job, Transition, Worker, WorkerState
from elasticsite.spend import Bill
from elasticsite.sqlite import Connection, connect

__all__ = [
    "LOCK_TIMEOUT",
    "StateFileError",
    "StateStore",
    "WorkerRecord",
    "worker_id",
    "worker_number",
]

LOCK_TIMEOUT = 30.0
"""Seconds to wait for another process's write lock before giving up as "locked"."""
_WORKER_SEQ = "seq:worker"
_DONE = "(state = 'terminated' OR (state = 'failed' AND instance_gone = 1))"
"""A worker whose record the manager no longer loads: its instance is gone."""
_WORKER_COLUMNS = (
    "id, cloud, vm_type, cores, node, instance_id, state, requested_at, joined_at, "
    "state_since, running_jobs, attempts, next_attempt_at, instance_gone, last_error, owner"
)

_SCHEMA = """
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


class StateStore:
    """One SQLite file holding the manager's state; safe to open from several processes."""

    def __init__(self, path: str | Path, timeout: float | None = None) -> None:
        self.path = Path(path)
        self.timeout = LOCK_TIMEOUT if timeout is None else timeout
        self._local = threading.local()
        private_dir(self.path.parent, tighten=False)  # the site's state directory is made so
        db = self._db()
        for statement in filter(str.strip, _SCHEMA.split(";")):
            # Each on its own and deferred: a table that exists takes no write lock, so
            # opening the store to read works while another process writes.
            with db.transaction(immediate=False):
                db.execute(statement)
        self._add_columns(db)

    @staticmethod
    def _add_columns(db: Connection) -> None:
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

    def _db(self) -> Connection:
        """This thread's connection, opened (private, WAL, ``synchronous=FULL``) on first use."""
        db: Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = connect(self.path, synchronous="FULL", busy_timeout=self.timeout)
            self._local.db = db
        return db

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """All writes inside commit together or not at all; nested blocks join the outer one."""
        return self._db().transaction()

    def _read(self, sql: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """All rows of one query, read from one snapshot."""
        with self._db().transaction(immediate=False) as db:
            return db.execute(sql, args).fetchall()

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # -- meta and counters -------------------------------------------------

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key=?", (key,))
        return rows[0][0] if rows else default

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def cloud_health(self) -> dict[str, dict[str, object]]:
        """The clouds' health records as the manager last saved them (:mod:`core.health`)."""
        try:
            data = json.loads(self.get_meta("cloud_health") or "{}")
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def save_cloud_health(self, data: Mapping[str, object]) -> None:
        self.set_meta("cloud_health", json.dumps(data, sort_keys=True))

    def cloud_errors(self) -> dict[str, dict[str, object]]:
        """The last error of each cloud as the manager last saved it: ``at``, ``what``
        (launch, terminate, describe), ``kind``, ``call`` (the API call), ``error``."""
        try:
            data = json.loads(self.get_meta("cloud_errors") or "{}")
        except ValueError:
            return {}
        return (
            {str(k): v for k, v in data.items() if isinstance(v, dict)}
            if isinstance(data, dict)
            else {}
        )

    def save_cloud_errors(self, data: Mapping[str, object]) -> None:
        self.set_meta("cloud_errors", json.dumps(data, sort_keys=True))

    def held_jobs(self) -> list[Job]:
        """The queued jobs the manager holds (fair share), as it last saved them."""
        try:
            data = json.loads(self.get_meta("held_jobs") or "[]")
            return [
                Job(
                    str(d["id"]),
                    int(d["cores"]),
                    float(d["walltime"]),
                    float(d["submitted_at"]),
                    user=str(d.get("user", "")),
                    attributes={str(k): str(v) for k, v in d.get("attributes", {}).items()},
                )
                for d in data
            ]
        except (ValueError, KeyError, TypeError, AttributeError):
            return []

    def save_held_jobs(self, jobs: Iterable[Job]) -> None:
        self.set_meta(
            "held_jobs",
            json.dumps(
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
            ),
        )

    def request_cloud_reset(self, cloud: str) -> None:
        """Ask the manager to open ``cloud`` again (taken at its next step)."""
        with self.transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key='cloud_resets'").fetchone()
            wanted = set(json.loads(row[0])) if row else set()
            wanted.add(cloud)
            db.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('cloud_resets', ?)",
                (json.dumps(sorted(wanted)),),
            )

    def take_cloud_resets(self) -> list[str]:
        """The clouds an operator asked to reset since the last call (and forget them)."""
        with self.transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key='cloud_resets'").fetchone()
            if row is None:
                return []
            db.execute("DELETE FROM meta WHERE key='cloud_resets'")
        return [str(c) for c in json.loads(row[0])]

    def next_seq(self, name: str = "worker", count: int = 1) -> int:
        """Reserve ``count`` consecutive numbers of sequence ``name``; returns the first."""
        key = f"seq:{name}"
        with self.transaction() as db:
            db.execute(
                "INSERT INTO counters(name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                (key, count),
            )
            row = db.execute("SELECT value FROM counters WHERE name=?", (key,)).fetchone()
            return int(row[0]) - count + 1

    def new_worker_ids(self, cloud: str, count: int, taken: Collection[str] = ()) -> list[str]:
        """Reserve ``count`` fresh worker ids on ``cloud``, in one commit.

        The worker counter only grows, and a number whose id already has a record (or
        is in ``taken``, the ids the caller holds in memory) is skipped: whatever was
        lost, no id is given to a second worker.
        """
        out: list[str] = []
        with self.transaction() as db:
            row = db.execute("SELECT value FROM counters WHERE name=?", (_WORKER_SEQ,)).fetchone()
            number = int(row[0]) if row else 0
            while len(out) < count:
                number += 1
                wid = worker_id(cloud, number)
                exists = db.execute("SELECT 1 FROM workers WHERE id=?", (wid,)).fetchone()
                if exists or wid in taken:
                    continue
                out.append(wid)
            db.execute(
                "INSERT INTO counters(name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = max(value, excluded.value)",
                (_WORKER_SEQ, number),
            )
        return out

    def last_worker_number(self) -> int:
        """The highest worker number given so far (or reserved)."""
        rows = self._read("SELECT value FROM counters WHERE name=?", (_WORKER_SEQ,))
        return int(rows[0][0]) if rows else 0

    def reserve_worker_numbers(self, at_least: int) -> None:
        """Make sure no new worker gets a number up to ``at_least`` (seen in a cloud's tags)."""
        with self.transaction() as db:
            db.execute(
                "INSERT INTO counters(name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = max(value, excluded.value)",
                (_WORKER_SEQ, at_least),
            )

    def has_worker(self, wid: str) -> bool:
        """Whether a record of worker ``wid`` exists, finished or not."""
        return bool(self._read("SELECT 1 FROM workers WHERE id=?", (wid,)))

    def bump(self, name: str, by: int = 1) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO counters(name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                (name, by),
            )

    def counters(self) -> dict[str, int]:
        rows = self._read("SELECT name, value FROM counters WHERE name NOT LIKE 'seq:%'")
        return {name: int(value) for name, value in rows}

    # -- queued jobs no cloud can run -----------------------------------------

    def unservable(self) -> dict[str, tuple[str, float]]:
        """Queued jobs the manager found no cloud could run at its last step: job id ->
        (why, since when). Read without the manager running: the last known marks."""
        rows = self._read(
            "SELECT job_id, reason, since FROM unservable_jobs ORDER BY since, job_id"
        )
        return {str(j): (str(r), float(t)) for j, r, t in rows}

    def save_unservable(self, marks: Mapping[str, str], gone: Iterable[str], at: float) -> None:
        """Mark (or mark anew, when the reason changed) the jobs of ``marks`` as of
        ``at``, and forget those ``gone`` (served, started or no longer queued)."""
        with self.transaction() as db:
            db.executemany("DELETE FROM unservable_jobs WHERE job_id=?", [(j,) for j in gone])
            db.executemany(
                "INSERT OR REPLACE INTO unservable_jobs(job_id, reason, since) VALUES (?, ?, ?)",
                [(j, reason, at) for j, reason in marks.items()],
            )

    # -- power requests (from the batch system's power saving) --------------

    def add_power_requests(self, action: str, nodes: Sequence[str], at: float) -> None:
        """Queue ``resume`` or ``suspend`` requests for the manager's next step."""
        if action not in ("resume", "suspend"):
            raise ValueError(f"unknown power action {action!r}")
        with self.transaction() as db:
            db.executemany(
                "INSERT INTO power_requests(action, node, at) VALUES (?, ?, ?)",
                [(action, n, at) for n in nodes],
            )

    def take_power_requests(self) -> list[tuple[str, str, float]]:
        """Every queued request, oldest first, removed from the queue in the same commit."""
        with self.transaction() as db:
            rows = db.execute("SELECT seq, action, node, at FROM power_requests ORDER BY seq")
            taken = [(int(seq), str(a), str(n), float(t)) for seq, a, n, t in rows]
            if taken:
                db.execute("DELETE FROM power_requests WHERE seq <= ?", (taken[-1][0],))
        return [(a, n, t) for _, a, n, t in taken]

    # -- workers -----------------------------------------------------------

    def save(self, rec: WorkerRecord) -> None:
        w = rec.worker
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO workers(id, cloud, vm_type, cores, node, instance_id, "
                "state, requested_at, joined_at, state_since, running_jobs, attempts, "
                "next_attempt_at, instance_gone, last_error, owner) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
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
                ),
            )

    def record(self, transitions: list[Transition]) -> None:
        if not transitions:
            return
        with self.transaction() as db:
            db.executemany(
                "INSERT INTO transitions(worker_id, from_state, to_state, at, cause) "
                "VALUES (?, ?, ?, ?, ?)",
                [
                    (
                        t.worker_id,
                        t.from_state.value if t.from_state else None,
                        t.to_state.value,
                        t.at,
                        str(t.cause),
                    )
                    for t in transitions
                ],
            )

    def load(self, *, include_done: bool = False, history: bool = False) -> list[WorkerRecord]:
        """Workers still needing attention (or all of them), oldest first."""
        sql = f"SELECT {_WORKER_COLUMNS} FROM workers"
        if not include_done:
            sql += f" WHERE NOT {_DONE}"
        sql += " ORDER BY requested_at, id"
        out = [_record(row) for row in self._read(sql)]
        if history and out:
            by_id = {r.worker.id: r.worker for r in out}
            for t in self.transitions():
                if t.worker_id in by_id:
                    by_id[t.worker_id].history.append(t)
        return out

    # -- bills: what finished workers cost ------------------------------------

    def add_bills(self, bills: Iterable[Bill]) -> None:
        """Keep the bills of workers whose records are done (once each)."""
        rows = [
            (b.worker_id, b.cloud, b.start, b.end, b.price_per_hour, b.increment, b.cost)
            for b in bills
        ]
        if rows:
            with self.transaction() as db:
                db.executemany("INSERT OR IGNORE INTO bills VALUES (?, ?, ?, ?, ?, ?, ?)", rows)

    def bill_totals(self) -> dict[str, float]:
        """What the billed workers cost, per cloud."""
        rows = self._read("SELECT cloud, SUM(cost) FROM bills GROUP BY cloud")
        return {str(cloud): float(total) for cloud, total in rows}

    def bills_ending_after(self, at: float) -> list[Bill]:
        """The bills of workers that ended after ``at``."""
        return [
            Bill(str(w), str(c), float(s), float(e), float(p), float(i))
            for w, c, s, e, p, i in self._read(
                "SELECT worker_id, cloud, started, ended, price, increment FROM bills "
                "WHERE ended > ?",
                (at,),
            )
        ]

    def unbilled_done(self) -> list[Worker]:
        """Workers whose records are done but have no bill (finished before bills were
        kept, by an older version)."""
        sql = (
            f"SELECT {_WORKER_COLUMNS} FROM workers WHERE {_DONE} "
            "AND id NOT IN (SELECT worker_id FROM bills)"
        )
        return [_record(row).worker for row in self._read(sql)]

    def transitions(
        self, worker_id: str | None = None, last: int | None = None
    ) -> list[Transition]:
        """Recorded transitions in the order they happened (only the ``last`` n if given)."""
        sql = "SELECT seq, worker_id, from_state, to_state, at, cause FROM transitions"
        args: tuple[str | int, ...] = ()
        if worker_id is not None:
            sql += " WHERE worker_id=?"
            args = (worker_id,)
        if last is not None:
            sql = f"SELECT * FROM ({sql} ORDER BY seq DESC LIMIT ?) ORDER BY seq"
            args = (*args, last)
        else:
            sql += " ORDER BY seq"
        return [
            Transition(r[1], WorkerState(r[2]) if r[2] else None, WorkerState(r[3]), r[4], r[5])
            for r in self._read(sql, args)
        ]


def _record(row: Sequence[Any]) -> WorkerRecord:
    """A worker's record from a row of ``_WORKER_COLUMNS``."""
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
