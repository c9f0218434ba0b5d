"""State files in tests: a file's permission bits, and another process holding a SQLite
lock on one (the ``umask_022`` fixture is in tests/conftest.py)."""

from __future__ import annotations

import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_HOLD = (
    "import sqlite3, sys\n"
    "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "db.execute('BEGIN ' + sys.argv[2])\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)


def mode(path: Path) -> int:
    """``path``'s permission bits."""
    return stat.S_IMODE(path.stat().st_mode)


@contextmanager
def locked_by_another_process(path: Path, lock: str = "EXCLUSIVE") -> Iterator[None]:
    """Another process holds the database ``path``'s lock until the block ends: with
    ``EXCLUSIVE`` no one else reads or writes it; with ``IMMEDIATE`` no one else writes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(path), lock],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield
    finally:
        proc.stdin.close()
        proc.wait(10)
