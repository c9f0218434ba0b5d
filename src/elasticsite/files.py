"""State files: created private, written atomically, and their failures told in one line.

The state directory holds a broker context's key and secret (in the manager's store
and in every worker's user data), SSH host keys and the job queue, so everything in
it is created for its owner alone: directories 0700, files 0600. SQLite creates a
database's ``-wal`` and ``-shm`` files with the database file's mode, which is why
:func:`private_sqlite` creates the database file itself, 0600, before SQLite opens it.

A state file that cannot be used raises :class:`StateFileError`, whose message is one
line naming the file and the cause (``manager.db: locked by another process``), so a
command can print it and exit instead of showing a traceback.

Only the standard library is imported here: every worker process imports this module.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import stat
import tempfile
from pathlib import Path

__all__ = [
    "StateFileError",
    "private_dir",
    "private_file",
    "private_opener",
    "private_sqlite",
    "state_file_error",
    "write_private",
]

log = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
_SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


class StateFileError(Exception):
    """A state file or directory cannot be used: ``PATH: cause``, on one line."""

    def __init__(self, path: str | os.PathLike[str], cause: str) -> None:
        super().__init__(f"{os.fspath(path)}: {cause}")
        self.path = os.fspath(path)
        self.cause = cause

    def __reduce__(self) -> tuple[type[StateFileError], tuple[str, str]]:
        # Rebuilt from its parts when it crosses a process boundary.
        return type(self), (self.path, self.cause)


def _shared(path: Path, st: os.stat_result) -> bool:
    """Whether ``path`` looks like a directory other people or the system use too.

    Sticky directories (``/tmp``), mount points, top-level system directories and the
    home directory (or one above it) are never tightened.
    """
    if st.st_mode & stat.S_ISVTX or len(path.parts) <= 2 or os.path.ismount(path):
        return True
    with contextlib.suppress(RuntimeError, KeyError):
        home = Path.home().resolve()
        if path == home or path in home.parents:
            return True
    return False


def private_dir(path: str | os.PathLike[str], *, tighten: bool = True) -> Path:
    """Create directory ``path`` (and missing parents) for its owner alone (0700).

    With ``tighten``, a directory that already exists with a looser mode is tightened,
    with a warning, when it is ours and not a shared place such as ``/tmp`` or a home
    directory; one that is not ours is left as it is. Raises :class:`StateFileError`.
    """
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        try:
            p.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass
        else:
            os.chmod(p, DIR_MODE)  # whatever the umask left
            return p
        st = p.stat()
    except OSError as exc:
        where = "" if exc.filename in (None, str(p)) else f"{exc.filename}: "
        raise StateFileError(p, f"cannot create directory ({where}{_reason(exc)})") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise StateFileError(p, "cannot create directory (a file is in the way)")
    loose = stat.S_IMODE(st.st_mode) & 0o077
    if tighten and loose and st.st_uid == os.geteuid() and not _shared(p.resolve(), st):
        try:
            os.chmod(p, stat.S_IMODE(st.st_mode) & ~0o077)
        except OSError as exc:
            log.warning("%s is readable by others and cannot be tightened: %s", p, exc.strerror)
        else:
            log.warning(
                "%s was mode %04o, readable by others; tightened to owner only (it holds secrets)",
                p,
                stat.S_IMODE(st.st_mode),
            )
    return p


def private_file(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` empty, 0600, if it does not exist; tighten it if it is ours and looser.

    An existing file is never opened, only looked at and changed by name: closing a
    descriptor of a file drops every POSIX lock this process holds on it, SQLite's
    included, and another process could then truncate a database's ``-shm`` that this
    one has mapped. Raises :class:`StateFileError` when the file cannot be created.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        _tighten(p)
        return p
    except OSError as exc:
        raise StateFileError(p, f"cannot write ({_reason(exc)})") from exc
    os.close(fd)  # just created: no lock on it to lose
    return p


def _tighten(p: Path, *, missing_ok: bool = False) -> None:
    """An existing file made the owner's alone (if it is ours), by name; with
    ``missing_ok``, a file that is not there (or goes meanwhile) is left alone."""
    try:
        st = p.stat()
    except FileNotFoundError:
        if missing_ok:
            return
        raise StateFileError(p, "cannot write (no such file or directory)") from None
    except OSError as exc:
        raise StateFileError(p, f"cannot write ({_reason(exc)})") from exc
    if stat.S_ISDIR(st.st_mode):
        raise StateFileError(p, "cannot write (is a directory)")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077 and st.st_uid == os.geteuid():
        try:
            os.chmod(p, mode & ~0o077)
        except FileNotFoundError:
            if not missing_ok:
                log.warning("%s went before it could be tightened", p)
            return
        except OSError as exc:
            log.warning("%s is readable by others and cannot be tightened: %s", p, exc.strerror)
        else:
            log.warning("%s was mode %04o, readable by others; tightened", p, mode)


def private_opener(path: str, flags: int) -> int:
    """An ``opener`` for :func:`open` that creates files 0600 (logs, which may quote secrets)."""
    return os.open(path, flags | os.O_CLOEXEC, FILE_MODE)


def private_sqlite(path: str | os.PathLike[str]) -> Path:
    """Prepare a SQLite database file: it and its side files exist only as 0600.

    Call before connecting, so SQLite (which gives ``-wal`` and ``-shm`` the mode of the
    database file) creates nothing readable by others.
    """
    p = private_file(path)
    for suffix in _SQLITE_SIDE_FILES:
        # A side file comes and goes with other connections: SQLite deletes the -wal
        # when the last one closes, maybe between a look at it and its chmod.
        _tighten(Path(f"{p}{suffix}"), missing_ok=True)
    return p


def write_private(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Replace ``path`` atomically with ``data``, readable by its owner only.

    The data goes to a 0600 temporary file in the same directory, which is flushed to
    disk and renamed over ``path``: a reader sees the old content or the new, never
    part of it, and never a moment when the file is readable by others.
    """
    p = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return p


def _reason(exc: OSError) -> str:
    """The operating system's reason in lower case: ``read-only file system``, ..."""
    return (exc.strerror or os.strerror(exc.errno or errno.EIO)).lower()


def state_file_error(
    path: str | os.PathLike[str], exc: sqlite3.Error | OSError
) -> StateFileError | None:
    """The :class:`StateFileError` an error means for state file ``path``, if it is one.

    Corrupt, locked and unwritable files are; errors of a statement (a constraint, a
    bug) are not, and give None.
    """
    if isinstance(exc, OSError):
        return StateFileError(exc.filename or path, f"cannot write ({_reason(exc)})")
    text = str(exc).lower()
    if "not a database" in text or "file is encrypted" in text:
        cause = "not an SQLite database (corrupt?)"
    elif "malformed" in text or "corrupt" in text:
        cause = "damaged SQLite database (malformed; restore it or move it aside)"
    elif "locked" in text or "busy" in text:
        cause = "locked by another process"
    elif "readonly" in text or "read-only" in text:
        cause = "cannot write (read-only?)"
    elif "unable to open" in text:
        cause = "cannot open (missing directory or no permission?)"
    elif "disk i/o" in text:
        cause = "cannot write (I/O error)"
    elif "full" in text:
        cause = "cannot write (disk full)"
    else:
        return None
    return StateFileError(path, cause)
