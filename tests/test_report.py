"""The report files: plots are real PNG/SVG images and every CSV parses back to the run."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from elasticsite.metrics import timeline, workload_metrics
from elasticsite.model import Cause, CloudSpec, Job, JobState, Worker, WorkerState
from elasticsite.report import (
    write_jobs_csv,
    write_plot,
    write_summary_csv,
    write_timeline_csv,
    write_workers_csv,
)

S = WorkerState
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CLOUDS = {"hourly": CloudSpec("hourly", price_per_hour=0.5, billing_increment=3600.0)}


def run() -> tuple[list[Job], list[Worker]]:
    """A small burst: three jobs at t=100, two workers boot, one job waits for a free one."""
    jobs = [
        Job("j1", 1, 300.0, 100.0, JobState.DONE, started_at=160.0, finished_at=220.0, node="w1"),
        Job("j2", 2, 300.0, 100.0, JobState.DONE, started_at=170.0, finished_at=250.0, node="w2"),
        Job("j3", 1, 300.0, 100.5, JobState.DONE, started_at=220.0, finished_at=280.0, node="w1"),
        Job("j4", 1, 300.0, 300.0),
    ]
    jobs[0].exit_code, jobs[1].exit_code, jobs[2].exit_code = 0, 1, 0
    w1 = Worker("w1", "hourly", "small", 1, requested_at=101.0)
    w2 = Worker("w2", "hourly", "small", 2, requested_at=101.0)
    for w, joined, gone in ((w1, 160.0, 300.0), (w2, 170.0, 260.0)):
        w.transition(S.BOOTING, joined - 30.0, Cause.BOOTED)
        w.transition(S.IDLE, joined, Cause.JOINED)
        w.transition(S.TERMINATING, gone - 5.0, Cause.IDLE)
        w.transition(S.TERMINATED, gone, Cause.CLOUD_REPORTED)
    return jobs, [w1, w2]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_write_plot_makes_a_png(tmp_path: Path) -> None:
    jobs, workers = run()
    out = write_plot(tmp_path / "run.png", timeline(jobs, workers, until=320.0), "burst")
    data = out.read_bytes()
    assert out == tmp_path / "run.png"
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 5_000


def test_write_plot_makes_an_svg_by_suffix_and_creates_directories(tmp_path: Path) -> None:
    jobs, workers = run()
    out = write_plot(tmp_path / "plots" / "run.svg", timeline(jobs, workers), "burst", scale=2.0)
    text = out.read_text(encoding="utf-8")
    assert "<svg" in text
    assert "time since first submission (s)" in text
    assert "burst" in text


def test_write_plot_handles_an_empty_run(tmp_path: Path) -> None:
    out = write_plot(tmp_path / "empty.png", timeline([], []), "nothing happened")
    assert out.read_bytes().startswith(PNG_SIGNATURE)


def test_write_plot_rejects_unknown_suffix(tmp_path: Path) -> None:
    jobs, workers = run()
    with pytest.raises(ValueError, match=r"\.png, \.svg"):
        write_plot(tmp_path / "run.gif", timeline(jobs, workers), "x")
    assert not (tmp_path / "run.gif").exists()


def test_importing_report_does_not_import_matplotlib() -> None:
    code = "import sys, elasticsite.report; sys.exit('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_jobs_csv_parses_back_relative_to_first_submission(tmp_path: Path) -> None:
    jobs, _ = run()
    rows = read_csv(write_jobs_csv(tmp_path / "jobs.csv", jobs, scale=2.0))
    assert [r["id"] for r in rows] == ["j1", "j2", "j3", "j4"]
    j1, j2, j3, j4 = rows
    assert j1 == {
        "id": "j1",
        "cores": "1",
        "walltime": "600",
        "submitted_at": "0",
        "started_at": "120",
        "finished_at": "240",
        "wait": "120",
        "node": "w1",
        "exit_code": "0",
    }
    assert (j2["cores"], j2["exit_code"]) == ("2", "1")
    assert (j3["submitted_at"], j3["wait"]) == ("1", "239")
    assert (j4["started_at"], j4["finished_at"], j4["wait"], j4["node"]) == ("", "", "", "")


def test_workers_csv_parses_back_with_overhead_and_cost(tmp_path: Path) -> None:
    jobs, workers = run()
    path = write_workers_csv(tmp_path / "workers.csv", workers, CLOUDS, jobs=jobs)
    w1, w2 = read_csv(path)
    # w1: alive 101-300 (199 s), busy 160-280 (j1 then j3), so 79 s of overhead.
    assert w1 == {
        "id": "w1",
        "cloud": "hourly",
        "vm_type": "small",
        "requested_at": "1",
        "joined_at": "60",
        "ended_at": "200",
        "state": "terminated",
        "active_s": "199",
        "busy_s": "120",
        "overhead_s": "79",
        "cost": "0.5",
        "end_cause": "cloud-reported",
    }
    assert (w2["active_s"], w2["busy_s"], w2["overhead_s"]) == ("159", "80", "79")
    # At 25x speed each worker's life is over an hour of paper time: two hours billed.
    scaled = read_csv(write_workers_csv(tmp_path / "w25.csv", workers, CLOUDS, 25.0, jobs=jobs))
    assert [r["cost"] for r in scaled] == ["1", "1"]
    assert scaled[0]["overhead_s"] == "1975"
    assert scaled[0]["ended_at"] == "5000"


def test_workers_csv_leaves_a_live_workers_end_empty(tmp_path: Path) -> None:
    live = Worker("w", "hourly", "small", 1, requested_at=0.0)
    live.transition(S.IDLE, 30.0, Cause.JOINED)
    (row,) = read_csv(write_workers_csv(tmp_path / "w.csv", [live], CLOUDS, jobs=[], until=90.0))
    assert (row["ended_at"], row["state"], row["active_s"], row["end_cause"]) == (
        "",
        "idle",
        "90",
        "",
    )


def test_timeline_csv_parses_back(tmp_path: Path) -> None:
    jobs, workers = run()
    tl = timeline(jobs, workers)
    rows = read_csv(write_timeline_csv(tmp_path / "timeline.csv", tl, scale=10.0))
    assert len(rows) == len(tl)
    assert rows[0] == {
        "time": "0",
        "queued": "2",
        "running": "0",
        "live_workers": "0",
        "joined_workers": "0",
    }
    assert [float(r["time"]) for r in rows] == pytest.approx(tl.relative(10.0).tolist())
    assert [int(r["live_workers"]) for r in rows] == tl.live_workers.tolist()
    assert [int(r["queued"]) for r in rows] == tl.queued.tolist()


def test_summary_csv_parses_back(tmp_path: Path) -> None:
    jobs, workers = run()
    metrics = workload_metrics(jobs, workers, CLOUDS)
    rows = read_csv(write_summary_csv(tmp_path / "summary.csv", metrics))
    table = {r["label"]: (r["value"], r["unit"]) for r in rows}
    assert table["jobs done"] == ("3", "jobs")
    assert table["jobs not done"] == ("1", "jobs")
    assert table["elapsed workload time"] == ("180", "s")
    assert table["reactivity time max"] == ("120", "s")  # j4's group has not started
    assert table["overhead"] == ("158", "s")
    assert table["cost"] == ("1", "money")
