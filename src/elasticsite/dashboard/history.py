"""The site's recent past in the manager's state store, for the dashboard.

The manager (:class:`HistoryWriter`, a step observer on its loop thread) keeps, every
``every`` seconds: one *sample* of the queue, the running jobs, the workers by cloud
and state and the spend rate, and the head of the queue as it stood. Samples older
than ``keep`` seconds are dropped as new ones come. Everything else the dashboard
shows (the workers as they are, their last transitions) is the manager's own state.

:class:`HistoryReader` opens the same file read-only: it never takes a write lock, so a
dashboard can watch a running manager, and it works as well on the file of a manager
that is stopped, which is what "the last known state" means.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elasticsite.model import CloudSpec, Job, WorkerState
from elasticsite.sqlite import Connection, connect

if TYPE_CHECKING:
    from elasticsite.manager.report import StepReport

__all__ = ["QUEUE_SHOWN", "HistoryReader", "HistoryWriter", "Sample", "WorkerRow"]

QUEUE_SHOWN = 100
"""Queued jobs kept for the dashboard, from the head of the queue."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS site_samples (
    at REAL PRIMARY KEY,
    queued_jobs INTEGER NOT NULL,
    queued_cores INTEGER NOT NULL,
    running_jobs INTEGER NOT NULL,
    running_cores INTEGER NOT NULL,
    workers TEXT NOT NULL,
    spend_rate REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS site_queue (
    pos INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL,
    user TEXT NOT NULL,
    cores INTEGER NOT NULL,
    walltime REAL NOT NULL,
    submitted_at REAL NOT NULL,
    grp TEXT NOT NULL
);
"""
_PAID = {s.value for s in (WorkerState.REQUESTED, WorkerState.BOOTING, WorkerState.IDLE,
                           WorkerState.BUSY, WorkerState.DRAINING)}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Sample:
    """The site at one instant: ``workers`` maps cloud -> state -> count."""

    at: float
    queued_jobs: int
    queued_cores: int
    running_jobs: int
    running_cores: int
    workers: dict[str, dict[str, int]]
    spend_rate: float

    @property
    def live_workers(self) -> int:
        return sum(n for states in self.workers.values() for n in states.values())


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One unfinished worker as the state store holds it."""

    id: str
    cloud: str
    vm_type: str
    state: str
    since: float
    instance_id: str | None
    running_jobs: int
    last_error: str


def _sample(row: tuple[Any, ...]) -> Sample:
    at, qj, qc, rj, rc, workers, spend = row
    return Sample(float(at), int(qj), int(qc), int(rj), int(rc), json.loads(workers), float(spend))


class HistoryWriter:
    """Records a sample every ``every`` seconds of the manager's clock (step observer)."""

    def __init__(
        self,
        path: Path,
        specs: Sequence[CloudSpec],
        spend_cap: float | None,
        *,
        every: float = 60.0,
        keep: float = 8 * 86400.0,
        busy_timeout: float = 30.0,
    ) -> None:
        # Opened by whoever builds the manager, used by its loop thread only.
        self.db: Connection = connect(
            path, synchronous="NORMAL", busy_timeout=busy_timeout, check_same_thread=False
        )
        for statement in filter(str.strip, _SCHEMA.split(";")):
            with self.db.transaction(immediate=False):
                self.db.execute(statement)
        self.prices = {c.name: c.price_per_hour for c in specs}
        self.every = every
        self.keep = keep
        self._last = -1e300
        with self.db.transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('spend_cap', ?)",
                ("" if spend_cap is None else repr(spend_cap),),
            )

    def __call__(self, report: StepReport) -> None:
        if report.at - self._last < self.every or report.snapshot is None:
            return
        self._last = report.at
        snap = report.snapshot
        workers: dict[str, dict[str, int]] = {}
        spend = 0.0
        for (cloud, state), n in report.worker_counts.items():
            if state in ("terminated", "failed"):
                continue
            workers.setdefault(cloud, {})[state] = n
            if state in _PAID:
                spend += self.prices.get(cloud, 0.0) * n
        head: list[Job] = list(snap.queued[:QUEUE_SHOWN])
        with self.db.transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO site_samples VALUES (?, ?, ?, ?, ?, ?, ?)",
                (report.at, len(snap.queued), snap.queued_cores, len(snap.running),
                 sum(j.cores for j in snap.running), json.dumps(workers), spend),
            )  # fmt: skip
            self.db.execute("DELETE FROM site_samples WHERE at < ?", (report.at - self.keep,))
            self.db.execute("DELETE FROM site_queue")
            self.db.executemany(
                "INSERT INTO site_queue VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(i, j.id, j.user, j.cores, j.walltime, j.submitted_at,
                  j.attributes.get("partition", "") or "default") for i, j in enumerate(head)],
            )  # fmt: skip

    def close(self) -> None:
        self.db.close()


class HistoryReader:
    """Read-only access to a manager's state store for the dashboard."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _connect(self) -> sqlite3.Connection | None:
        if not self.path.exists():
            return None
        db = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=ro", uri=True, timeout=5)
        db.execute("PRAGMA query_only = ON")
        return db

    def _rows(self, sql: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        db = self._connect()
        if db is None:
            return []
        try:
            return db.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):  # a manager that has not recorded yet
                return []
            raise
        finally:
            db.close()

    def samples(self, since: float) -> list[Sample]:
        return [
            _sample(row)
            for row in self._rows("SELECT * FROM site_samples WHERE at >= ? ORDER BY at", (since,))
        ]

    def last_sample(self) -> Sample | None:
        rows = self._rows("SELECT * FROM site_samples ORDER BY at DESC LIMIT 1")
        if not rows:
            return None
        return _sample(rows[0])

    def queue(self) -> list[tuple[str, str, int, float, float, str]]:
        return [
            (str(j), str(u), int(c), float(w), float(s), str(g))
            for _, j, u, c, w, s, g in self._rows("SELECT * FROM site_queue ORDER BY pos")
        ]

    def unservable(self) -> list[tuple[str, str, float]]:
        """Queued jobs no cloud can run, as the manager last marked them: (job, why, since)."""
        return [
            (str(j), str(why), float(since))
            for j, why, since in self._rows(
                "SELECT job_id, reason, since FROM unservable_jobs ORDER BY since, job_id"
            )
        ]

    def workers(self) -> list[WorkerRow]:
        return [
            WorkerRow(str(i), str(c), str(v), str(st), float(since),
                      None if inst is None else str(inst), int(rj), str(err))
            for i, c, v, st, since, inst, rj, err in self._rows(
                "SELECT id, cloud, vm_type, state, state_since, instance_id, running_jobs, "
                "last_error FROM workers WHERE state NOT IN ('terminated', 'failed') "
                "ORDER BY cloud, id"
            )
        ]  # fmt: skip

    def transitions(self, limit: int = 50) -> list[tuple[float, str, str, str, str]]:
        return [
            (float(at), str(w), str(f or "-"), str(t), str(c))
            for at, w, f, t, c in self._rows(
                "SELECT at, worker_id, from_state, to_state, cause FROM transitions "
                "ORDER BY seq DESC LIMIT ?",
                (limit,),
            )
        ]

    def spend_cap(self) -> float | None:
        rows = self._rows("SELECT value FROM meta WHERE key = 'spend_cap'")
        return float(str(rows[0][0])) if rows and rows[0][0] else None

    def site_id(self) -> str | None:
        rows = self._rows("SELECT value FROM meta WHERE key = 'site_id'")
        return str(rows[0][0]) if rows else None
