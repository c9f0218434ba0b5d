"""Experiment sweeps on a real Dask cluster (a `dask scheduler` and two `dask worker`
processes on 127.0.0.1): byte-identical to a local run, and a worker killed mid-sweep
loses and duplicates nothing."""

from __future__ import annotations

import csv
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.context.conftest import free_port

from elasticsite.sim.dask_runner import _localized
from elasticsite.sim.experiment import run_experiment
from elasticsite.sim.replay_jobs import swf_round
from elasticsite.sim.specs import parse_spec

pytest.importorskip("distributed")
DASK = Path(sys.executable).parent / "dask"


def sweep(rounds: int, days: float, values: list[float]) -> Any:
    return parse_spec({
        "name": "fig3-umed-small", "rounds": rounds, "seed": 2009, "site_procs": 144,
        "strategies": ["naive", "shortest_queue", "weighted_queue", "selective"],
        "workload": {"duration_days": days, "machine_size": 144},
        "sweep": {"parameter": "umed", "values": values},
    }, "fig3")  # fmt: skip


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.log = (tmp / "dask.log").open("w")
        self.scheduler = self._start("scheduler", "--host", "127.0.0.1", "--port",
                                     str(self.port), "--no-dashboard")  # fmt: skip
        self.workers = [
            self._start(
                "worker",
                self.address,
                "--nthreads",
                "1",
                "--no-nanny",
                "--no-dashboard",
                "--name",
                f"w{i}",
                "--host",
                "127.0.0.1",
            )
            for i in range(2)
        ]
        from distributed import Client

        with Client(self.address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)

    def _start(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([str(DASK), *args], stdout=self.log, stderr=self.log)

    def stop(self) -> None:
        for p in [*self.workers, self.scheduler]:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in [*self.workers, self.scheduler]:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        self.log.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def files(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in ("results.csv", "summary.csv")}


def test_a_sweep_on_dask_is_byte_identical_to_a_local_run(tmp_path: Path, cluster: Cluster) -> None:
    spec = sweep(2, 10, [1.5, 3.5])
    local = run_experiment(spec, tmp_path / "local", workers=1)
    remote = run_experiment(spec, tmp_path / "dask", dask=cluster.address)
    assert remote.computed == local.computed == 2 * 2 * 5
    assert files(tmp_path / "dask") == files(tmp_path / "local")


def test_a_worker_killed_mid_sweep_loses_and_duplicates_nothing(
    tmp_path: Path, cluster: Cluster
) -> None:
    import threading

    spec = sweep(4, 20, [1.5, 2.5, 3.5])
    out = tmp_path / "dask"
    done: list[Any] = []
    thread = threading.Thread(
        target=lambda: done.append(run_experiment(spec, out, dask=cluster.address))
    )
    thread.start()
    results = out / "results.csv"
    deadline = time.monotonic() + 120
    while not (results.exists() and results.read_text().count("\n") >= 6):
        assert time.monotonic() < deadline, "no row came back"
        time.sleep(0.05)
    cluster.workers[0].kill()  # SIGKILL, mid-sweep
    thread.join(300)
    assert done, "the sweep did not finish"
    with results.open() as f:
        keys = [(r["value"], r["round"], r["strategy"]) for r in csv.DictReader(f)]
    assert len(keys) == len(set(keys)) == 3 * 4 * 5
    local = run_experiment(spec, tmp_path / "local", workers=2)
    assert local.computed == 3 * 4 * 5
    assert files(out) == files(tmp_path / "local")


def test_a_trace_the_worker_cannot_see_is_cached_from_what_was_shipped(tmp_path: Path) -> None:
    from elasticsite.sim.experiment import _ReplayTask

    trace = Path(__file__).parent / "data" / "small.swf"
    gone = str(tmp_path / "gone.swf")
    spec = parse_spec({"strategies": ["naive"], "site_procs": 144,
                       "workload": {"source": "swf", "path": gone}}, "s")  # fmt: skip
    task = _ReplayTask(spec, None, 0, ("naive",), None)  # type: ignore[arg-type]
    moved = _localized(task, "d" * 64, trace.read_bytes())
    local = moved.spec.workload.path
    assert local.name == "d" * 64 + ".swf" and local.read_bytes() == trace.read_bytes()
    assert len(swf_round(moved.spec.workload, 0).submit) > 0
    assert _localized(moved, "d" * 64, trace.read_bytes()) is moved  # it is there now
