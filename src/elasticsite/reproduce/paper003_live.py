"""Paper 003 (Cloud Scheduler) on the live manager over the embedded site: its state
persisted at shutdown and resumed at restart.

A ``cloud_scheduler`` site of 4 VMs (local cloud, workers booting in a fraction of a
second, the loop every 0.2 s) runs as this process's user; 8 jobs naming the
``small`` type queue, 4 run. The manager is stopped with ``on_shutdown = "leave"``
(the paper's "persist its state": the VMs go on running their jobs), a new manager is
opened on the same state directory, and the run waits for every job to finish. What
is measured: the VMs the new manager launched, the instances no worker record knows
(orphans), each worker's owner before and after, the jobs' exit codes.
"""

from __future__ import annotations

import os
import pwd
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from elasticsite.batch.base import JobRequest
from elasticsite.clouds.base import WORKER_TAG, InstanceState
from elasticsite.clouds.local import LocalCloud
from elasticsite.config import parse_config
from elasticsite.manager.site import Site, open_site
from elasticsite.model import JobState, WorkerState

__all__ = ["Restart", "restart_run"]

VMS = 4
JOBS = 8
JOB_SECONDS = 2.0


@dataclass
class Restart:
    """What the restart showed."""

    before: dict[str, str] = field(default_factory=dict)
    """Live workers and their owners when the first manager stopped."""
    after: dict[str, str] = field(default_factory=dict)
    """The same workers' owners as the second manager first saw them."""
    launched_after: list[str] = field(default_factory=list)
    """Workers the second manager launched while the jobs ran."""
    orphans: list[str] = field(default_factory=list)
    """Instances of the site no worker record knows."""
    exit_codes: list[int | None] = field(default_factory=list)
    seconds: float = 0.0
    why_not: str = ""


def _config(state: Path) -> dict[str, object]:
    return {
        "manager": {
            "site_id": "paper003",
            "state_dir": str(state),
            "interval": 0.2,
            "stall_timeout": 20.0,
            "heartbeat_timeout": 5.0,
            "retry_backoff": 0.2,
            "on_shutdown": "leave",
        },
        "policy": {"name": "cloud_scheduler", "rebalance": "graceful"},
        "clouds": [
            {
                "name": "local",
                "max_instances": VMS,
                "boot_time": 0.3,
                "shutdown_time": 0.1,
                "vm_types": [{"name": "small", "cores": 1}, {"name": "large", "cores": 2}],
                "options": {"poll_interval": 0.1},
            }
        ],
    }


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"paper003 restart: timed out after {timeout:g} s waiting for {what}"
            )
        time.sleep(0.05)


def _start(site: Site) -> tuple[threading.Thread, Callable[[], None]]:
    manager = site.manager()
    thread = threading.Thread(target=manager.run, daemon=True)
    thread.start()

    def stop() -> None:
        manager.stop()
        thread.join(60)

    return thread, stop


def _live(site: Site) -> dict[str, str]:
    return {r.worker.id: r.worker.owner for r in site.store.load() if r.worker.state.live}


def restart_run(work: Path) -> Restart:
    """Run the restart on a fresh state directory under ``work``."""
    out = Restart()
    started = time.perf_counter()
    state = work / "state"
    user = pwd.getpwuid(os.getuid()).pw_name
    cfg = parse_config(_config(state))
    site = open_site(cfg)
    cloud = site.clouds["local"]
    assert isinstance(cloud, LocalCloud)
    stops: list[Callable[[], None]] = []
    try:
        _, stop = _start(site)
        stops.append(stop)
        request = JobRequest(
            ["sleep", str(JOB_SECONDS)], 1, 60.0, user, attributes={"vm_type": "small"}
        )
        ids = [site.batch.submit(request) for _ in range(JOBS)]
        busy = WorkerState.BUSY
        _wait(
            lambda: sum(r.worker.state is busy for r in site.store.load()) == VMS,
            30, f"{VMS} VMs to run jobs",
        )  # fmt: skip
        stop()
        out.before = _live(site)
        restarted = time.time()
        again = open_site(parse_config(_config(state)))
        _, stop = _start(again)
        stops.append(stop)
        _wait(lambda: bool(_live(again)), 30, "the restarted manager to load its workers")
        out.after = {w: o for w, o in _live(again).items() if w in out.before}
        done = {JobState.DONE, JobState.FAILED, JobState.CANCELLED}
        _wait(lambda: all(again.batch.job(j).state in done for j in ids), 60, "every job to end")
        out.exit_codes = [again.batch.job(j).exit_code for j in ids]
        records = again.store.load(include_done=True)
        out.launched_after = [r.worker.id for r in records if r.worker.requested_at >= restarted]
        known = {r.worker.id for r in records}
        out.orphans = [
            i.id for i in cloud.describe()
            if i.state is not InstanceState.TERMINATED and i.tags.get(WORKER_TAG) not in known
        ]  # fmt: skip
    except TimeoutError as exc:
        out.why_not = str(exc)
    finally:
        for stop in stops:
            stop()
        cloud.kill_all()
    out.seconds = time.perf_counter() - started
    return out
