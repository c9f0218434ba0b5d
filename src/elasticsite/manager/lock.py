"""One manager per site: an exclusive lock on ``manager.lock`` in the state directory.

``elasticsite run`` and ``elasticsite down`` hold it while they work, so a second one on
the same site is refused with the first one's process id instead of two loops deciding
for the same workers. The lock is ``flock``: the kernel drops it when the process
dies, so a killed manager never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from elasticsite.files import FILE_MODE, private_dir

__all__ = ["LOCK_FILE", "SiteBusy", "manager_lock"]

LOCK_FILE = "manager.lock"


class SiteBusy(RuntimeError):
    """Another process manages this site now."""


@contextlib.contextmanager
def manager_lock(state_dir: Path, what: str = "manager") -> Iterator[None]:
    """Hold the site's manager lock; :class:`SiteBusy` if another process has it."""
    path = private_dir(state_dir) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            raise SiteBusy(
                f"{path}: another elasticsite process (pid {holder}) manages this site; "
                f"stop it before starting a {what}"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
