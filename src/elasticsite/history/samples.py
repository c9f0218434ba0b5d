"""The site's recent past in the manager's state store, for the dashboard.

The manager (:class:`HistoryWriter`, a step observer on its loop thread) keeps, every
``every`` seconds: one *sample* of the queue, the running jobs, the workers by cloud
and state, the spend rate and what was spent (per cloud, and in the budget's period
with its forecast), and the head of the queue as it stood. Samples older than ``keep``
seconds are dropped as new ones come. When the manager stops, it takes a last sample
of its last step and marks the history stopped, so the dashboard never calls a stopped
manager live. Everything else the dashboard shows (the workers as they are, their last
transitions, the budget's refusals) is the manager's own state.

:class:`HistoryReader` opens the same file read-only: it never takes a write lock, so a
dashboard can watch a running manager, and it works as well on the file of a manager
that is stopped, which is what "the last known state" means.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from elasticsite.model import CloudSpec, Job, WorkerState
from elasticsite.snapshot import SiteSnapshot
from elasticsite.spend import WATCH_KEY, Budget, BudgetWatch, Spent
from elasticsite.sqlite import Connection, connect

__all__ = [
    "QUEUE_SHOWN",
    "HistoryReader",
    "HistoryWriter",
    "Money",
    "Sample",
    "StepReport",
    "WorkerRow",
]


class StepReport(Protocol):
    """What the writer reads of a manager's step (the manager's own report is one)."""

    @property
    def at(self) -> float: ...
    @property
    def snapshot(self) -> SiteSnapshot | None: ...
    @property
    def worker_counts(self) -> Mapping[tuple[str, str], int]: ...
    @property
    def spent(self) -> Callable[[], Spent] | None: ...
    @property
    def forecast(self) -> Callable[[], float] | None: ...


log = logging.getLogger(__name__)

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
    spend_rate REAL NOT NULL,
    spent TEXT NOT NULL DEFAULT '{}'
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
_STOPPED = "history_stopped_at"
"""Meta key: the time of the last step of a manager that stopped (none while it runs)."""
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
    spent: dict[str, float]
    """What was spent by then, per cloud (empty in samples from before it was kept)."""
    period_spent: float | None = None
    """Spent in the budget's period by then (None without a budget)."""
    forecast: float | None = None
    """The budget period's forecast spend at that step."""

    @property
    def live_workers(self) -> int:
        return sum(n for states in self.workers.values() for n in states.values())

    @property
    def spent_total(self) -> float:
        return sum(self.spent.values())


@dataclass(frozen=True, slots=True)
class Money:
    """The site's currency and budget, as its manager was configured when it started,
    and what the manager remembers of the budget (refusals, the 80% warning)."""

    currency: str
    budget: Budget | None
    watch: BudgetWatch


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
    at, qj, qc, rj, rc, workers, spend = row[:7]
    spent = row[7] if len(row) > 7 else "{}"  # a file its manager has not upgraded yet
    money = json.loads(spent or "{}")
    period, forecast = money.get("period"), money.get("forecast")
    return Sample(float(at), int(qj), int(qc), int(rj), int(rc), json.loads(workers), float(spend),
                  {str(k): float(v) for k, v in money.get("by_cloud", {}).items()},
                  None if period is None else float(period),
                  None if forecast is None else float(forecast))  # fmt: skip


def _columns(db: Connection, table: str) -> set[str]:
    return {str(row[1]) for row in db.execute(f"PRAGMA table_info({table})")}


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
        currency: str = "USD",
        budget: Budget | None = None,
    ) -> None:
        # Opened by whoever builds the manager, used by its loop thread only.
        self.db: Connection = connect(
            path, synchronous="NORMAL", busy_timeout=busy_timeout, check_same_thread=False
        )
        for statement in filter(str.strip, _SCHEMA.split(";")):
            with self.db.transaction(immediate=False):
                self.db.execute(statement)
        with self.db.transaction():
            if "spent" not in _columns(self.db, "site_samples"):  # a file from before
                self.db.execute(
                    "ALTER TABLE site_samples ADD COLUMN spent TEXT NOT NULL DEFAULT '{}'"
                )
        self.prices = {c.name: c.price_per_hour for c in specs}
        self.every = every
        self.keep = keep
        self._last = -1e300
        self._report: StepReport | None = None
        budget_json = None if budget is None else json.dumps(
            {"amount": budget.amount, "period": budget.period,
             "urgent_extra": budget.urgent_extra}
        )  # fmt: skip
        with self.db.transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                [("spend_cap", "" if spend_cap is None else repr(spend_cap)),
                 ("currency", currency), ("budget_limit", budget_json or "")],
            )  # fmt: skip
            self.db.execute("DELETE FROM meta WHERE key = ?", (_STOPPED,))

    def __call__(self, report: StepReport) -> None:
        if report.snapshot is None:
            return
        self._report = report
        if report.at - self._last < self.every:
            return
        self._take(report)

    def _take(self, report: StepReport) -> None:
        self._last = report.at
        snap = report.snapshot
        assert snap is not None
        workers: dict[str, dict[str, int]] = {}
        spend = 0.0
        for (cloud, state), n in report.worker_counts.items():
            if state in ("terminated", "failed"):
                continue
            workers.setdefault(cloud, {})[state] = n
            if state in _PAID:
                spend += self.prices.get(cloud, 0.0) * n
        head: list[Job] = list(snap.queued[:QUEUE_SHOWN])
        money: dict[str, Any] = {}
        if report.spent is not None:
            spent = report.spent()
            money["by_cloud"] = dict(spent.by_cloud)
            if spent.period is not None:
                money["period"] = spent.period_total
        if report.forecast is not None:
            money["forecast"] = report.forecast()
        with self.db.transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO site_samples VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (report.at, len(snap.queued), snap.queued_cores, len(snap.running),
                 sum(j.cores for j in snap.running), json.dumps(workers), spend,
                 json.dumps(money)),
            )  # fmt: skip
            self.db.execute("DELETE FROM site_samples WHERE at < ?", (report.at - self.keep,))
            self.db.execute("DELETE FROM site_queue")
            self.db.executemany(
                "INSERT INTO site_queue VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(i, j.id, j.user, j.cores, j.walltime, j.submitted_at,
                  j.attributes.get("partition", "") or "default") for i, j in enumerate(head)],
            )  # fmt: skip

    def close(self) -> None:
        """The manager stops: keep its last step as the last sample, and say it stopped
        (a failure is logged: the history must never keep the manager from stopping)."""
        last = self._report
        try:
            if last is not None:
                if last.at > self._last:
                    self._take(last)
                with self.db.transaction():
                    self.db.execute(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                        (_STOPPED, repr(last.at)),
                    )
        except Exception:
            log.exception("dashboard history: cannot record that the manager stopped")
        finally:
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

    def stopped_at(self) -> float | None:
        """The last step of a manager that stopped cleanly (None while one runs)."""
        rows = self._rows("SELECT value FROM meta WHERE key = ?", (_STOPPED,))
        return float(str(rows[0][0])) if rows and rows[0][0] else None

    def money(self) -> Money:
        """The currency, the budget and the manager's budget watch."""
        meta = dict(self._rows(
            "SELECT key, value FROM meta WHERE key IN ('currency', 'budget_limit', ?)",
            (WATCH_KEY,),
        ))  # fmt: skip
        budget = None
        try:
            b = json.loads(meta.get("budget_limit") or "null")
            if b is not None:
                budget = Budget(float(b["amount"]), b["period"], float(b["urgent_extra"]))
        except (ValueError, TypeError, KeyError):
            budget = None
        return Money(str(meta.get("currency") or "USD"), budget,
                     BudgetWatch.load(meta.get(WATCH_KEY)))  # fmt: skip

    def spend_cap(self) -> float | None:
        rows = self._rows("SELECT value FROM meta WHERE key = 'spend_cap'")
        return float(str(rows[0][0])) if rows and rows[0][0] else None

    def site_id(self) -> str | None:
        rows = self._rows("SELECT value FROM meta WHERE key = 'site_id'")
        return str(rows[0][0]) if rows else None
