"""The ``elasticsite`` command line as a person runs it, for tests: a real process in a
directory of the test's own, which is also its HOME, with a plain PATH."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def argv(*args: str) -> list[str]:
    """The command line ``elasticsite ARGS`` with this interpreter."""
    return [sys.executable, "-m", "elasticsite", *args]


def run_cli(
    *args: str, cwd: Path, check: bool = False, columns: int = 120, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``elasticsite ARGS`` run in ``cwd`` on a terminal ``columns`` wide, its output
    captured as text; with ``check``, a non-zero exit raises."""
    return subprocess.run(
        argv(*args),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
        env={"COLUMNS": str(columns), "PATH": "/usr/bin:/bin", "HOME": str(cwd)},
    )
