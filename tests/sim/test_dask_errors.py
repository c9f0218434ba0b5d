"""What a researcher sees when a Dask cluster cannot run a sweep, against real
schedulers and workers on 127.0.0.1: one line and exit status 2, within a stated time,
for a malformed address, a port that is not a Dask scheduler, a scheduler without
workers and workers (or a scheduler) without elasticsite; and a sweep that stops
making progress says which runs are outstanding on which workers, then stops
resumably or keeps waiting."""

from __future__ import annotations

import http.server
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli import run_command
from tests.context.conftest import free_port
from tests.sim.dask_procs import Dask, wait_for_rows, wait_for_workers

from elasticsite import __version__ as VERSION
from elasticsite.sim.dask_cluster import DaskCluster, DaskError, parse_address, worker_problems
from elasticsite.sim.dask_runner import outstanding
from elasticsite.sim.experiment import run_experiment
from elasticsite.sim.specs import parse_spec

pytest.importorskip("distributed")
pytestmark = pytest.mark.slow

SPEC = """kind = "replay"
name = "small"
rounds = 4
seed = 2009
site_procs = 144
strategies = ["naive", "selective"]
[workload]
duration_days = 3
machine_size = 144
[sweep]
parameter = "umed"
values = [1.5, 2.5, 3.5]
"""


def small(rounds: int = 4) -> Any:
    return parse_spec({
        "name": "small", "rounds": rounds, "seed": 2009, "site_procs": 144,
        "strategies": ["naive", "selective"],
        "workload": {"duration_days": 3, "machine_size": 144},
        "sweep": {"parameter": "umed", "values": [1.5, 2.5, 3.5]},
    }, "small")  # fmt: skip


def experiment(tmp: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``elasticsite experiment`` as a user runs it: its exit status and its stderr."""
    spec = tmp / "small.toml"
    spec.write_text(SPEC)
    p = run_command("experiment", str(spec), "--out", str(tmp / "out"), *args, timeout=240,
                    env={**os.environ, "COLUMNS": "400", **(env or {})})  # fmt: skip
    return p.returncode, p.stderr


def one_error(stderr: str) -> str:
    """The single line of stderr, which says what failed; no traceback, here or at exit."""
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


@pytest.fixture
def dask(tmp_path: Path) -> Iterator[Dask]:
    d = Dask(tmp_path)
    try:
        yield d
    finally:
        d.stop()


def test_a_malformed_address_is_refused_at_once(tmp_path: Path) -> None:
    code, stderr = experiment(tmp_path, "--dask", "nonsense")
    assert code == 2
    assert one_error(stderr) == (
        "error: --dask 'nonsense' is not a Dask scheduler address: give tcp://HOST:PORT "
        "(a scheduler listens on port 8786 by default)"
    )
    assert not (tmp_path / "out").exists()
    for bad in ("tcp://host", "http://host:8786", "tcp://host:0", "tcp://host:70000", ""):
        with pytest.raises(ValueError, match="not a Dask scheduler address"):
            parse_address(bad)
    assert parse_address("host:8786") == "tcp://host:8786"
    assert parse_address("tls://[::1]:8786") == "tls://[::1]:8786"


def test_a_port_that_does_not_speak_dask_is_said_within_the_connect_timeout(
    tmp_path: Path,
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"tcp://127.0.0.1:{server.server_address[1]}"
        timeout = {"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"}
        code, stderr = experiment(tmp_path, "--dask", address, env=timeout)
    finally:
        server.shutdown()
        server.server_close()
    assert code == 2
    assert one_error(stderr) == (
        f"error: {address} accepts connections but does not answer as a Dask scheduler "
        "within 2 s: is it another service, such as the scheduler's dashboard? (a scheduler "
        "listens on port 8786 by default)"
    )
    closed = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(
        DaskError, match=r"^cannot reach the Dask scheduler at .*: connection refused"
    ):
        run_experiment(small(), tmp_path / "refused", dask=closed)


def test_a_cluster_that_cannot_run_the_sweep_is_refused_naming_what_lacks_elasticsite(
    tmp_path: Path, dask: Dask
) -> None:
    address = dask.scheduler()
    code, stderr = experiment(tmp_path, "--dask", address, "--dask-wait-workers", "1")
    assert code == 2
    assert one_error(stderr) == (
        f"error: the Dask scheduler at {address} has no worker after 1 s: start one with "
        f"`dask worker {address}` (it needs elasticsite installed), or wait longer with "
        "--dask-wait-workers"
    )

    dask.worker(address, "bare", bare=True)
    dask.worker(address, "good")
    wait_for_workers(address, {"bare", "good"})
    code, stderr = experiment(tmp_path, "--dask", address)
    assert code == 2
    line = one_error(stderr)
    assert line.startswith(
        f"error: 1 of 2 Dask workers of {address} cannot run this sweep: bare (tcp://127.0.0.1:"
    )
    assert line.endswith("): ModuleNotFoundError: No module named 'elasticsite'. Every worker "
                         f"needs pip install 'elasticsite[dask]=={VERSION}'")  # fmt: skip
    assert "good" not in line
    with pytest.raises(DaskError, match=r"is a Dask Worker, not a scheduler"):
        run_experiment(small(), tmp_path / "worker", dask=worker_address(address, "good"))

    bare_scheduler = dask.scheduler(bare=True)
    with pytest.raises(DaskError) as err:
        run_experiment(small(), tmp_path / "bare", dask=bare_scheduler)
    assert str(err.value) == (
        f"the Dask scheduler at {bare_scheduler}: ModuleNotFoundError: No module named "
        "'elasticsite'; it unpacks every run, so it needs pip install "
        f"'elasticsite[dask]=={VERSION}' where it runs"
    )


def worker_address(scheduler: str, name: str) -> str:
    from distributed import Client

    with Client(scheduler, timeout=30) as client:
        workers = client.run_on_scheduler(
            lambda dask_scheduler: {str(w.name): w.address for w in dask_scheduler.workers.values()}
        )
    return str(workers[name])


def test_a_stalled_sweep_says_what_is_outstanding_where_then_stops_or_waits(
    tmp_path: Path, dask: Dask
) -> None:
    # allowed-failures 0: the first worker death loses a run, to see what that says
    address = dask.scheduler(env={"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"})
    worker = dask.worker(address, "w0")
    wait_for_workers(address, {"w0"})
    out = tmp_path / "dask"

    def sweep(cluster: DaskCluster, outcome: list[Any], spec: Any = None) -> threading.Thread:
        def run() -> None:
            try:
                outcome.append(run_experiment(spec or small(), out, dask=cluster))
            except DaskError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    # stop: the worker hangs (SIGSTOP) with runs on it; the sweep stops, resumable
    stopped: list[Any] = []
    # a run takes well under a second; 5 s without one finishing is the hang
    thread = sweep(DaskCluster(address, timeout=5), stopped)
    wait_for_rows(out / "results.csv", 1, thread)
    worker.send_signal(signal.SIGSTOP)
    thread.join(120)
    (error,) = stopped
    assert isinstance(error, DaskError), error
    text = str(error)
    assert (
        text.startswith("no run finished in the last ")
        and " outstanding: on w0 (tcp://127.0.0.1:" in text
    )
    assert text.endswith("Stopped (--dask-timeout): the runs done are in results.csv and the "
                         "same command resumes from them")  # fmt: skip
    kept = (out / "results.csv").read_text().count("\n") - 1
    assert 0 < kept < 3 * 4 * 3

    # wait: said again each time, and the sweep completes once the worker goes on
    worker.send_signal(signal.SIGCONT)
    said: list[str] = []
    finished: list[Any] = []
    thread = sweep(DaskCluster(address, timeout=5, on_timeout="wait", notify=said.append), finished)
    wait_for_rows(out / "results.csv", kept + 1, thread)
    worker.send_signal(signal.SIGSTOP)
    before = len(said)
    deadline = time.monotonic() + 120
    while len(said) < before + 2:
        assert time.monotonic() < deadline, said
        time.sleep(0.05)
    worker.send_signal(signal.SIGCONT)
    thread.join(120)
    (result,) = finished
    assert not isinstance(result, Exception), result
    assert result.kept == kept and result.computed == 3 * 4 * 3 - kept
    assert all(" outstanding: on w0 (tcp://127.0.0.1:" in s and s.endswith("; still waiting")
               for s in said[before:])  # fmt: skip
    run_experiment(small(), tmp_path / "local", workers=1)
    for name in ("results.csv", "summary.csv"):
        assert (out / name).read_bytes() == (tmp_path / "local" / name).read_bytes()

    # a worker dying with a run: past the scheduler's allowed failures, the run is lost
    lost: list[Any] = []
    out = tmp_path / "lost"
    thread = sweep(DaskCluster(address), lost)
    wait_for_rows(out / "results.csv", 1, thread)
    worker.kill()
    thread.join(120)
    (error,) = lost
    assert isinstance(error, DaskError), error
    assert str(error).startswith("run umed=") and "was lost: every worker that ran it died" in str(
        error
    )


def test_the_outstanding_runs_are_named_by_worker_and_counted_past_five() -> None:
    keys = [f"k{i}" for i in range(9)]
    labels = {k: f"run {k}" for k in keys}
    processing = {"tcp://h:2": ("k0", "k1", "k2", "k3"), "tcp://h:1": ("k4", "k5", "k6")}
    text = outstanding(keys, labels, processing, {"tcp://h:1": "a", "tcp://h:2": "tcp://h:2"})
    assert text == (
        "9 runs outstanding: on a (tcp://h:1): run k4, run k5, run k6; on tcp://h:2: run k0, "
        "run k1 and 2 more; 2 not yet sent to a worker (2 workers connected)"
    )
    assert outstanding(["k0"], labels, {}, {}) == (
        "1 run outstanding: 1 not yet sent to a worker (no workers connected)"
    )


def test_a_worker_with_another_version_or_python_is_named_with_what_is_wrong() -> None:
    results = {
        "tcp://h:1": (True, "0.0.9"),
        "tcp://h:2": (True, VERSION),
        "tcp://h:3": RuntimeError("bad magic number"),
        "tcp://h:4": (False, "ModuleNotFoundError: No module named 'scipy'"),
    }
    assert worker_problems(results, VERSION, {"tcp://h:1": "w1", "tcp://h:4": "w4"}) == [
        f"w1 (tcp://h:1): has elasticsite 0.0.9, not {VERSION}",
        "tcp://h:3: cannot run the check (RuntimeError: bad magic number); same Python?",
        "w4 (tcp://h:4): ModuleNotFoundError: No module named 'scipy'",
    ]
