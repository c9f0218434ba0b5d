"""Paper 003 (Cloud Scheduler) on the live manager over the embedded site: its state
resumed by a manager started again after the last one was killed.

A ``cloud_scheduler`` site of 4 VMs (local cloud, workers booting in a fraction of a
second, the loop every 0.2 s) is managed by an ``elasticsite run`` process; 8 jobs of
this process's user naming the ``small`` type queue, 4 run. The manager is killed
with SIGKILL (harder than the paper's shutdown persisting its state: nothing is
saved at the end; the VMs go on running their jobs), a new one is started on the same
state directory, and the run waits for every job to finish. What is measured: the
VMs the new manager launched, the instances no worker record knows (orphans), each
worker's owner before and after, the jobs' exit codes.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from elasticsite.batch.base import JobRequest
from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.base import WORKER_TAG, InstanceState
from elasticsite.clouds.local import LocalCloud
from elasticsite.manager.store import StateStore
from elasticsite.model import JobState, WorkerState

__all__ = ["Restart", "restart_run"]

VMS = 4
JOBS = 8
JOB_SECONDS = 2.0


@dataclass
class Restart:
    """What the restart showed."""

    before: dict[str, str] = field(default_factory=dict)
    """Live workers and their owners when the first manager was killed."""
    after: dict[str, str] = field(default_factory=dict)
    """The same workers' owners once every job had ended (the second manager's)."""
    launched_after: list[str] = field(default_factory=list)
    """Workers launched since the restart, while the jobs ran."""
    orphans: list[str] = field(default_factory=list)
    """Instances of the site no worker record knows."""
    exit_codes: list[int | None] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    """The type of the VM each job ran on (every job names ``small``)."""
    seconds: float = 0.0
    why_not: str = ""


CONFIG = """
[manager]
site_id = "paper003"
state_dir = "{state}"
interval = 0.2
stall_timeout = 20.0
heartbeat_timeout = 5.0
retry_backoff = 0.2
on_shutdown = "leave"

[policy]
name = "cloud_scheduler"
rebalance = "graceful"

[[clouds]]
name = "local"
max_instances = {vms}
boot_time = 0.3
shutdown_time = 0.1
vm_types = [{{ name = "small", cores = 1 }}, {{ name = "large", cores = 2 }}]
options = {{ poll_interval = 0.1 }}
"""


def _wait(cond: Callable[[], bool], timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"timed out after {timeout:g} s waiting for {what} (manager log: {log})"
            )
        time.sleep(0.05)


def _manager(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "elasticsite", "run", "-c", str(cfg)],
            stdout=sink, stderr=sink, stdin=subprocess.DEVNULL,
        )  # fmt: skip


def restart_run(work: Path) -> Restart:
    """Run the restart on a fresh state directory under ``work`` (a previous run's is
    removed): the manager, an
    ``elasticsite run`` process, is killed with SIGKILL while its VMs run jobs."""
    out = Restart()
    started = time.perf_counter()
    work = work.resolve()  # the configuration's paths are read from its own directory
    work.mkdir(parents=True, exist_ok=True)
    state = work / "state"
    if state.exists():  # a previous run's: its workers and jobs are not this run's
        shutil.rmtree(state)
    state.mkdir(mode=0o700)
    cfg = work / "site.toml"
    cfg.write_text(CONFIG.format(state=state, vms=VMS), encoding="utf-8")
    log = work / "manager.log"
    user = pwd.getpwuid(os.getuid()).pw_name
    procs: list[subprocess.Popen[bytes]] = []
    cloud = LocalCloud("local", state, "paper003", state / "batch.db")
    try:
        procs.append(_manager(cfg, log))
        _wait(lambda: (state / "manager.db").exists() and (state / "batch.db").exists(),
              60, "the manager to open its state", log)  # fmt: skip
        store = StateStore(state / "manager.db")
        batch = LocalBatch(state / "batch.db")
        request = JobRequest(
            ["sleep", str(JOB_SECONDS)], 1, 60.0, user, attributes={"vm_type": "small"}
        )
        ids = [batch.submit(request) for _ in range(JOBS)]
        busy = WorkerState.BUSY
        _wait(lambda: sum(r.worker.state is busy for r in store.load()) == VMS,
              60, f"{VMS} VMs to run jobs", log)  # fmt: skip
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(30)
        out.before = {r.worker.id: r.worker.owner for r in store.load() if r.worker.state.live}
        restarted = time.time()
        procs.append(_manager(cfg, log))
        done = {JobState.DONE, JobState.FAILED, JobState.CANCELLED}
        _wait(lambda: all(batch.job(j).state in done for j in ids), 120, "every job to end", log)
        out.exit_codes = [batch.job(j).exit_code for j in ids]
        records = store.load(include_done=True)
        typed = {r.worker.node or r.worker.id: r.worker.vm_type for r in records}
        out.types = [typed.get(batch.job(j).node or "", "none") for j in ids]
        out.after = {r.worker.id: r.worker.owner for r in records if r.worker.id in out.before}
        out.launched_after = [r.worker.id for r in records if r.worker.requested_at >= restarted]
        known = {r.worker.id for r in records}
        out.orphans = [
            i.id for i in cloud.describe()
            if i.state is not InstanceState.TERMINATED and i.tags.get(WORKER_TAG) not in known
        ]  # fmt: skip
    except TimeoutError as exc:
        out.why_not = str(exc)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # on_shutdown = "leave": it stops at once
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        cloud.kill_all()
    out.seconds = time.perf_counter() - started
    return out
