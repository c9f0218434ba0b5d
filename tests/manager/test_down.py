"""Stopping a site cleanly: `run` says what it leaves running; `down` takes it all down.

Everything real: `elasticsite run` and `elasticsite down` as processes, the embedded
batch system and local cloud, whose workers are processes of their own.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

from tests.cli import argv, local_cloud, run_command, site_file, site_toml

from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.base import InstanceState
from elasticsite.clouds.local import LocalCloud
from elasticsite.manager.store import StateStore
from elasticsite.model import JobState

from .conftest import wait_for

CONFIG = site_toml(
    "downsite",
    local_cloud("one", 2, boot_time=0.5, seed=3),
    local_cloud("two", 2, boot_time=0.5, seed=4),
    on_shutdown="leave",
)


def live_instances(state: Path) -> int:
    total = 0
    for name in ("one", "two"):
        cloud = LocalCloud(name, state, "downsite", state / "batch.db")
        total += sum(i.state is not InstanceState.TERMINATED for i in cloud.describe())
    return total


def test_run_says_what_it_leaves_and_down_drains_every_cloud(tmp_path: Path) -> None:
    cfg, state = site_file(tmp_path, CONFIG)
    gate = tmp_path / "gate"  # the jobs run until it exists, however slow the machine
    job = ["sh", "-c", 'while [ ! -e "$1" ]; do sleep 0.1; done', "job", str(gate)]
    run_command("submit", "-c", str(cfg), "--walltime", "300", "--count", "4", "--", *job,
                check=True)  # fmt: skip
    run = subprocess.Popen(argv("run", "-c", str(cfg)), stderr=subprocess.PIPE, text=True)
    try:
        store = StateStore(state / "manager.db")
        wait_for(lambda: sum(r.worker.state.value == "busy" for r in store.load()) == 4,
                 60, "four busy workers")  # fmt: skip
        # A second manager on the same site is refused, naming the first one.
        busy = run_command("down", "-c", str(cfg))
        assert busy.returncode == 2
        assert f"another elasticsite process (pid {run.pid}) manages this site" in busy.stderr
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 0, stderr
    assert "left 4 workers (2 on one, 2 on two) running; the next `elasticsite run`" in stderr
    assert f"`elasticsite down -c {cfg}` drains and terminates them" in stderr
    assert live_instances(state) == 4

    down = subprocess.Popen(argv("down", "-c", str(cfg), "--timeout", "120"),
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        # Draining waits for the running jobs: every worker drains, none is gone yet.
        wait_for(lambda: sum(r.worker.state.value == "draining" for r in store.load()) == 4,
                 60, "four draining workers")  # fmt: skip
        assert live_instances(state) == 4
        gate.touch()
        _, stderr = down.communicate(timeout=180)
    finally:
        down.kill()
    assert down.returncode == 0, stderr
    assert "down: site 'downsite': draining and terminating every worker" in stderr
    assert stderr.rstrip().splitlines()[-1].startswith("down: no worker left")
    assert stderr.count("no worker left") == 1, stderr  # the final line, once
    assert live_instances(state) == 0
    # Drained, not killed: every job ran to its end on the workers taken down.
    assert {j.state for j in LocalBatch(state / "batch.db").jobs()} == {JobState.DONE}
    assert not [r for r in StateStore(state / "manager.db").load() if r.worker.state.live]


def test_down_now_terminates_at_once_and_the_jobs_go_back(tmp_path: Path) -> None:
    cfg, state = site_file(tmp_path, CONFIG)
    run_command("submit", "-c", str(cfg), "--walltime", "600", "--count", "2", "--",
                "sleep", "300", check=True)  # fmt: skip
    run = subprocess.Popen(argv("run", "-c", str(cfg)), stderr=subprocess.PIPE, text=True)
    try:
        batch = LocalBatch(state / "batch.db")
        wait_for(lambda: sum(j.state is JobState.RUNNING for j in batch.jobs()) == 2,
                 60, "both jobs running")  # fmt: skip
        run.send_signal(signal.SIGTERM)
        run.communicate(timeout=60)
    finally:
        run.kill()
    done = run_command("down", "-c", str(cfg), "--now", "--timeout", "60", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "down: site 'downsite': terminating every worker" in done.stderr
    assert live_instances(state) == 0
    jobs = LocalBatch(state / "batch.db").jobs()
    assert {(j.state, j.attempts) for j in jobs} == {(JobState.REQUEUED, 1)}  # to run again
    assert all(re.fullmatch(r"node \S+ removed", j.reason) for j in jobs), jobs


def test_down_on_a_site_with_nothing_up_returns_at_once(tmp_path: Path) -> None:
    cfg, _ = site_file(tmp_path, CONFIG)
    done = run_command("down", "-c", str(cfg), timeout=60)
    assert (done.returncode, done.stderr.splitlines()[-1]) == (0, "down: no worker left (0 s)")
    assert done.stderr.count("no worker left") == 1, done.stderr
