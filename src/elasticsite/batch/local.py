"""The embedded batch system: one SQLite file, no daemon, safe from many processes at once.

Every participant (the manager, the CLI, each worker process) opens the same file.
Scheduling is :meth:`LocalBatch.schedule_pass`, run inside the ``BEGIN IMMEDIATE``
transaction of whatever just changed the queue or the nodes (a submit, a worker
registering or finishing a job, an undrain, ...) and, as a safety net, by idle
workers now and then. A pass is idempotent: it only starts jobs on free cores.

Every public method raises :class:`~elasticsite.batch.base.BatchError` and nothing
else (the :class:`~elasticsite.batch.base.BatchSystem` contract): a file that cannot
be used is a :class:`BatchStateError` (``PATH: cause``), and anything else that fails
inside (a bad argument, a damaged row, SQLite, the operating system) is translated at
the method's boundary into a BatchError naming the file and the method.

This module is imported by every worker process, so it imports nothing heavy:
the standard library, :mod:`elasticsite.model` and the batch contracts only.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from elasticsite import attributes
from elasticsite.batch.base import (
    NODE_LOST,
    BatchError,
    BatchView,
    JobRequest,
    Node,
    NodeState,
    UnknownNode,
)
from elasticsite.batch.identity import USER_NAME
from elasticsite.batch.local_control import JobControl
from elasticsite.batch.local_schema import (
    JOB_COLUMNS,
    QUEUE_ORDER,
    SCHEMA_VERSION,
    Assignment,
    Queued,
    checked_node,
    checked_partition,
    checked_request,
    create_or_migrate,
    job_from_row,
)
from elasticsite.batch.local_workers import BatchStateError, translated
from elasticsite.batch.scheduling import POLICIES, schedule_owned
from elasticsite.sqlite import Connection, connect

__all__ = ["Assignment", "BatchStateError", "LocalBatch"]

log = logging.getLogger(__name__)

LOCK_TIMEOUT = 10.0
"""Seconds to wait for another process's write lock before giving up as "locked"."""
DEFAULT_SCHEDULER = "easy"


class LocalBatch(JobControl):
    """A batch system in one SQLite file (WAL): jobs, nodes and the scheduling pass.

    ``scheduler`` names a policy of :mod:`elasticsite.batch.scheduling`; it is stored
    in the file so every process schedules alike. ``None`` keeps the stored one
    (``"easy"`` for a new file); an unknown name is a ValueError, as the other adapters'
    bad options are. A node whose last heartbeat is older than ``heartbeat_timeout``
    seconds is DOWN and gets no new job.

    Partitions: every job and node is in one partition (``''``, the default, unless
    said otherwise), and a job runs only on nodes of its own. A job's partition is
    its ``partition`` attribute, else its ``vm_type`` (a job asking for a VM type runs
    on workers of that type only, declared with it as their ``pool``); nodes
    :meth:`add_node` declares (the manager's cloud workers) are in ``node_partition``,
    and nodes that register undeclared (a site's own) in the default one. With
    ``node_partition = "cloud"``, jobs run on cloud workers only once submitted or
    :meth:`redirect`-ed to ``cloud``.
    """

    def __init__(
        self,
        path: str | Path,
        scheduler: str | None = None,
        clock: Callable[[], float] = time.time,
        heartbeat_timeout: float = 30.0,
        node_partition: str = "",
    ) -> None:
        if scheduler is not None and scheduler not in POLICIES:
            raise ValueError(
                f"unknown scheduling policy {scheduler!r}; "
                f"valid policies: {', '.join(sorted(POLICIES))}"
            )
        self.node_partition = checked_partition("node_partition", node_partition)
        self.path = Path(path)
        self.clock = clock
        self.heartbeat_timeout = heartbeat_timeout
        self._local = threading.local()
        try:
            self._setup(scheduler)
        except BatchError:
            raise
        except Exception as exc:
            raise self._failure(exc, "open") from exc

    # -- connection and transactions ---------------------------------------------------

    def _conn(self) -> Connection:
        """This thread's connection (reopened after a fork: a child never uses its parent's)."""
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            conn = connect(self.path, synchronous="NORMAL", busy_timeout=LOCK_TIMEOUT)
            self._local.conn = conn
            self._local.pid = os.getpid()
        return conn

    def _tx(self, write: bool) -> AbstractContextManager[Connection]:
        """One transaction; ``write`` takes the write lock up front (no upgrade deadlocks)."""
        return self._conn().transaction(immediate=write)

    def _setup(self, scheduler: str | None) -> None:
        with self._tx(write=False) as tx:
            version = tx.execute("PRAGMA user_version").fetchone()[0]
        if not 0 <= version <= SCHEMA_VERSION:
            raise BatchError(
                f"local batch {self.path}: schema version {version} is newer than this "
                f"elasticsite's ({SCHEMA_VERSION}); upgrade elasticsite or use a new file"
            )
        if version == SCHEMA_VERSION and scheduler is not None and scheduler == self.scheduler:
            scheduler = None  # nothing to write: readers never wait for another's write lock
        if version < SCHEMA_VERSION or scheduler is not None:
            with self._tx(write=True) as tx:
                version = tx.execute("PRAGMA user_version").fetchone()[0]  # another may have
                if version < SCHEMA_VERSION:
                    if version:
                        log.info("local batch %s: migrating from schema %d", self.path, version)
                    create_or_migrate(tx, version)
                if scheduler is not None:
                    tx.execute("INSERT OR REPLACE INTO meta VALUES ('scheduler', ?)", (scheduler,))

    @translated
    def close(self) -> None:
        """Close this thread's connection (others close when their thread's data goes)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @property
    @translated
    def scheduler(self) -> str:
        """The scheduling policy this file uses."""
        with self._tx(write=False) as tx:
            return self._scheduler(tx)

    @staticmethod
    def _scheduler(tx: sqlite3.Connection) -> str:
        row = tx.execute("SELECT value FROM meta WHERE key = 'scheduler'").fetchone()
        return row[0] if row else DEFAULT_SCHEDULER

    # -- scheduling --------------------------------------------------------------------

    @translated
    def schedule_pass(self) -> list[tuple[str, str]]:
        """Start what can start now; returns ``(job_id, node)`` of the jobs it started."""
        with self._tx(write=True) as tx:
            return self._pass(tx, self.clock())

    def _pass(self, tx: sqlite3.Connection, now: float) -> list[tuple[str, str]]:
        tx.execute("INSERT OR REPLACE INTO meta VALUES ('last_pass', ?)", (repr(now),))
        nodes = tx.execute(
            "SELECT name, cores, partition, owner FROM nodes WHERE up = 1 AND drain = 0 "
            "AND heartbeat_at >= ? ORDER BY name",
            (now - self.heartbeat_timeout,),
        ).fetchall()
        if not nodes:
            return []
        free = {name: cores for name, cores, _, _ in nodes}
        part_of = {name: part for name, _, part, _ in nodes}
        owner_of = {name: owner for name, _, _, owner in nodes}
        running: dict[str, list[tuple[str, int, float]]] = {}
        for node, cores, end in tx.execute(
            "SELECT node, cores, started_at + walltime FROM jobs WHERE state = 'running'"
        ):
            if node in free:
                free[node] -= cores
                running.setdefault(part_of[node], []).append((node, cores, end))
        if all(f <= 0 for f in free.values()):
            return []
        queued: dict[str, list[Queued]] = {}
        users: dict[str, str] = {}
        for jid, cores, walltime, part, user in tx.execute(
            "SELECT id, cores, walltime, partition, user FROM jobs WHERE state = 'queued' "
            + QUEUE_ORDER
        ):
            queued.setdefault(part, []).append(Queued(str(jid), cores, walltime))
            users[str(jid)] = user
        if not queued:
            return []
        policy = self._scheduler(tx)
        started: list[tuple[str, str]] = []
        for part, waiting in queued.items():  # partitions share no node: one schedule each
            pool = [(n, max(f, 0), owner_of[n]) for n, f in free.items() if part_of[n] == part]
            if pool:  # an owned node runs its owner's jobs only
                started += schedule_owned(policy, now, waiting, pool, running.get(part, []), users)
        tx.executemany(
            "UPDATE jobs SET state = 'running', node = ?, started_at = ?, pid = NULL, "
            "attempt = attempt + 1 WHERE id = ? AND state = 'queued'",
            [(node, now, int(jid)) for jid, node in started],
        )
        if started:
            log.debug("scheduling pass started %d job(s)", len(started))
        return started

    # -- the BatchSystem contract ------------------------------------------------------

    @translated
    def snapshot(self) -> BatchView:
        """Queued (in priority order) and running jobs and all nodes, in one consistent read."""
        now = self.clock()
        with self._tx(write=False) as tx:
            queued = [
                job_from_row(r)
                for r in tx.execute(
                    f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = 'queued' {QUEUE_ORDER}"
                )
            ]
            running = [
                job_from_row(r)
                for r in tx.execute(
                    f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = 'running' ORDER BY id"
                )
            ]
            node_rows = tx.execute(
                "SELECT name, cores, up, drain, reason, heartbeat_at, registered_at, owner "
                "FROM nodes ORDER BY name"
            ).fetchall()
        used: dict[str, list[int]] = {}
        for job in running:
            if job.node is not None:
                count_cores = used.setdefault(job.node, [0, 0])
                count_cores[0] += 1
                count_cores[1] += job.cores
        nodes = [self._node(row, now, *used.get(row[0], (0, 0))) for row in node_rows]
        return BatchView(taken_at=now, queued=queued, running=running, nodes=nodes)

    def _node(self, row: tuple, now: float, jobs: int, busy_cores: int) -> Node:
        name, cores, up, drain, reason, heartbeat_at, registered_at, owner = row
        if not up or not self._beating(heartbeat_at, now):
            state = NodeState.DOWN
        elif drain:
            state = NodeState.DRAINING if jobs else NodeState.DRAINED
        else:
            state = NodeState.BUSY if jobs else NodeState.IDLE
        free = max(cores - busy_cores, 0) if state in (NodeState.IDLE, NodeState.BUSY) else 0
        return Node(name, cores, state, jobs, free, reason, heartbeat_at, registered_at, owner)

    @translated
    def add_node(self, name: str, cores: int, pool: str = "") -> None:
        """Declare a node (in ``node_partition``, or in the partition of its VM type
        ``pool``); it is DOWN until its worker registers. A known node is left alone."""
        checked_node("add_node", name, cores)
        partition = checked_partition("add_node", pool) or self.node_partition
        with self._tx(write=True) as tx:
            tx.execute(
                "INSERT OR IGNORE INTO nodes (name, cores, declared_at, partition) "
                "VALUES (?, ?, ?, ?)",
                (name, cores, self.clock(), partition),
            )

    @translated
    def drain(self, name: str, reason: str) -> None:
        """Give the node no new job; its running jobs go on."""
        if not isinstance(reason, str):
            raise BatchError(f"drain: reason must be a string, got {reason!r}")
        with self._tx(write=True) as tx:
            self._require_node(tx, name)
            tx.execute("UPDATE nodes SET drain = 1, reason = ? WHERE name = ?", (reason, name))

    @translated
    def undrain(self, name: str) -> None:
        """Accept jobs on the node again (and start what now fits)."""
        with self._tx(write=True) as tx:
            self._require_node(tx, name)
            tx.execute("UPDATE nodes SET drain = 0, reason = '' WHERE name = ?", (name,))
            self._pass(tx, self.clock())

    @translated
    def set_owner(self, name: str, user: str) -> None:
        """Start only ``user``'s jobs on the node (``""``: anyone's), and what now fits."""
        if not isinstance(user, str) or (user and not USER_NAME.fullmatch(user)):
            raise BatchError(f"set_owner: {user!r} is not a user name")
        with self._tx(write=True) as tx:
            self._require_node(tx, name)
            changed = tx.execute(
                "UPDATE nodes SET owner = ? WHERE name = ? AND owner != ?", (user, name, user)
            ).rowcount
            if changed:
                self._pass(tx, self.clock())

    @translated
    def remove_node(self, name: str) -> None:
        """Forget the node; jobs still recorded on it go back to the queue, requeued
        (``node lost`` if it had stopped reporting). Unknown: no-op."""
        with self._tx(write=True) as tx:
            now = self.clock()
            row = tx.execute(
                "SELECT up, heartbeat_at FROM nodes WHERE name = ?", (name,)
            ).fetchone()
            lost = row is None or not row[0] or not self._beating(row[1], now)
            why = f"{NODE_LOST} ({name} stopped reporting)" if lost else f"node {name} removed"
            requeued = self._requeue_node(tx, name, why)
            gone = tx.execute("DELETE FROM nodes WHERE name = ?", (name,)).rowcount
            if requeued:
                log.info("node %s removed: requeued %d job(s)", name, requeued)
            if gone or requeued:
                self._pass(tx, now)

    def _beating(self, heartbeat_at: float | None, now: float) -> bool:
        return heartbeat_at is not None and now - heartbeat_at <= self.heartbeat_timeout

    @staticmethod
    def _requeue_node(tx: sqlite3.Connection, name: str, reason: str) -> int:
        return tx.execute(
            "UPDATE jobs SET state = 'queued', node = NULL, started_at = NULL, pid = NULL, "
            "reason = ? WHERE state = 'running' AND node = ?",
            (reason, name),
        ).rowcount

    @staticmethod
    def _require_node(tx: sqlite3.Connection, name: str) -> None:
        if tx.execute("SELECT 1 FROM nodes WHERE name = ?", (name,)).fetchone() is None:
            raise UnknownNode(f"no node {name!r} in the local batch system")

    @translated
    def submit(self, request: JobRequest) -> str:
        """Queue a job and run a scheduling pass; returns the new job's id."""
        argv, attrs = checked_request(request)
        with self._tx(write=True) as tx:
            now = self.clock()
            cursor = tx.execute(
                "INSERT INTO jobs (command, cores, walltime, user, priority, state, submitted_at,"
                " partition, attributes) VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
                (json.dumps(argv), request.cores, float(request.walltime), request.user,
                 request.priority, now, attributes.partition_of(attrs),
                 json.dumps(attrs, sort_keys=True)),
            )  # fmt: skip
            job_id = str(cursor.lastrowid)
            self._pass(tx, now)
        return job_id
