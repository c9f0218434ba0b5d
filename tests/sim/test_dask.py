"""Experiment sweeps on a real Dask cluster (a scheduler and two workers on 127.0.0.1):
byte-identical to a local run, timelines included, with nothing written on the
workers' side; a worker killed mid-sweep loses and duplicates nothing, and a lost
scheduler is said in one line."""

from __future__ import annotations

import csv
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.sim.dask_procs import Dask, wait_for_rows, wait_for_workers

from elasticsite.sim.dask_runner import DaskError, _localized
from elasticsite.sim.experiment import run_experiment
from elasticsite.sim.replay_jobs import swf_round
from elasticsite.sim.specs import parse_spec

pytest.importorskip("distributed")
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("dask")]  # one worker: one `cluster`


def sweep(rounds: int, days: float, values: list[float]) -> Any:
    return parse_spec({
        "name": "fig3-umed-small", "rounds": rounds, "seed": 2009, "site_procs": 144,
        "strategies": ["naive", "shortest_queue", "weighted_queue", "selective"],
        "workload": {"duration_days": days, "machine_size": 144},
        "sweep": {"parameter": "umed", "values": values},
    }, "fig3")  # fmt: skip


def two_workers(tmp: Path) -> tuple[Dask, str]:
    dask = Dask(tmp)
    address = dask.scheduler()
    for name in ("w0", "w1"):
        dask.worker(address, name)
    wait_for_workers(address, {"w0", "w1"})
    return dask, address


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Dask, str]]:
    dask, address = two_workers(tmp_path_factory.mktemp("dask"))
    try:
        yield dask, address
    finally:
        dask.stop()


def tree(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_sweep_on_dask_is_byte_identical_to_a_local_run(
    tmp_path: Path, cluster: tuple[Dask, str]
) -> None:
    spec = sweep(2, 5, [1.5, 3.5])
    local = run_experiment(spec, tmp_path / "local", workers=1)
    remote = run_experiment(spec, tmp_path / "dask", dask=cluster[1])
    assert remote.computed == local.computed == 2 * 2 * 5
    assert tree(tmp_path / "dask") == tree(tmp_path / "local")


def test_timelines_come_back_to_the_client_and_workers_write_nothing_where_they_run(
    tmp_path: Path, cluster: tuple[Dask, str]
) -> None:
    spec = parse_spec({"kind": "elastic", "name": "tl", "rounds": 1, "timelines": True,
                       "workloads": ["workload1"], "policies": ["on_demand", "bursts"]},
                      "tl")  # fmt: skip
    local = run_experiment(spec, tmp_path / "local", workers=1)
    remote = run_experiment(spec, tmp_path / "dask", dask=cluster[1])
    assert remote.computed == local.computed == 2
    files = tree(tmp_path / "dask")
    assert files == tree(tmp_path / "local")
    assert sum(name.startswith("timelines/") for name in files) == 2 * 2  # a CSV and a PNG
    dask = cluster[0]
    assert [list((dask.tmp / f"cwd-{w}").iterdir()) for w in ("w0", "w1")] == [[], []]


def test_a_worker_killed_mid_sweep_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    dask, address = two_workers(tmp_path)
    try:
        spec = sweep(2, 5, [1.5, 2.5, 3.5])  # 30 runs: many left when w0 dies
        out = tmp_path / "dask"
        done: list[Any] = []
        thread = threading.Thread(
            target=lambda: done.append(run_experiment(spec, out, dask=address))
        )
        thread.start()
        wait_for_rows(out / "results.csv", 5)
        dask.procs[1].kill()  # SIGKILL to w0, mid-sweep
        thread.join(300)
        assert done, "the sweep did not finish"

        # the scheduler itself lost mid-sweep: said in one line, the rows done kept
        lost = tmp_path / "lost"
        thread = threading.Thread(target=lambda: done.append(catch(spec, lost, address)))
        thread.start()
        wait_for_rows(lost / "results.csv", 5)
        dask.procs[0].kill()
        thread.join(120)
        assert str(done[-1]) == (
            f"lost the connection to the Dask scheduler at {address} (is it still running?); "
            "the runs done are in results.csv and the same command resumes from them"
        )
    finally:
        dask.stop()
    with (out / "results.csv").open() as f:
        keys = [(r["value"], r["round"], r["strategy"]) for r in csv.DictReader(f)]
    assert len(keys) == len(set(keys)) == 3 * 2 * 5
    local = run_experiment(spec, tmp_path / "local", workers=2)
    assert local.computed == 3 * 2 * 5
    assert tree(out) == tree(tmp_path / "local")


def catch(spec: Any, out: Path, address: str) -> Any:
    try:
        return run_experiment(spec, out, dask=address)
    except DaskError as exc:
        return exc


def test_a_trace_the_worker_cannot_see_is_cached_from_what_was_shipped(tmp_path: Path) -> None:
    from elasticsite.sim.experiment import _ReplayTask

    trace = Path(__file__).parent / "data" / "small.swf"
    gone = str(tmp_path / "gone.swf")
    spec = parse_spec({"strategies": ["naive"], "site_procs": 144,
                       "workload": {"source": "swf", "path": gone}}, "s")  # fmt: skip
    task = _ReplayTask(spec, None, 0, ("naive",), None)  # type: ignore[arg-type]
    cache = tmp_path / "worker-space" / "elasticsite-traces"
    moved = _localized(task, "d" * 64, trace.read_bytes(), cache)
    local = moved.spec.workload.path
    assert local == cache / ("d" * 64 + ".swf") and local.read_bytes() == trace.read_bytes()
    assert cache.stat().st_mode & 0o077 == 0
    assert len(swf_round(moved.spec.workload, 0).submit) > 0
    assert _localized(moved, "d" * 64, trace.read_bytes(), cache) is moved  # it is there now
