"""The whole elastic site on a real Slurm, in both integration modes.

*External manager* (the papers' design): the manager sees a job queued on the empty
``elastic`` partition, launches a local-cloud worker whose ``slurmd -Z`` registers
as a dynamic node in a network namespace of its own, the job runs there, and the
idle node is drained, its instance terminated and the node removed.

*Power saving* (Slurm-native): slurmctld asks for a ``cloud`` node through
``ResumeProgram`` = ``elasticsite slurm resume``; the manager starts a worker whose
``slurmd -b -N cloudN`` takes the declared node; after ``SuspendTime`` idle,
``SuspendProgram`` = ``elasticsite slurm suspend`` has it terminated.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from elasticsite.batch.base import JobRequest
from elasticsite.batch.slurm import SlurmBatch
from elasticsite.clouds.local import LocalCloud
from elasticsite.config import load_config
from elasticsite.manager.site import Site, open_site
from elasticsite.model import Cause, WorkerState

from .conftest import RUN_DIR, powered_down_cloud_node, wait_for

pytestmark = pytest.mark.slow


class LiveSite:
    """A manager on its own thread; everything it started is gone at the end."""

    def __init__(self, site: Site, *, dynamic_nodes: bool) -> None:
        self.site = site
        self.dynamic_nodes = dynamic_nodes
        self.manager = site.manager()
        self.thread = threading.Thread(target=self.manager.run, daemon=True)
        self.thread.start()

    def workers(self, include_done: bool = False) -> list[Any]:
        return [r.worker for r in self.site.store.load(include_done=include_done, history=True)]

    def close(self) -> None:
        self.manager.stop()
        self.manager.stop()  # and do not wait for a drain
        self.thread.join(60)
        for cloud in self.site.clouds.values():
            assert isinstance(cloud, LocalCloud)
            cloud.kill_all()
        if not self.dynamic_nodes:
            return  # power saving: the cloudN nodes are slurm.conf's own, never deleted
        batch = self.site.batch
        assert isinstance(batch, SlurmBatch)
        for w in self.workers(include_done=True):
            batch.remove_node(w.node)  # only if still there: see SlurmBatch.remove_node


def job_state(job_id: str) -> str:
    out = subprocess.run(
        ["scontrol", "show", "job", job_id, "--oneliner"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
    return f"{fields.get('JobState', '?')} {fields.get('ExitCode', '?')}"


def _write_site(tmp_path: Path, site_id: str, batch: str) -> Path:
    """A site configuration, and the power hook of the test Slurm pointed at it."""
    config = tmp_path / "site.toml"
    config.write_text(
        f"""
[manager]
site_id = "{site_id}"
state_dir = "{tmp_path / "state"}"
interval = 1.0
stall_timeout = 120.0
heartbeat_timeout = 60.0
retry_backoff = 1.0

{batch}

[[clouds]]
name = "burst"
max_instances = 2
boot_time = 1.0
shutdown_time = 0.5
options = {{ boot_delay = 0.5, shutdown_delay = 0.2, poll_interval = 0.2 }}
"""
    )
    binary = Path(sys.executable).with_name("elasticsite")
    (RUN_DIR / "power.env").write_text(f"ELASTICSITE_BIN={binary}\nELASTICSITE_CONFIG={config}\n")
    return config


@contextmanager
def _live_site(tmp_path: Path, site_id: str, batch: str, dynamic_nodes: bool) -> Iterator[LiveSite]:
    """The site of :func:`_write_site`, opened; closed, and the power hook unset, after."""
    config = _write_site(tmp_path, site_id, batch)
    live = LiveSite(open_site(load_config(config)), dynamic_nodes=dynamic_nodes)
    try:
        yield live
    finally:
        (RUN_DIR / "power.env").unlink(missing_ok=True)
        live.close()


@pytest.fixture
def external_site(slurm_cluster: Path, tmp_path: Path) -> Iterator[LiveSite]:
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        pytest.skip("dynamic nodes need iproute2 and nsenter (network namespaces)")
    batch = (
        '[batch]\ntype = "slurm"\n'
        'options = { partition = "elastic", demand_partitions = ["elastic"] }'
    )
    with _live_site(tmp_path, "slurm-external", batch, dynamic_nodes=True) as live:
        yield live


def test_external_manager_runs_a_queued_job_on_a_new_dynamic_node_then_removes_it(
    external_site: LiveSite,
) -> None:
    live = external_site
    batch = live.site.batch
    job = batch.submit(JobRequest(["sleep", "4"], cores=1, walltime=120))

    def joined() -> Any:
        return next((w for w in live.workers() if w.state is WorkerState.BUSY), None)

    worker = wait_for(joined, 60, "a worker to join Slurm and take the job")
    running = {j.id: j for j in batch.snapshot().running}
    assert job in running and running[job].node == worker.node

    def gone() -> bool:
        done = live.workers(include_done=True)
        return bool(done) and all(w.state is WorkerState.TERMINATED for w in done)

    wait_for(gone, 90, "the idle worker to be drained, terminated and removed")
    assert job_state(job) == "COMPLETED 0:0"
    # The worker that ran the job (a launch slurmctld failed to answer is retried by another).
    [w] = [w for w in live.workers(include_done=True) if w.id == worker.id]
    path = [t.to_state for t in w.history]
    assert path[:2] == [WorkerState.REQUESTED, WorkerState.BOOTING]
    assert WorkerState.DRAINING in path and path[-1] is WorkerState.TERMINATED
    drained_at = next(t.at for t in w.history if t.to_state is WorkerState.DRAINING)
    busy_at = next(t.at for t in w.history if t.to_state is WorkerState.BUSY)
    assert drained_at > busy_at, "drained while its job still ran"
    nodes = {n.name for n in batch.snapshot().nodes}
    assert w.node not in nodes, "the terminated worker's node is still in Slurm"


@pytest.fixture
def power_save_site(slurm_cluster: Path, tmp_path: Path) -> Iterator[LiveSite]:
    batch = '[batch]\ntype = "slurm"\nmode = "power_save"\noptions = { partition = "cloud" }'
    try:
        with _live_site(tmp_path, "slurm-native", batch, dynamic_nodes=False) as live:
            yield live
    finally:
        subprocess.run(
            ["scontrol", "update", "nodename=cloud[1-4]", "state=power_down_force"],
            capture_output=True,
            check=False,
        )


def test_power_saving_resumes_and_suspends_cloud_nodes_through_elasticsite(
    power_save_site: LiveSite,
) -> None:
    live = power_save_site
    # A node that is powered down now: another test may have left one of them up.
    down = [powered_down_cloud_node()]
    job = subprocess.run(
        ["sbatch", "--parsable", "-p", "cloud", "-w", down[0], "-o", "/dev/null",
         "--wrap", "sleep 3"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    started = time.monotonic()

    def joined() -> Any:
        return next((w for w in live.workers() if w.state.joined), None)

    worker = wait_for(joined, 90, "slurmctld's resume to bring up a worker for a cloud node")
    assert worker.node == down[0], worker.node
    wait_for(lambda: job_state(job) == "COMPLETED 0:0", 90, "the job to complete")
    log = (live.site.state_dir / "power.log").read_text()
    assert f"resume {worker.node}" in log

    def suspended() -> bool:
        done = {w.id: w for w in live.workers(include_done=True)}
        return done[worker.id].state is WorkerState.TERMINATED

    # SuspendTime is 30 s in the test slurm.conf.
    wait_for(suspended, 120, "slurmctld's suspend to terminate the worker")
    [w] = [x for x in live.workers(include_done=True) if x.id == worker.id]
    assert any(t.cause == Cause.POWER_DOWN for t in w.history)
    assert any(t.cause == Cause.POWER_UP for t in w.history)
    assert time.monotonic() - started < 240
    assert live.site.store.counters().get("launched") == 1


def test_submit_queue_and_status_work_against_slurm(slurm_cluster: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from elasticsite.cli import app

    batch = '[batch]\ntype = "slurm"\noptions = { partition = "elastic" }'
    config = _write_site(tmp_path, "slurm-cli", batch)
    (RUN_DIR / "power.env").unlink(missing_ok=True)
    runner = CliRunner()
    submitted = runner.invoke(
        app, ["submit", "-c", str(config), "--walltime", "60", "--", "sleep", "1"]
    )
    assert submitted.exit_code == 0, submitted.output
    job = submitted.output.strip()
    try:
        queue = runner.invoke(app, ["queue", "-c", str(config)], env={"COLUMNS": "200"})
        assert queue.exit_code == 0, queue.output
        assert job in queue.output and "queued" in queue.output
        status = runner.invoke(app, ["status", "-c", str(config)], env={"COLUMNS": "200"})
        assert status.exit_code == 0, status.output
        assert "queue: queued" in status.output
        refused = runner.invoke(app, ["queue", "--all", "-c", str(config)])
        assert refused.exit_code == 2 and "embedded" in refused.output
    finally:
        subprocess.run(["scancel", job], check=False)
