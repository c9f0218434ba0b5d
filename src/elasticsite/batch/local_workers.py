"""The embedded batch system's side that worker processes call, and its error boundary.

:class:`WorkerEndpoints` holds what a worker does with the batch file (register its
node, heartbeat, take and finish jobs, leave); :class:`~elasticsite.batch.local.LocalBatch`
inherits it and provides the connection, the scheduling pass and the node removal
these use. Every public method raises :class:`~elasticsite.batch.base.BatchError`
only (:func:`translated`).
"""

from __future__ import annotations

import functools
import json
import logging
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from elasticsite.batch.base import BatchError, exit_reason
from elasticsite.batch.local_schema import (
    JOB_COLUMNS,
    Assignment,
    checked_node,
    job_from_row,
    job_key,
)
from elasticsite.files import StateFileError
from elasticsite.jobs import Job
from elasticsite.sqlite import Connection

__all__ = ["BatchStateError", "Ended", "WorkerEndpoints", "translated"]

log = logging.getLogger("elasticsite.batch.local")

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S", bound="WorkerEndpoints")


Ended = tuple[str, int, int] | tuple[str, int, int, str]
"""A job's end as its worker reports it: ``(job_id, attempt, status)`` or with a
``reason``. ``status`` is the process's as :mod:`subprocess` gives it: its exit code,
or minus the signal that killed it."""


class BatchStateError(BatchError, StateFileError):
    """The batch file itself is unusable (corrupt, locked, unwritable): ``PATH: cause``."""


def translated(
    method: Callable[Concatenate[_S, _P], _R],
) -> Callable[Concatenate[_S, _P], _R]:
    """``method`` raising BatchError only: any other failure is translated, chained."""

    @functools.wraps(method)
    def boundary(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except BatchError:
            raise
        except Exception as exc:  # the contract: callers (a worker) catch BatchError only
            raise self._failure(exc, method.__name__) from exc

    return boundary


class WorkerEndpoints(ABC):
    """What worker processes call; see the module docstring."""

    path: Path
    clock: Callable[[], float]

    @abstractmethod
    def _tx(self, write: bool) -> AbstractContextManager[Connection]: ...

    @abstractmethod
    def _pass(self, tx: sqlite3.Connection, now: float) -> list[tuple[str, str]]: ...

    @staticmethod
    @abstractmethod
    def _requeue_node(tx: sqlite3.Connection, name: str, reason: str) -> int: ...

    @abstractmethod
    def remove_node(self, name: str) -> None: ...

    def _failure(self, exc: Exception, doing: str) -> BatchError:
        """What a public method raises for ``exc``, a failure while ``doing``:
        :class:`BatchStateError` when the file is the problem, else a BatchError naming
        the file and the method."""
        if isinstance(exc, StateFileError):
            return BatchStateError(exc.path, exc.cause)
        return BatchError(f"local batch {self.path}: {doing}: {exc}")

    @translated
    def register_node(self, name: str, cores: int) -> None:
        """A worker reports its node up (creating it if undeclared); nothing runs there yet."""
        checked_node("register_node", name, cores)
        with self._tx(write=True) as tx:
            now = self.clock()
            tx.execute(
                "INSERT INTO nodes (name, cores, up, heartbeat_at, registered_at, declared_at) "
                "VALUES (?, ?, 1, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET up = 1, "
                "cores = excluded.cores, heartbeat_at = excluded.heartbeat_at, "
                "registered_at = excluded.registered_at",
                (name, cores, now, now, now),
            )
            # jobs still recorded here died with the worker's previous run
            self._requeue_node(tx, name, f"node lost ({name} started again without its jobs)")
            self._pass(tx, now)

    @translated
    def heartbeat(self, name: str) -> None:
        """Record that the node is alive."""
        with self._tx(write=True) as tx:
            tx.execute("UPDATE nodes SET heartbeat_at = ? WHERE name = ?", (self.clock(), name))

    @translated
    def assigned(self, name: str) -> list[Job]:
        """The jobs running on ``name``."""
        with self._tx(write=False) as tx:
            rows = tx.execute(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = 'running' AND node = ? ORDER BY id",
                (name,),
            ).fetchall()
        return [job_from_row(r) for r in rows]

    @translated
    def finish_job(
        self,
        job_id: str,
        node: str,
        exit_code: int,
        attempt: int | None = None,
        reason: str = "",
    ) -> bool:
        """Record a job's end if it still runs on ``node`` (and is that ``attempt``):
        completed for exit code 0, else failed; a negative ``exit_code`` is the signal
        that killed it (as :mod:`subprocess` says), ``reason`` why in words.

        Returns False, changing nothing, for a job preempted or requeued meanwhile.
        """
        with self._tx(write=True) as tx:
            now = self.clock()
            done = self._finish(tx, node, [(job_id, attempt, exit_code, reason)], now)
            if done:
                self._pass(tx, now)
        return bool(done)

    @staticmethod
    def _finish(
        tx: sqlite3.Connection,
        node: str,
        ends: Iterable[tuple[str, int | None, int] | tuple[str, int | None, int, str]],
        now: float,
    ) -> int:
        """Mark jobs completed or failed at ``now`` (the same instant a pass in this
        transaction starts their successors, so a node's jobs never overlap in the
        records)."""
        done = 0
        for end in ends:
            job_id, attempt, status, reason = _fields(end, 3, "(job_id, attempt, status[, reason])")
            status = int(status)
            code, sig = (status, None) if status >= 0 else (None, -status)
            state = "completed" if status == 0 else "failed"
            done += tx.execute(
                "UPDATE jobs SET state = ?, finished_at = ?, exit_code = ?, signal = ?, "
                "reason = ? WHERE id = ? AND state = 'running' AND node = ? "
                "AND (? IS NULL OR attempt = ?)",
                (state, now, code, sig, str(reason) or exit_reason(code), job_key(str(job_id)),
                 node, attempt, attempt),
            ).rowcount  # fmt: skip
        return done

    @translated
    def leave(self, name: str) -> None:
        """The node goes away for good (same as :meth:`remove_node`)."""
        self.remove_node(name)

    @translated
    def worker_poll(
        self,
        name: str,
        finished: Sequence[Ended] = (),
        heartbeat: bool = False,
        want_jobs: bool = False,
        pass_interval: float = 1.0,
    ) -> list[Assignment]:
        """A worker's whole periodic exchange in one small transaction.

        Records ``finished`` jobs (:data:`Ended`), refreshes the heartbeat
        if asked, runs a scheduling pass if jobs finished, or if the worker
        ``want_jobs`` and jobs wait and no pass ran for ``pass_interval`` seconds, and
        returns what should run on ``name``. Without anything to write it is a read.
        """
        now = self.clock()
        write = bool(finished) or heartbeat
        if not write:  # the common case: one read
            with self._tx(write=False) as tx:
                write = want_jobs and self._pass_due(tx, now, pass_interval)
                if not write:
                    return self._assignments(tx, name)
        with self._tx(write=True) as tx:
            beat = "UPDATE nodes SET heartbeat_at = ? WHERE name = ?"
            if heartbeat and not tx.execute(beat, (now, name)).rowcount:
                log.warning("node %s is not in the batch system (removed?)", name)
            done = self._finish(tx, name, finished, now) if finished else 0
            if done or (want_jobs and self._pass_due(tx, now, pass_interval)):
                self._pass(tx, now)
            return self._assignments(tx, name)

    @staticmethod
    def _assignments(tx: sqlite3.Connection, name: str) -> list[Assignment]:
        rows = tx.execute(
            "SELECT id, attempt, command, cores, walltime, user FROM jobs "
            "WHERE state = 'running' AND node = ? ORDER BY id",
            (name,),
        ).fetchall()
        return [Assignment(str(i), a, json.loads(c), n, w, u) for i, a, c, n, w, u in rows]

    @staticmethod
    def _pass_due(tx: sqlite3.Connection, now: float, interval: float) -> bool:
        row = tx.execute(
            "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'queued'), "
            "(SELECT value FROM meta WHERE key = 'last_pass')"
        ).fetchone()
        return bool(row[0]) and (row[1] is None or now - float(row[1]) >= interval)

    @translated
    def record_pids(
        self,
        node: str,
        pids: Iterable[tuple[str, int, int | None] | tuple[str, int, int | None, str]],
        worker_log: str = "",
    ) -> None:
        """Note, for operators and ``elasticsite job``, each started job's
        ``(job_id, attempt, pid)`` and its working directory if given (``pid`` None:
        it could not start, and the directory holds the worker's note on ``stderr``),
        and the log of the worker that started it."""
        rows = []
        for start in pids:
            job_id, attempt, pid, workdir = _fields(start, 3, "(job_id, attempt, pid[, workdir])")
            rows.append((pid, str(workdir), worker_log, job_key(str(job_id)), attempt, node))
        with self._tx(write=True) as tx:
            tx.executemany(
                "UPDATE jobs SET pid = ?, workdir = COALESCE(NULLIF(?, ''), workdir), "
                "worker_log = COALESCE(NULLIF(?, ''), worker_log) "
                "WHERE id = ? AND attempt = ? AND node = ? AND state = 'running'",
                rows,
            )


def _fields(given: tuple[Any, ...], needed: int, form: str) -> tuple[Any, ...]:
    """``given`` with its optional last field (``""`` when left out); a tuple of another
    length is a ValueError naming the ``form`` expected."""
    if not isinstance(given, tuple) or not needed <= len(given) <= needed + 1:
        raise ValueError(f"expected {form}, got {given!r}")
    return given if len(given) > needed else (*given, "")
