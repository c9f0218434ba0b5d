"""The manager's state: every worker, every transition and every counter, in SQLite (WAL).

What else of the core's state must outlive a restart is kept too: the clouds' health,
the jobs the site holds, and the departures the broker has not recorded yet (which a
restarted manager sends again).

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
from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from elasticsite.core.plan import WorkerRecord, worker_id, worker_number
from elasticsite.files import StateFileError, private_dir
from elasticsite.manager.store_rows import (
    DONE,
    SCHEMA,
    WORKER_COLUMNS,
    add_columns,
    bill_row,
    jobs_from_json,
    jobs_to_json,
    record_from_row,
    record_row,
    transition_from_row,
    transition_row,
)
from elasticsite.model import Job, Transition, Worker
from elasticsite.spend import Bill
from elasticsite.sqlite import PerThread

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
_DEPARTURES = "context.pending_removals"
"""Where the pending departures are kept (the key they have always had)."""
_ADD = (
    "INSERT INTO counters(name, value) VALUES (?, ?) "
    "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value"
)
"""Add to a counter (one that does not exist yet starts from 0)."""
_RAISE = (
    "INSERT INTO counters(name, value) VALUES (?, ?) "
    "ON CONFLICT(name) DO UPDATE SET value = max(value, excluded.value)"
)
"""Raise a counter to at least the value given; it never goes down."""


class StateStore:
    """One SQLite file holding the manager's state; safe to open from several processes."""

    def __init__(self, path: str | Path, timeout: float | None = None) -> None:
        self.path = Path(path)
        self.timeout = LOCK_TIMEOUT if timeout is None else timeout
        self._db = PerThread(self.path, synchronous="FULL", busy_timeout=self.timeout)
        private_dir(self.path.parent, tighten=False)  # the site's state directory is made so
        self._db.create(SCHEMA)
        add_columns(self._db.get())

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """All writes inside commit together or not at all; nested blocks join the outer one."""
        return self._db.get().transaction()

    def close(self) -> None:
        self._db.close()

    # -- meta and counters -------------------------------------------------

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        rows = self._db.read("SELECT value FROM meta WHERE key=?", (key,))
        return rows[0][0] if rows else default

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def _meta_table(self, key: str) -> dict[str, Any]:
        """The JSON object kept under ``key``; empty if none, or not one."""
        try:
            data = json.loads(self.get_meta(key) or "{}")
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def cloud_health(self) -> dict[str, dict[str, object]]:
        """The clouds' health records as the manager last saved them (:mod:`core.health`)."""
        return self._meta_table("cloud_health")

    def save_cloud_health(self, data: Mapping[str, object]) -> None:
        self.set_meta("cloud_health", json.dumps(data, sort_keys=True))

    def cloud_errors(self) -> dict[str, dict[str, object]]:
        """The last error of each cloud as the manager last saved it: ``at``, ``what``
        (launch, terminate, describe), ``kind``, ``call`` (the API call), ``error``."""
        data = self._meta_table("cloud_errors")
        return {str(k): v for k, v in data.items() if isinstance(v, dict)}

    def save_cloud_errors(self, data: Mapping[str, object]) -> None:
        self.set_meta("cloud_errors", json.dumps(data, sort_keys=True))

    def held_jobs(self) -> list[Job]:
        """The queued jobs the manager holds (fair share), as it last saved them."""
        return jobs_from_json(self.get_meta("held_jobs") or "[]")

    def save_held_jobs(self, jobs: Iterable[Job]) -> None:
        self.set_meta("held_jobs", jobs_to_json(jobs))

    def departures(self) -> dict[str, str]:
        """The departures the broker has not recorded yet (the core's
        :attr:`~elasticsite.core.CoreState.departures`: node -> worker), as last saved;
        an older file's list of nodes reads with no workers."""
        try:
            data = json.loads(self.get_meta(_DEPARTURES) or "{}")
        except ValueError:
            return {}
        if isinstance(data, list):
            return {str(node): "" for node in data}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def save_departures(self, departures: Mapping[str, str]) -> None:
        self.set_meta(_DEPARTURES, json.dumps(dict(departures)))

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
            db.execute(_ADD, (key, count))
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
            db.execute(_RAISE, (_WORKER_SEQ, number))
        return out

    def last_worker_number(self) -> int:
        """The highest worker number given so far (or reserved)."""
        rows = self._db.read("SELECT value FROM counters WHERE name=?", (_WORKER_SEQ,))
        return int(rows[0][0]) if rows else 0

    def reserve_worker_numbers(self, at_least: int) -> None:
        """Make sure no new worker gets a number up to ``at_least`` (seen in a cloud's tags)."""
        with self.transaction() as db:
            db.execute(_RAISE, (_WORKER_SEQ, at_least))

    def has_worker(self, wid: str) -> bool:
        """Whether a record of worker ``wid`` exists, finished or not."""
        return bool(self._db.read("SELECT 1 FROM workers WHERE id=?", (wid,)))

    def bump(self, name: str, by: int = 1) -> None:
        with self.transaction() as db:
            db.execute(_ADD, (name, by))

    def counters(self) -> dict[str, int]:
        rows = self._db.read("SELECT name, value FROM counters WHERE name NOT LIKE 'seq:%'")
        return {name: int(value) for name, value in rows}

    # -- queued jobs no cloud can run -----------------------------------------

    def unservable(self) -> dict[str, tuple[str, float]]:
        """Queued jobs the manager found no cloud could run at its last step: job id ->
        (why, since when). Read without the manager running: the last known marks."""
        rows = self._db.read(
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
        with self.transaction() as db:
            db.execute(
                f"INSERT OR REPLACE INTO workers({WORKER_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                record_row(rec),
            )

    def record(self, transitions: list[Transition]) -> None:
        if not transitions:
            return
        with self.transaction() as db:
            db.executemany(
                "INSERT INTO transitions(worker_id, from_state, to_state, at, cause) "
                "VALUES (?, ?, ?, ?, ?)",
                [transition_row(t) for t in transitions],
            )

    def load(self, *, include_done: bool = False, history: bool = False) -> list[WorkerRecord]:
        """Workers still needing attention (or all of them), oldest first."""
        sql = f"SELECT {WORKER_COLUMNS} FROM workers"
        if not include_done:
            sql += f" WHERE NOT {DONE}"
        sql += " ORDER BY requested_at, id"
        out = [record_from_row(row) for row in self._db.read(sql)]
        if history and out:
            by_id = {r.worker.id: r.worker for r in out}
            for t in self.transitions():
                if t.worker_id in by_id:
                    by_id[t.worker_id].history.append(t)
        return out

    # -- bills: what finished workers cost ------------------------------------

    def add_bills(self, bills: Iterable[Bill]) -> None:
        """Keep the bills of workers whose records are done (once each)."""
        rows = [bill_row(b) for b in bills]
        if rows:
            with self.transaction() as db:
                db.executemany("INSERT OR IGNORE INTO bills VALUES (?, ?, ?, ?, ?, ?, ?)", rows)

    def bill_totals(self) -> dict[str, float]:
        """What the billed workers cost, per cloud."""
        rows = self._db.read("SELECT cloud, SUM(cost) FROM bills GROUP BY cloud")
        return {str(cloud): float(total) for cloud, total in rows}

    def bills_ending_after(self, at: float) -> list[Bill]:
        """The bills of workers that ended after ``at``."""
        return [
            Bill(str(w), str(c), float(s), float(e), float(p), float(i))
            for w, c, s, e, p, i in self._db.read(
                "SELECT worker_id, cloud, started, ended, price, increment FROM bills "
                "WHERE ended > ?",
                (at,),
            )
        ]

    def unbilled_done(self) -> list[Worker]:
        """Workers whose records are done but have no bill (finished before bills were
        kept, by an older version)."""
        sql = (
            f"SELECT {WORKER_COLUMNS} FROM workers WHERE {DONE} "
            "AND id NOT IN (SELECT worker_id FROM bills)"
        )
        return [record_from_row(row).worker for row in self._db.read(sql)]

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
        return [transition_from_row(r) for r in self._db.read(sql, args)]
