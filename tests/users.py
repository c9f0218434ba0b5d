"""Real Unix users for tests that need a job to belong to someone else: made with
``useradd`` (root only; skipped otherwise), each with a home directory, removed after."""

from __future__ import annotations

import os
import pwd
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

_LOCKED = (1, 10)
"""``useradd``/``userdel`` exit codes for "cannot lock or update /etc/passwd" (another
test is adding or removing a user at the same time): try again."""


def _run(argv: list[str], patience: float = 60.0) -> None:
    deadline = time.monotonic() + patience
    while True:
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode == 0:
            return
        if done.returncode not in _LOCKED or time.monotonic() > deadline:
            raise AssertionError(f"{' '.join(argv)}: {done.returncode}: {done.stderr.strip()}")
        time.sleep(0.2)


@contextmanager
def real_users(count: int = 1) -> Iterator[list[pwd.struct_passwd]]:
    """``count`` fresh users (``es`` and random letters), each with a home directory."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the test creates real users with useradd")
    made: list[str] = []
    try:
        for _ in range(count):
            name = f"es{uuid.uuid4().hex[:12]}"
            _run(["useradd", "--create-home", "--shell", "/bin/sh", name])
            made.append(name)
        yield [pwd.getpwnam(name) for name in made]
    finally:
        for name in made:
            _run(["userdel", "--force", "--remove", name])
