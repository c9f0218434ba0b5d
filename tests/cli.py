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


def site_file(directory: Path, template: str, **values: object) -> tuple[Path, Path]:
    """Write ``directory/site.toml`` from ``template``, whose ``{state}`` is
    ``directory/state`` and whose other fields are ``values``; the file and that state
    directory."""
    state = directory / "state"
    cfg = directory / "site.toml"
    cfg.write_text(template.format(state=state, **values))
    return cfg, state


def start_run(cfg: Path, log: Path, *options: str) -> subprocess.Popen[bytes]:
    """``elasticsite run -c CFG OPTIONS`` in the background, its output added to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(argv("run", "-c", str(cfg), *options), stdout=out, stderr=out)
