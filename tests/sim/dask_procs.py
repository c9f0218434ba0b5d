"""Real Dask schedulers and workers on 127.0.0.1 for the tests: processes of this
venv's Python, or of an environment that has ``distributed`` but not elasticsite (this
venv's site-packages without elasticsite, its editable hook and its ``.pth`` files,
run with ``python -S``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

import pytest
from tests.context.conftest import free_port

PYTHON = sys.executable


def bare_site(tmp: Path) -> Path:
    """A directory holding everything this venv installed except elasticsite; skips the
    test when Python started on it with ``-S`` still finds elasticsite or lacks Dask."""
    site = Path(sysconfig.get_paths()["purelib"])
    bare = tmp / "bare-site"
    bare.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("elasticsite", "__editable__")) or name.endswith(".pth"):
            continue
        (bare / entry.name).symlink_to(entry)
    check = subprocess.run(
        [PYTHON, "-S", "-c", "import distributed, importlib.util as u; "
         "print(u.find_spec('elasticsite') is None)"],
        env={**os.environ, "PYTHONPATH": str(bare)}, cwd=tmp, capture_output=True, text=True,
    )  # fmt: skip
    if check.stdout.strip() != "True":
        pytest.skip(f"cannot make an environment with Dask but no elasticsite: {check.stderr}")
    return bare


class Dask:
    """Schedulers and workers started by one test (or module); :meth:`stop` ends them."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.log = (tmp / "dask.log").open("w")
        self.procs: list[subprocess.Popen[bytes]] = []
        self._bare: Path | None = None

    def _start(
        self, args: list[str], bare: bool, env: dict[str, str], cwd: Path
    ) -> subprocess.Popen[bytes]:
        full = {**os.environ, **env}
        python = [PYTHON]
        if bare:
            self._bare = self._bare or bare_site(self.tmp)
            full["PYTHONPATH"] = str(self._bare)
            python = [PYTHON, "-S"]
        p = subprocess.Popen([*python, "-m", *args], stdout=self.log, stderr=self.log,
                             env=full, cwd=cwd)  # fmt: skip
        self.procs.append(p)
        return p

    def scheduler(self, *, bare: bool = False, env: dict[str, str] | None = None) -> str:
        """A scheduler's address, once it accepts connections."""
        port = free_port()
        self._start(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port",
                     str(port), "--no-dashboard"], bare, env or {}, self.tmp)  # fmt: skip
        address = f"tcp://127.0.0.1:{port}"
        from distributed import Client

        with Client(address, timeout=60):
            pass
        return address

    def worker(self, address: str, name: str, *, bare: bool = False) -> subprocess.Popen[bytes]:
        """A one-thread worker whose working directory is ``tmp/cwd-NAME`` (empty)."""
        cwd = self.tmp / f"cwd-{name}"
        cwd.mkdir()
        return self._start(["distributed.cli.dask_worker", address, "--nthreads", "1",
                            "--no-nanny", "--no-dashboard", "--name", name, "--host",
                            "127.0.0.1"], bare, {}, cwd)  # fmt: skip

    def stop(self) -> None:
        """Workers first: one whose scheduler closes under it may hang in its own close."""
        workers = [p for p in self.procs if "distributed.cli.dask_worker" in p.args]
        for group in (workers, [p for p in self.procs if p not in workers]):
            for p in group:
                if p.poll() is None:
                    p.send_signal(signal.SIGCONT)
                    p.send_signal(signal.SIGTERM)
            for p in group:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.log.close()


def wait_for_workers(address: str, names: set[str]) -> None:
    """Return once exactly the workers named are connected to the scheduler."""
    from distributed import Client

    with Client(address, timeout=60) as client:
        deadline = time.monotonic() + 120
        while True:
            info = client.run_on_scheduler(
                lambda dask_scheduler: [w.name for w in dask_scheduler.workers.values()]
            )
            if set(map(str, info)) == names:
                return
            assert time.monotonic() < deadline, f"workers {sorted(names)} never connected"
            time.sleep(0.05)


def wait_for_rows(results: Path, rows: int, sweep: threading.Thread | None = None) -> None:
    """Return once ``results`` holds at least ``rows`` result rows (failing at once if
    the ``sweep`` writing them ends first)."""
    deadline = time.monotonic() + 120
    while not (results.exists() and results.read_text().count("\n") > rows):
        assert sweep is None or sweep.is_alive(), f"the sweep ended before {rows} rows"
        assert time.monotonic() < deadline, f"{results} never had {rows} rows"
        time.sleep(0.02)
