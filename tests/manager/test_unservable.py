"""A job no cloud can run, on the embedded site: nothing is launched for it, and the
manager says why (log, ``elasticsite queue``/``status``, dashboard, metrics), also
after a restart and with the manager stopped."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from tests.cli import local_cloud, run_cli, site_toml
from tests.context.conftest import free_port

from elasticsite.batch.base import JobRequest
from elasticsite.config import load_config
from elasticsite.dashboard.routes import Dashboard
from elasticsite.dashboard.views import STATES, overview
from elasticsite.history.samples import HistoryReader
from elasticsite.manager.exporter import ManagerMetrics
from elasticsite.manager.report import StepReport
from elasticsite.manager.site import open_site
from elasticsite.model import CloudSpec, JobState

from .conftest import Started, kill_workers, wait_for


def tight_site(port: int) -> str:
    """examples/local.toml's clouds (one-core VM types) at test speed, with metrics
    served on ``port``."""
    public = {"name": "m1.small", "cores": 1, "memory_mb": 1740}
    return site_toml(
        "tight",
        local_cloud("private", 4, seed=5),
        local_cloud(
            "public", 16, seed=6, price_per_hour=0.10, billing_increment=1, vm_types=[public]
        ),
        state_dir="state",
        history_interval=0.2,
        on_shutdown="leave",
        metrics_port=port,
        policy="bursts",
    )


REASON = "needs 64 cores; the largest VM type offers 1"
ODD = "<i>[bold]gpu"
"""A VM type a user asked for, which every surface must show as written."""
ODD_REASON = f"asks for VM type '{ODD}'; the clouds offer small, m1.small"


def cli(*args: str, cwd: Path) -> str:
    return run_cli(*args, cwd=cwd, check=True, columns=100).stdout


def gauge(port: int, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not exported")


def warnings_about(caplog: pytest.LogCaptureFixture, job: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.getMessage().startswith(f"job {job}: ")
    ]


def test_a_job_no_cloud_can_run_gets_no_worker_and_is_explained(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="elasticsite")
    port = free_port()
    config = tmp_path / "site.toml"
    config.write_text(tight_site(port))
    site = open_site(load_config(config), tmp_path)
    running = Started(site, port)
    try:
        wide = site.batch.submit(JobRequest(["true"], 64, 600.0))
        odd = site.batch.submit(JobRequest(["true"], 1, 60.0, attributes={"vm_type": ODD}))
        small = site.batch.submit(JobRequest(["sleep", "0.5"], 1, 60.0))
        # The feasible job alongside still gets its worker and runs.
        wait_for(lambda: site.batch.job(small).state is JobState.DONE, 60, "the small job")
        wait_for(lambda: {wide, odd} <= set(site.store.unservable()), 30, "the jobs marked")
        # Its worker goes once nothing it could run is queued: the wide job keeps none.
        wait_for(
            lambda: not any(r.worker.state.live for r in site.store.load()), 60, "no worker left"
        )
        assert site.batch.job(wide).state is JobState.QUEUED
        workers = site.store.load(include_done=True)
        assert len(workers) == 1, [r.worker.id for r in workers]
        assert gauge(port, "elasticsite_jobs_unservable") == 2.0
        assert warnings_about(caplog, wide) == [
            f"job {wide}: no cloud can run it: {REASON}; no worker is launched for it"
        ]
    finally:
        running.stop()

    # With the manager stopped, the last known marks are still shown.
    assert site.store.unservable()[wide][0] == REASON
    queue = cli("queue", "-c", str(config), cwd=tmp_path)
    assert f"job {wide}: no cloud can run it: {REASON}" in queue
    assert f"job {odd}: no cloud can run it: {ODD_REASON}" in queue  # as written, no markup
    status = cli("status", "-c", str(config), cwd=tmp_path)
    assert "queued jobs no cloud can run (as of the manager's last step): 2" in status
    assert f"job {wide}: no cloud can run it: {REASON}" in status
    view = overview(HistoryReader(site.state_dir / "manager.db"), time.time())
    assert view.why == {
        wide: f"no cloud can run it: {REASON}",
        odd: f"no cloud can run it: {ODD_REASON}",
    }
    page = Dashboard(site.state_dir / "manager.db").render("live.html.j2", v=view, states=STATES)
    assert f"no cloud can run it: {REASON}" in page and 'id="unservable"' in page
    assert "&lt;i&gt;[bold]gpu" in page and ODD not in page  # escaped

    # A restarted manager judges the job again, says it once in its own log, and still
    # launches nothing for it.
    caplog.clear()
    running = Started(site, free_port())
    try:
        wait_for(lambda: len(warnings_about(caplog, wide)) == 1, 30, "the restart's warning")
        steps = running.manager.last_report
        wait_for(lambda: running.manager.last_report is not steps, 30, "another step")
        assert len(site.store.load(include_done=True)) == 1
        assert len(warnings_about(caplog, wide)) == 1
    finally:
        running.stop()
        kill_workers(site)


def test_the_unservable_gauge_counts_the_last_marks() -> None:
    metrics = ManagerMetrics([CloudSpec("a")])
    metrics.observe(StepReport(at=1.0, unservable={"7": "needs 64 cores", "8": "x"}))
    text = generate_latest(metrics.registry).decode()
    assert "# TYPE elasticsite_jobs_unservable gauge" in text
    assert "elasticsite_jobs_unservable 2.0" in text
    metrics.observe(StepReport(at=2.0))
    text = generate_latest(metrics.registry).decode()
    assert "elasticsite_jobs_unservable 0.0" in text
