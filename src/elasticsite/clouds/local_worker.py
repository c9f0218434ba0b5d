"""One instance of the local cloud: boot, join the local batch system, run jobs, leave.

Started by :class:`elasticsite.clouds.local.LocalCloud` as
``python -m elasticsite.clouds.local_worker ...``. Hundreds run at once on a small
machine, so a worker imports little, sleeps in ``sigtimedwait`` (woken at once by
SIGTERM or by a job ending), jitters its poll and talks to the batch file in one
small transaction per poll.

SIGTERM (or SIGINT) shuts the instance down: running jobs are killed and the node
leaves the batch system at once (which requeues its jobs), then the worker waits
``--shutdown-delay`` seconds, as a VM takes time to power off, marks the instance
terminated and exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from elasticsite import logs
from elasticsite.batch.base import WALLTIME_EXCEEDED, BatchError
from elasticsite.batch.local import LocalBatch
from elasticsite.batch.local_workers import Ended
from elasticsite.boottime import BootPath
from elasticsite.clouds.errors import CloudError
from elasticsite.clouds.local_agent import LocalAgent
from elasticsite.clouds.local_jobs import JobLauncher, JobRun, Refused, job_preexec, kill
from elasticsite.clouds.local_registry import boot_end, set_instance_state, worker_log
from elasticsite.clouds.local_slurmd import SlurmdError, SlurmdNode
from elasticsite.files import StateFileError

log = logging.getLogger("elasticsite.worker")

WALLTIME_EXIT = -signal.SIGKILL
"""Status recorded for a job killed for overrunning its walltime (with its reason)."""
HEARTBEAT_EVERY = 5.0
"""Longest time between two heartbeats (shorter with a short poll)."""
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_WAKE_SIGNALS = (*_STOP_SIGNALS, signal.SIGCHLD)
_SIGTIMEDWAIT = hasattr(signal, "sigtimedwait")


class Worker:
    """The state of one worker process; :meth:`run` is its whole life."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.cloud_db = Path(args.cloud_db)
        self.instance_id: str = args.instance_id
        self.name: str = args.name
        self.cores: int = args.cores
        self.batch_db = Path(args.batch_db)
        self.jobs_dir = Path(args.jobs_dir)
        self.boot_delay: float = args.boot_delay
        """What the boot takes after its turn on the cloud's boot path (if it has one)."""
        self.boot_path = BootPath(args.image_transfer, args.parallel_boots)
        self.shutdown_delay: float = args.shutdown_delay
        self.poll: float = max(args.poll, 0.01)
        self.never_join: bool = args.never_join
        self.heartbeat_every = min(HEARTBEAT_EVERY, 10 * self.poll)
        self.pass_interval = max(2 * self.poll, 0.5)
        self.rng = random.Random()
        self.stopping = False
        self.runs: dict[tuple[str, int], JobRun] = {}
        self.unreported: list[Ended] = []
        self.last_heartbeat = time.monotonic()
        self.batch: LocalBatch | None = None
        self._mask: set[int | signal.Signals] = set()
        self.jobs: JobLauncher | None = None
        self.log_path = str(worker_log(self.jobs_dir.parent, self.name))
        """Where the cloud sends this process's output (``elasticsite job`` shows it)."""
        self.userdata_path = Path(os.environ.get("ELASTICSITE_USERDATA", ""))
        self.userdata = _read_userdata(self.userdata_path)
        self.node: str = self.userdata.get("node", self.name)
        """The batch system's name for this instance (the manager's choice, or Slurm's)."""
        self.agent: LocalAgent | None = None
        if LocalAgent.wanted(self.userdata):
            state_dir = self.jobs_dir.parent
            self.agent = LocalAgent(
                self.userdata_path,
                self.userdata,
                self.userdata.get("node", self.name),
                state_dir / "agents" / self.name,
                worker_log(state_dir, self.name, "agent"),
            )

    # -- signals and sleeping ----------------------------------------------------------

    def _setup_signals(self) -> None:
        if _SIGTIMEDWAIT:
            self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAKE_SIGNALS)
        else:  # no sigtimedwait (macOS): flag and short sleeps
            for sig in _STOP_SIGNALS:
                signal.signal(sig, self._on_stop_signal)

    def _on_stop_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True once asked to stop. A job ending wakes it."""
        deadline = time.monotonic() + timeout
        while not self.stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if not _SIGTIMEDWAIT:
                time.sleep(min(remaining, 0.1))
                continue
            info = signal.sigtimedwait(_WAKE_SIGNALS, remaining)
            if info is None or info.si_signo == signal.SIGCHLD:
                return False
            log.info("%s: got signal %d, shutting down", self.name, info.si_signo)
            self.stopping = True
        return True

    # -- life --------------------------------------------------------------------------

    def _boot(self) -> bool:
        """Wait out the boot; True once asked to stop. On a shared boot path, until the
        registry's boots say it has ended, looking again every poll (a later boot may
        still push it back a little, an earlier one cancelled bring it forward)."""
        if not self.boot_path.shared:
            return self.wait(self.boot_delay)
        while (end := boot_end(self.cloud_db, self.instance_id, self.boot_path)) is not None:
            left = end - time.time()
            if left <= 0:
                break
            if self.wait(min(left, self.poll)):
                return True
        return False

    def run(self) -> int:
        """Boot, join, serve until told to stop, leave; returns the exit status."""
        self._setup_signals()
        self.jobs = JobLauncher(self.jobs_dir, self.node, self.userdata.get("site_id", ""),
                                job_preexec(os.getpid(), self._mask))  # fmt: skip
        prior = set_instance_state(self.cloud_db, self.instance_id, None, pid=os.getpid())
        if prior is None:
            log.error("%s: instance %s is not in %s", self.name, self.instance_id, self.cloud_db)
            return 1
        log.info("%s: booting for %.2fs%s (%d cores)", self.name, self.boot_delay,
                 f" after its turn on the boot path ({self.boot_path.describe()})"
                 if self.boot_path.shared else "", self.cores)  # fmt: skip
        if prior in ("stopping", "terminated") or self._boot():
            return self.shutdown(joined=False)
        marked = set_instance_state(
            self.cloud_db, self.instance_id, "running", only_from=("pending",)
        )
        if marked is None:
            log.error("%s: instance %s vanished from the registry", self.name, self.instance_id)
            return 1
        if self.never_join:
            log.warning("%s: this instance never joins (simulated boot failure)", self.name)
            while not self.wait(5.0):
                if not self.cloud_db.exists():
                    return 1
            return self.shutdown(joined=False)
        if self.agent is not None:
            try:
                # Empty signal mask; dies with this process, as an agent with its VM.
                self.agent.start(preexec=job_preexec(os.getpid(), set()))
            except (OSError, StateFileError) as exc:
                log.error("%s: cannot start the agent: %s", self.name, exc)
        if self.userdata.get("batch") == "slurm":
            return self._serve_slurm()
        if not self._join():
            return self.shutdown(joined=False)
        while True:
            if not self.cloud_db.exists():
                log.error("%s: cloud registry %s is gone; exiting", self.name, self.cloud_db)
                self._kill_all()
                return 1
            self.tick()
            if self.wait(self.poll * self.rng.uniform(0.75, 1.25)):
                return self.shutdown(joined=True)

    def _serve_slurm(self) -> int:
        """Be a node of a real Slurm: run its slurmd until told to stop."""
        ud = self.userdata
        node = SlurmdNode(
            node=ud.get("node", self.name),
            cores=self.cores,
            mode=ud.get("slurm_node_mode", "dynamic"),
            feature=ud.get("slurm_feature", "elastic"),
            slurmd=ud.get("slurmd", "/usr/sbin/slurmd"),
            controller=ud.get("slurm_controller", "localhost"),
            log_path=worker_log(self.jobs_dir.parent, self.name, "slurmd"),
            preexec=job_preexec(os.getpid(), set()),
        )
        try:
            node.start()
        except SlurmdError as exc:
            # As a VM whose node daemon fails: it runs on, never joins, and is replaced.
            log.error("%s: %s", self.name, exc)
        reported = False
        while not self.wait(1.0):
            if node.proc is not None and not node.alive() and not reported:
                log.error("%s: slurmd exited with code %s", self.name, node.proc.returncode)
                reported = True
        node.stop()
        return self.shutdown(joined=False)

    def _join(self) -> bool:
        """Register with the batch system, retrying while it is busy; False if told to stop."""
        while True:
            try:
                self.batch = LocalBatch(self.batch_db)
                self.batch.register_node(self.node, self.cores)
            except BatchError as exc:
                log.warning("%s: cannot register yet (%s); retrying", self.name, exc)
                if self.wait(1.0) or not self.cloud_db.exists():
                    return False
                continue
            self.last_heartbeat = time.monotonic()
            log.info("%s: joined the batch system", self.name)
            return True

    def tick(self) -> None:
        """One poll: reap and police jobs, report, heartbeat, start and kill what changed."""
        assert self.batch is not None
        now = time.monotonic()
        self._reap(now)
        heartbeat = now - self.last_heartbeat >= self.heartbeat_every
        free = self.cores - sum(r.cores for r in self.runs.values())
        try:
            assigned = self.batch.worker_poll(
                self.node, self.unreported, heartbeat, free > 0, self.pass_interval
            )
        except BatchError as exc:
            log.warning("%s: batch poll failed (%s); will retry", self.name, exc)
            return
        self.unreported = []
        if heartbeat:
            self.last_heartbeat = now
        wanted = {(a.job_id, a.attempt) for a in assigned}
        for key in [k for k in self.runs if k not in wanted]:
            log.info("%s: job %s no longer runs here (preempted, cancelled or requeued); "
                     "killing it", self.name, key[0])  # fmt: skip
            kill(self.runs.pop(key))
        started: list[tuple[str, int, int | None, str]] = []
        assert self.jobs is not None
        for a in assigned:
            if (a.job_id, a.attempt) not in self.runs:
                run = self.jobs.start(a)
                if isinstance(run, Refused):  # it could not start: it ended at once
                    self.unreported.append((a.job_id, a.attempt, run.code, run.reason))
                    started.append((a.job_id, a.attempt, None, run.workdir))
                else:
                    self.runs[(a.job_id, a.attempt)] = run
                    started.append((a.job_id, a.attempt, run.proc.pid, run.workdir))
        if started:  # recorded before the next poll reports any of them ended
            try:
                self.batch.record_pids(self.node, started, self.log_path)
            except BatchError as exc:
                log.warning("%s: cannot record job pids (%s)", self.name, exc)

    def _reap(self, now: float) -> None:
        """Collect ended jobs for reporting; kill those past their walltime."""
        for key, run in list(self.runs.items()):
            code = run.proc.poll()
            reason = ""
            if code is None and now > run.deadline:
                log.warning("%s: job %s exceeded its walltime; killing it", self.name, run.job_id)
                kill(run)
                code, reason = WALLTIME_EXIT, WALLTIME_EXCEEDED
            if code is not None:
                del self.runs[key]
                self.unreported.append((run.job_id, run.attempt, code, reason))
                if code == 0:
                    log.info("%s: job %s completed", self.name, run.job_id)
                else:
                    how = f"exit code {code}" if code > 0 else f"signal {-code}"
                    log.info("%s: job %s failed (%s%s); its stderr: %s", self.name, run.job_id,
                             how, f", {reason}" if reason else "",
                             Path(run.workdir) / "stderr")  # fmt: skip

    def _kill_all(self) -> None:
        for run in self.runs.values():
            kill(run)
        self.runs.clear()

    def shutdown(self, joined: bool) -> int:
        """Kill jobs, leave the batch system, take ``shutdown_delay``, report terminated."""
        log.info("%s: shutting down", self.name)
        if self.agent is not None:
            self.agent.stop()
        if joined and self.batch is not None:
            self._reap(time.monotonic())
            self._kill_all()
            try:
                if self.unreported:  # jobs that did finish are not run again
                    self.batch.worker_poll(self.node, self.unreported)
                self.batch.leave(self.node)
            except BatchError as exc:
                log.error("%s: cannot leave the batch system: %s", self.name, exc)
        time.sleep(self.shutdown_delay)
        try:
            set_instance_state(self.cloud_db, self.instance_id, "terminated")
        except CloudError as exc:
            log.error("%s: cannot record termination: %s", self.name, exc)
        log.info("%s: terminated", self.name)
        return 0


def _read_userdata(path: Path) -> dict[str, str]:
    """The instance's user data (a JSON object of strings); empty if there is none."""
    if not path.name:
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        log.error("cannot read user data %s: %s", path, exc)
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The worker's command line, as :class:`~elasticsite.clouds.local.LocalCloud` builds it."""
    parser = argparse.ArgumentParser(prog="python -m elasticsite.clouds.local_worker")
    parser.add_argument("--cloud-db", required=True, help="the cloud's instance registry")
    parser.add_argument("--instance-id", required=True)
    parser.add_argument("--name", required=True, help="instance and batch node name")
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--batch-db", required=True, help="the local batch system's file")
    parser.add_argument("--jobs-dir", required=True, help="job working directories go here")
    parser.add_argument(
        "--boot-delay",
        type=float,
        default=0.0,
        help="seconds the boot takes (after its turn on the boot path)",
    )
    parser.add_argument(
        "--image-transfer",
        type=float,
        default=0.0,
        help="seconds an image takes alone over the cloud's shared link",
    )
    parser.add_argument(
        "--parallel-boots",
        type=int,
        default=0,
        help="boots of the cloud in progress at once (0: no limit)",
    )
    parser.add_argument("--shutdown-delay", type=float, default=0.0)
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between polls")
    parser.add_argument("--never-join", action="store_true", help="simulate a failed boot")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one worker to the end; returns its exit status."""
    args = parse_args(argv)
    logs.setup(logging.INFO, fmt="%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s")
    try:
        return Worker(args).run()
    except CloudError as exc:
        log.error("%s: %s", args.name, exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
