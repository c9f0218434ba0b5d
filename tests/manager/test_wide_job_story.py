"""The 64-core job, end to end on the embedded site as an operator lives it: every
command a real process run from a directory other than the site file's.

A user asks for 64 cores on a site whose clouds offer one-core VMs. No worker is
launched for the job, ``queue`` says why, a small job alongside still gets its worker
on the hourly-billed cloud, that worker, idle and paid for, is released near its
billing boundary although the wide job is still queued, and ``cancel`` removes the
wide job. The test waits for states, never for durations.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.cli import local_cloud, run_cli, site_toml

from elasticsite.batch.local import LocalBatch
from elasticsite.manager.store import StateStore
from elasticsite.model import JobState

from .conftest import wait_for

# examples/local.toml at test speed, its public (hourly) cloud filled first; a paid-for
# idle worker is kept until 3590 s before its hour ends: ten seconds after its request.
SITE = site_toml(
    "story",
    local_cloud(
        "public",
        16,
        seed=6,
        price_per_hour=0.10,
        billing_increment=3600,
        vm_types=[{"name": "m1.small", "cores": 1, "memory_mb": 1740}],
    ),
    local_cloud("private", 4, seed=5),
    state_dir="state",
    on_shutdown="leave",
    policy={"name": "bursts", "cloud_rule": "ordered", "billing_margin": 3590.0},
    extra='[site]\ncurrency = "USD"\n\n[batch]\ntype = "local"\npath = "batch.db"\n',
)
WHY = "job 1: no cloud can run it: needs 64 cores; the largest VM type offers 1"


def cli(*args: str, cwd: Path) -> str:
    done = run_cli(*args, cwd=cwd, columns=200, timeout=120)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def test_a_64_core_job_gets_no_worker_is_explained_cancelled_and_keeps_no_paid_worker(
    tmp_path: Path,
) -> None:
    conf, home = tmp_path / "conf", tmp_path / "home"
    conf.mkdir()
    home.mkdir()
    (conf / "site.toml").write_text(SITE)
    cfg = "../conf/site.toml"  # as typed in home
    state = conf / "state"

    assert cli("submit", "-c", cfg, "--cores", "64", "--walltime", "600", "--", "true",
               cwd=home).strip() == "1"  # fmt: skip
    run = subprocess.Popen(
        [sys.executable, "-m", "elasticsite", "run", "-c", cfg], cwd=home,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
    )  # fmt: skip
    try:
        store = StateStore(state / "manager.db")
        batch = LocalBatch(state / "batch.db")
        wait_for(lambda: "1" in store.unservable(), 60, "the wide job marked")
        # Judged in the step that marked it: no worker was launched for it.
        assert store.load(include_done=True) == []
        assert WHY in cli("queue", "-c", cfg, cwd=home)

        # A small job alongside gets its worker, on the hourly cloud.
        assert cli("submit", "-c", cfg, "--walltime", "60", "--", "true", cwd=home).strip() == "2"
        wait_for(lambda: batch.job("2").state is JobState.DONE, 60, "the small job done")
        # Idle and paid for, its worker is kept a while, then released before its hour
        # is up: the wide job still queued keeps none.
        wait_for(lambda: not any(r.worker.state.live for r in store.load()), 60, "no worker")
        assert batch.job("1").state is JobState.QUEUED
        (worker,) = store.load(include_done=True)
        assert worker.worker.cloud == "public"
        status = cli("status", "-c", cfg, "--events", "20", cwd=home)
        assert f"{worker.worker.id}: idle -> draining (billing-boundary)" in status, status
        assert WHY in status

        # Cancelled, it is gone from the queue and from the marks.
        assert cli("cancel", "-c", cfg, "1", cwd=home) == "job 1: cancelled (it was queued)\n"
        queue = cli("queue", "-c", cfg, cwd=home)
        assert "queued 0" in queue and "cancelled 1" in queue and "job 1:" not in queue, queue
        assert len(store.load(include_done=True)) == 1  # one worker in the whole story
    finally:
        run.send_signal(signal.SIGINT)
        try:
            _, err = run.communicate(timeout=60)
        finally:
            run.kill()
    assert run.returncode == 0, err
    assert sorted(p.name for p in home.iterdir()) == []  # the state is next to the file
