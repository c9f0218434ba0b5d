"""SQLite state files, opened and changed one way: private, WAL, stated durability, one-line errors.

The manager's store, the embedded batch system, the local cloud's registry and the
broker's store each keep their state in one SQLite file, and several of those files
are shared by many processes at once. Each is opened with :func:`connect` and changed
inside :meth:`Connection.transaction` (a file shared by threads through
:class:`PerThread`, each thread its own connection), so every one of them

- is created 0600 before SQLite creates its ``-wal`` and ``-shm`` with the same mode
  (:func:`~elasticsite.files.private_sqlite`);
- runs in WAL mode, where readers never wait for a writer, with the ``synchronous``
  level its owner chose (``FULL``: a commit is on disk before anyone acts on it);
- waits a bounded time for another process's lock, then gives up as "locked";
- tells a file it cannot use (corrupt, locked, unwritable) as a one-line
  :class:`~elasticsite.files.StateFileError`, ``PATH: cause``.

Only the standard library and :mod:`elasticsite.files` are imported: every worker
process imports this module.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, ClassVar, Literal

from elasticsite.files import StateFileError, private_sqlite, state_file_error

__all__ = ["Connection", "PerThread", "Synchronous", "Table", "connect"]

Synchronous = Literal["FULL", "NORMAL"]
"""``FULL``: every commit is on disk; ``NORMAL``: a power loss may undo the last ones."""


class Connection(sqlite3.Connection):
    """A connection to one state file, in autocommit mode: changes go through transactions."""

    path: Path
    """The database file, named in every error."""

    @contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[Connection]:
        """One transaction: committed when the block ends, rolled back if it raises.

        ``immediate`` begins it ``BEGIN IMMEDIATE``: the write lock is taken (or waited
        for) up front, which serialises writers across processes and never leaves a
        transaction that has read failing half way when it comes to write. Otherwise it
        is deferred: a consistent read of one snapshot, which takes the write lock only
        when (and if) a statement writes.

        Inside a transaction already open the block joins it; the outermost one commits.
        SQLite errors that say the file is unusable become :class:`StateFileError`; any
        other (a constraint, a bug) is raised as it is.
        """
        try:
            if self.in_transaction:
                yield self
                return
            self.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
            try:
                yield self
                self.execute("COMMIT")
            except BaseException:
                if self.in_transaction:  # also after a failed COMMIT: never stay inside
                    with suppress(sqlite3.Error):
                        self.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            state = state_file_error(self.path, exc)
            if state is None:
                raise
            raise state from exc

    def create(self, schema: str) -> None:
        """Run the ``;``-separated statements of ``schema``, each on its own and deferred:
        one that finds its table (``IF NOT EXISTS``) takes no write lock, so opening a file
        to read works while another process writes."""
        for statement in filter(str.strip, schema.split(";")):
            with self.transaction(immediate=False):
                self.execute(statement)


class Table:
    """Tables that share a state file's connection with others: ``schema`` (the
    ``CREATE ... IF NOT EXISTS`` statements) is run when one is made."""

    schema: ClassVar[str]

    def __init__(self, db: Connection) -> None:
        self.db = db
        db.create(self.schema)


def connect(
    path: str | os.PathLike[str],
    *,
    synchronous: Synchronous,
    busy_timeout: float,
    create: bool = True,
    check_same_thread: bool = True,
) -> Connection:
    """Open state file ``path`` in WAL mode at the ``synchronous`` level given.

    A statement waits up to ``busy_timeout`` seconds for another process's lock before
    failing as locked. With ``create`` a missing file is created, private; without it a
    missing file is an error, for processes that must not bring back a file removed on
    purpose. ``check_same_thread=False`` lets threads take turns with one connection.
    Any failure raises :class:`StateFileError` naming the file.
    """
    if synchronous not in ("FULL", "NORMAL"):  # it goes into the statement's text
        raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
    p = Path(path)
    if create:
        private_sqlite(p)
    try:
        conn = sqlite3.connect(
            str(p) if create else f"{p.absolute().as_uri()}?mode=rw",
            timeout=busy_timeout,
            isolation_level=None,
            check_same_thread=check_same_thread,
            factory=Connection,
            uri=not create,
        )
    except sqlite3.Error as exc:
        raise _open_error(p, exc) from exc
    conn.path = p
    try:
        conn.execute("PRAGMA journal_mode = WAL")  # no lock needed when it is already
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    except sqlite3.Error as exc:
        conn.close()
        raise _open_error(p, exc) from exc
    return conn


class PerThread:
    """One state file used from many threads: each thread its own connection, opened
    (:func:`connect`, at the ``synchronous`` level given) when it first needs one."""

    def __init__(self, path: Path, *, synchronous: Synchronous, busy_timeout: float) -> None:
        self.path = path
        self.synchronous: Synchronous = synchronous
        self.busy_timeout = busy_timeout
        self._local = threading.local()

    def get(self) -> Connection:
        """This thread's connection."""
        db: Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = connect(self.path, synchronous=self.synchronous, busy_timeout=self.busy_timeout)
            self._local.db = db
        return db

    def create(self, schema: str) -> None:
        """:meth:`Connection.create` on this thread's connection."""
        self.get().create(schema)

    def read(self, sql: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """All rows of one query, read from one snapshot."""
        with self.get().transaction(immediate=False) as db:
            return db.execute(sql, args).fetchall()

    def close(self) -> None:
        """Close this thread's connection (its next use opens another)."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None


def _open_error(path: Path, exc: sqlite3.Error) -> StateFileError:
    """What a failure to open ``path`` means: whatever it is, the file cannot be used."""
    return state_file_error(path, exc) or StateFileError(path, f"cannot open ({exc})")
