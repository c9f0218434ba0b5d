"""The advisor's history: every observed phase duration and staging probe, in SQLite.

An :class:`Observation` is one measured duration (or, for a staging probe, the seconds
per byte one transfer took) under one key: the phase, the resource, the policy, the
node count, the repository and the application. The :class:`HistoryStore` keeps them in
``advisor.db`` in the site's state directory, a private file (0600, directory 0700) in
WAL mode opened through :func:`elasticsite.sqlite.connect`, so the manager's recorder,
the probe runner and ``elasticsite advise`` may use it at the same time.

Observations read from a source that can be read again (a ``sacct`` dump, a manager
restarting over jobs it already recorded) carry a ``ref`` (job or worker id): the
store keeps one observation per ``(source, phase, resource, ref)`` and ignores the
others, so importing the same file twice adds nothing. A store that cannot be used
raises :class:`~elasticsite.files.StateFileError`, ``PATH: cause``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from elasticsite.files import private_dir
from elasticsite.sqlite import PerThread

__all__ = [
    "DEFAULT_FILE",
    "PHASES",
    "PROBE",
    "SOURCES",
    "HistoryStore",
    "Key",
    "Observation",
    "ProbeFailure",
    "store_path",
]

DEFAULT_FILE = "advisor.db"
"""The history's file name in the site's state directory."""

PROBE = "probe"
PHASES: tuple[str, ...] = ("input", "allocation", "execution", "output", PROBE)
"""The phases of an urgent run in the order they happen, then staging probes."""

SOURCES: tuple[str, ...] = ("manager", "drill", "sacct", "csv", "swf", "probe")
"""Where observations come from: the manager's recorder, urgent drills (``advise
record``), imported ``sacct --json``, CSV and SWF files, and the probe runner."""

LOCK_TIMEOUT = 30.0
"""Seconds to wait for another process's write lock before giving up as "locked"."""

_COLUMNS = "phase, resource, policy, nodes, repository, app, value, nbytes, at, source, ref, trial"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS observations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    phase TEXT NOT NULL,
    resource TEXT NOT NULL,
    policy TEXT NOT NULL,
    nodes INTEGER NOT NULL,
    repository TEXT NOT NULL,
    app TEXT NOT NULL,
    value REAL NOT NULL,
    nbytes INTEGER,
    at REAL NOT NULL,
    source TEXT NOT NULL,
    ref TEXT NOT NULL,
    trial TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS observations_ref
    ON observations(source, phase, resource, ref) WHERE ref != '';
CREATE INDEX IF NOT EXISTS observations_key
    ON observations(phase, resource, policy, nodes, repository, app, at);
CREATE TABLE IF NOT EXISTS probe_failures (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    repository TEXT NOT NULL,
    at REAL NOT NULL,
    error TEXT NOT NULL
);
"""


class Key(NamedTuple):
    """What one history is kept for: observations with equal keys are one series."""

    phase: str
    resource: str
    policy: str
    nodes: int
    repository: str
    app: str


@dataclass(frozen=True, kw_only=True)
class Observation:
    """One measured phase of one run, or one staging probe.

    ``value`` is in seconds; for a probe it is the seconds per byte that transfer took
    (the reciprocal of its bandwidth) and ``nbytes`` the bytes it moved. ``at`` is when
    it was observed (epoch seconds). ``id`` is the store's row number, set on reading
    (0 before) and left out of comparisons. Invalid values raise :class:`ValueError`
    naming the field.
    """

    phase: str
    resource: str
    value: float
    at: float
    source: str
    policy: str = "default"
    nodes: int = 1
    repository: str = ""
    app: str = ""
    nbytes: int | None = None
    ref: str = ""
    trial: str = ""
    id: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase: must be one of {', '.join(PHASES)} (got {self.phase!r})")
        if self.source not in SOURCES:
            raise ValueError(f"source: must be one of {', '.join(SOURCES)} (got {self.source!r})")
        for name in ("resource", "policy"):
            text = getattr(self, name)
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{name}: must not be empty")
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or self.nodes < 1:
            raise ValueError(f"nodes: must be a whole number >= 1 (got {self.nodes!r})")
        if not _finite(self.value) or self.value < 0:
            raise ValueError(f"value: must be a finite number of seconds >= 0 (got {self.value!r})")
        if not _finite(self.at):
            raise ValueError(f"at: must be a finite time in epoch seconds (got {self.at!r})")
        if self.nbytes is not None and (
            isinstance(self.nbytes, bool) or not isinstance(self.nbytes, int) or self.nbytes < 0
        ):
            raise ValueError(f"nbytes: must be a whole number >= 0 (got {self.nbytes!r})")
        if self.phase == PROBE:
            if not self.repository:
                raise ValueError("repository: a probe names the repository it measured")
            if not self.nbytes:
                raise ValueError("nbytes: a probe counts the bytes it moved (at least 1)")

    @property
    def key(self) -> Key:
        return Key(self.phase, self.resource, self.policy, self.nodes, self.repository, self.app)


@dataclass(frozen=True)
class ProbeFailure:
    """A probe of ``repository`` that moved nothing measurable, and why."""

    repository: str
    at: float
    error: str
    id: int = field(default=0, compare=False)


def _finite(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def store_path(state_dir: str | Path) -> Path:
    """The history file of the site whose state directory is ``state_dir``."""
    return Path(state_dir) / DEFAULT_FILE


class HistoryStore:
    """The observations of one site in one SQLite file; safe to share between processes
    and threads (each thread opens its own connection)."""

    def __init__(self, path: str | Path, timeout: float | None = None) -> None:
        self.path = Path(path)
        self.timeout = LOCK_TIMEOUT if timeout is None else timeout
        self._db = PerThread(self.path, synchronous="NORMAL", busy_timeout=self.timeout)
        private_dir(self.path.parent)
        self._db.create(_SCHEMA)

    def close(self) -> None:
        """Close this thread's connection (another call opens it again)."""
        self._db.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, observations: Iterable[Observation]) -> int:
        """Store ``observations`` in one transaction; how many were new (a ``ref`` already
        stored for the same source, phase and resource is skipped)."""
        rows = [
            (
                o.phase,
                o.resource,
                o.policy,
                o.nodes,
                o.repository,
                o.app,
                float(o.value),
                o.nbytes,
                float(o.at),
                o.source,
                o.ref,
                o.trial,
            )
            for o in observations
        ]
        if not rows:
            return 0
        with self._db.get().transaction() as db:
            before = db.total_changes
            db.executemany(
                f"INSERT OR IGNORE INTO observations ({_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            return db.total_changes - before

    def observations(
        self,
        phase: str | None = None,
        *,
        resource: str | None = None,
        policy: str | None = None,
        nodes: int | None = None,
        repository: str | None = None,
        app: str | None = None,
        source: str | None = None,
        trial: str | None = None,
        since_id: int = 0,
    ) -> list[Observation]:
        """The observations matching every filter given, in time order (then in the order
        stored); ``since_id`` keeps those stored after that row (see :attr:`Observation.id`)."""
        filters = {
            "phase": phase,
            "resource": resource,
            "policy": policy,
            "nodes": nodes,
            "repository": repository,
            "app": app,
            "source": source,
            "trial": trial,
        }
        where = ["id > ?"]
        args: list[object] = [since_id]
        for column, wanted in filters.items():
            if wanted is not None:
                where.append(f"{column} = ?")  # column names are ours, never the caller's
                args.append(wanted)
        rows = self._db.read(
            f"SELECT id, {_COLUMNS} FROM observations WHERE {' AND '.join(where)} ORDER BY at, id",
            args,
        )
        return [
            Observation(
                id=row[0],
                phase=row[1],
                resource=row[2],
                policy=row[3],
                nodes=row[4],
                repository=row[5],
                app=row[6],
                value=row[7],
                nbytes=row[8],
                at=row[9],
                source=row[10],
                ref=row[11],
                trial=row[12],
            )
            for row in rows
        ]

    def keys(self, phase: str | None = None) -> list[Key]:
        """Every key that has observations (of ``phase``, if given), sorted."""
        sql = "SELECT DISTINCT phase, resource, policy, nodes, repository, app FROM observations"
        rows = self._db.read(sql + " WHERE phase = ?", (phase,)) if phase else self._db.read(sql)
        return sorted(Key(*row) for row in rows)

    def count(self, phase: str | None = None) -> int:
        """How many observations are stored (of ``phase``, if given)."""
        sql = "SELECT count(*) FROM observations"
        rows = self._db.read(sql + " WHERE phase = ?", (phase,)) if phase else self._db.read(sql)
        return int(rows[0][0])

    def last_id(self) -> int:
        """The row number of the newest observation (0 when there is none)."""
        return int(self._db.read("SELECT coalesce(max(id), 0) FROM observations")[0][0])

    def add_probe_failure(self, failure: ProbeFailure) -> None:
        """Remember that a probe of a repository failed (it adds no observation)."""
        with self._db.get().transaction() as db:
            db.execute(
                "INSERT INTO probe_failures (repository, at, error) VALUES (?, ?, ?)",
                (failure.repository, float(failure.at), failure.error),
            )

    def probe_failures(
        self, repository: str | None = None, *, since: float | None = None
    ) -> list[ProbeFailure]:
        """Failed probes (of ``repository``; at or after ``since``), in time order."""
        where: list[str] = ["1"]
        args: list[object] = []
        if repository is not None:
            where.append("repository = ?")
            args.append(repository)
        if since is not None:
            where.append("at >= ?")
            args.append(since)
        rows = self._db.read(
            f"SELECT id, repository, at, error FROM probe_failures WHERE {' AND '.join(where)} "
            "ORDER BY at, id",
            args,
        )
        return [ProbeFailure(repository=r[1], at=r[2], error=r[3], id=r[0]) for r in rows]
