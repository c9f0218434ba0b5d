"""The embedded cloud's instance registry: one SQLite file shared by the cloud and its workers.

Opened one way (:func:`cloud_db`: private, WAL, migrated on first use); workers record
their own progress with :func:`set_instance_state`. Apart from
:mod:`elasticsite.clouds.local` so that module stays the driver alone.
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path

from elasticsite.boottime import BootPath, replay
from elasticsite.clouds.errors import CloudError
from elasticsite.clouds.local_spot import RECLAIMS_SCHEMA
from elasticsite.files import StateFileError
from elasticsite.sqlite import connect

__all__ = [
    "LOCK_TIMEOUT",
    "REPLAY_WINDOW",
    "CloudStateError",
    "boot_end",
    "cloud_db",
    "process_alive",
    "set_instance_state",
    "worker_log",
]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    site TEXT NOT NULL,
    state TEXT NOT NULL,
    tags TEXT NOT NULL,
    vm_type TEXT NOT NULL,
    cores INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    pid INTEGER
)
"""
HAVE_PROC = os.path.isdir("/proc/self")
LOCK_TIMEOUT = 10.0
"""Seconds to wait for another process's write lock before giving up as "locked"."""
REPLAY_WINDOW = 2 * 86400.0
"""Seconds before an instance's launch whose boots :func:`boot_end` looks back over."""
_BOOT_DONE = """
CREATE TRIGGER IF NOT EXISTS boot_done AFTER UPDATE OF state ON instances
WHEN OLD.state = 'pending' AND NEW.state != 'pending'
BEGIN
    UPDATE instances SET boot_done = COALESCE(boot_done, NEW.updated_at) WHERE id = NEW.id;
END
"""
"""Whoever moves an instance out of ``pending`` (its worker joining, a termination, a
failure), its boot leaves the cloud's boot path then."""


def worker_log(state_dir: Path, name: str, part: str = "") -> Path:
    """The log of instance ``name``'s worker process (``logs/NAME.log``), or of one of
    its parts (``logs/NAME.agent.log``, ``logs/NAME.slurmd.log``)."""
    return state_dir / "logs" / (f"{name}.{part}.log" if part else f"{name}.log")


class CloudStateError(CloudError, StateFileError):
    """The registry or state directory itself is unusable: ``PATH: cause``."""


@contextmanager
def cloud_db(
    path: Path | str, write: bool = True, create: bool = True
) -> Iterator[sqlite3.Connection]:
    """One transaction on a cloud registry (created, in WAL mode, if ``create``).

    ``write`` takes the write lock up front: the manager and every worker process write
    here, one after another. Workers open with ``create=False``: a registry that vanished
    means the cloud is gone, not that a new one should start. Errors become
    :class:`CloudError` (:class:`CloudStateError` when the file itself is unusable).
    """
    try:
        with (
            closing(
                connect(path, synchronous="FULL", busy_timeout=LOCK_TIMEOUT, create=create)
            ) as conn,
            conn.transaction(immediate=write),
        ):
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version < 2:  # a new registry, or one from before spot notices
                conn.execute(_SCHEMA)
                conn.execute(RECLAIMS_SCHEMA)
                conn.execute("PRAGMA user_version = 2")
                version = 2
            if version < 3:  # from before boots slowed each other down
                conn.execute("ALTER TABLE instances ADD COLUMN boot_extra REAL NOT NULL DEFAULT 0")
                conn.execute("PRAGMA user_version = 3")
            if version < 4:  # from before boots shared a boot path (boot_extra: unused)
                conn.execute("ALTER TABLE instances ADD COLUMN boot_rest REAL")
                conn.execute("ALTER TABLE instances ADD COLUMN boot_done REAL")
                conn.execute(_BOOT_DONE)
                conn.execute("PRAGMA user_version = 4")
            if version < 5:  # from before a pending row named the process launching it
                conn.execute("ALTER TABLE instances ADD COLUMN launcher INTEGER")
                conn.execute("PRAGMA user_version = 5")
            yield conn
    except StateFileError as exc:
        raise CloudStateError(exc.path, exc.cause) from exc
    except sqlite3.Error as exc:
        raise CloudError(f"local cloud registry {path}: {exc}") from exc


def set_instance_state(
    path: Path | str,
    instance_id: str,
    state: str | None,
    *,
    pid: int | None = None,
    only_from: Sequence[str] = (),
) -> str | None:
    """Record an instance's state and/or worker pid; returns the state it had before.

    With ``only_from``, the state changes only from one of those states, so a worker
    finishing its boot never overwrites a ``stopping`` set by :meth:`LocalCloud.terminate`.
    Returns None for an instance the registry does not know.
    """
    with cloud_db(path, create=False) as db:
        row = db.execute("SELECT state FROM instances WHERE id = ?", (instance_id,)).fetchone()
        if row is None:
            return None
        if state is None or (only_from and row[0] not in only_from):
            state = row[0]
        db.execute(
            "UPDATE instances SET state = ?, pid = COALESCE(?, pid), updated_at = ? WHERE id = ?",
            (state, pid, time.time(), instance_id),
        )
        return str(row[0])


def _exists(pid: int) -> bool | None:
    """False if there is no process ``pid``; True if there is one this machine cannot
    look into (not ours, or no /proc); None when /proc can say more."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return None if HAVE_PROC else True


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (state, parent, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_alive(pid: int, instance_id: str, launcher: int | None = None) -> bool:
    """Whether ``pid`` is a live (non-zombie) worker process of ``instance_id``: its
    command line names the instance, or it is a child of ``launcher`` (the process that
    started it) that has not yet replaced the launcher's command line with its own."""
    if (known := _exists(pid)) is not None:
        return known
    try:  # a zombie has an empty command line; a reused pid has another one
        if instance_id.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            return True
        stat = _stat(pid)
    except (OSError, IndexError):
        return False
    return launcher is not None and stat[0] != "Z" and int(stat[1]) == launcher


SPAWN_GRACE = 10.0
"""Seconds a pending row naming no launcher (an older registry's) may lack a worker pid."""
LAUNCH_BOUND = 600.0
"""Seconds a pending row may lack a worker pid while its launcher runs: a launch call
starting many workers on a busy machine takes a while, one stuck takes no longer."""


def being_started(launcher: int | None, launching_here: bool, age: float) -> bool:
    """Whether an instance whose row has no worker pid yet, ``age`` seconds old, is still
    being started by the launch that created it: in this process, while that call lasts
    (``launching_here``); in another, while that process lives."""
    if launcher is None:
        return age < SPAWN_GRACE
    if launcher == os.getpid():
        return launching_here
    return launcher_alive(launcher) and age < LAUNCH_BOUND


def launcher_alive(pid: int) -> bool:
    """Whether process ``pid`` (one launching instances) still runs: not gone, not a
    zombie."""
    if (known := _exists(pid)) is not None:
        return known
    try:
        return _stat(pid)[0] != "Z"
    except (OSError, IndexError):
        return False


def boot_end(path: Path | str, instance_id: str, boot_path: BootPath) -> float | None:
    """When this instance's boot ends on the cloud's ``boot_path``, as the registry
    knows it now (a boot launched later may still push it back, within the path's
    bound); None for an instance unknown or already off the path.

    Replays the boots of the cloud (:func:`elasticsite.boottime.replay`): each from its
    launch, with the rest it takes after its image transfer (``boot_rest``), until
    it left the path (``boot_done``), from the last moment before this instance's
    launch that no boot was in progress (within :data:`REPLAY_WINDOW`).
    """
    with cloud_db(path, write=False, create=False) as db:
        mine = db.execute(
            "SELECT created_at, boot_done FROM instances WHERE id = ?", (instance_id,)
        ).fetchone()
        if mine is None or mine[1] is not None:
            return None
        rows = db.execute(
            "SELECT id, created_at, boot_rest, boot_done FROM instances WHERE boot_rest IS "
            "NOT NULL AND created_at >= ? ORDER BY created_at, rowid",
            (mine[0] - REPLAY_WINDOW,),
        ).fetchall()
    start, busy_until = 0, -math.inf
    for i, (row_id, created_at, _, done) in enumerate(rows):
        if busy_until <= created_at:
            start = i  # nothing was booting when this one was launched
        if row_id == instance_id:
            break
        busy_until = max(busy_until, math.inf if done is None else done)
    ends = replay(((r[0], r[1], r[2], r[3]) for r in rows[start:]), boot_path)
    return ends.get(instance_id)
