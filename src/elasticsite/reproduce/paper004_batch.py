"""Paper 004, Table 3.8 on batch systems: an urgent job's queue wait under each policy.

**The embedded batch system** (:class:`~elasticsite.batch.local.LocalBatch`, its own
SQLite file and scheduling pass) replays a real trace on a virtual clock: the RICC
excerpt's jobs arrive at their submit times on one node of the trace's 8,192 cores
(the machine as one pool of cores, as paper 002's replay treats a site; the embedded
system runs a job on one node), run for their recorded run time (cut at the time they
requested) and are finished through the worker's own calls. The driver is the node's
worker: it reports each job's end and learns what runs from the batch file.

Urgent trials are the paper's dummy jobs (section 3.2.2: a "hello world" asking for
the case study's nodes and wall-clock time): 16 RICC nodes (128 cores) for a requested
3 h, running 1 s, submitted one after the other (the next one once the last has
started), given next-to-run or preemption by :func:`~elasticsite.batch.urgency.elevate`
exactly as an urgent submission is. The default policy's waits are those of the
trace's own jobs of that size (128 cores) in a replay without trials, over the same
period: what a job submitted at default priority waited there.

**Real Slurm**, when a controller answers: its node is filled with short jobs of this
user, more wait, and one urgent job is elevated through the Slurm adapter, once per
policy; nothing is installed or started here.
"""

from __future__ import annotations

import functools
import getpass
import heapq
import math
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from elasticsite.batch.base import BatchError, JobRequest
from elasticsite.batch.local import LocalBatch
from elasticsite.batch.urgency import elevate

if TYPE_CHECKING:
    from elasticsite.batch.slurm import SlurmBatch

__all__ = [
    "URGENT_CORES",
    "URGENT_WALLTIME",
    "EmbeddedRun",
    "SlurmRun",
    "TraceJobs",
    "read_trace_jobs",
    "replay_embedded",
    "slurm_delays",
]

URGENT_CORES = 128
"""The urgent dummy job's cores: 16 nodes of the RICC trace's 8 cores (the case study's
16 nodes)."""
URGENT_WALLTIME = 3 * 3600.0
"""What the dummy job requests: a FLASH run's 2-3 hours."""
URGENT_RUN = 1.0
"""What it runs: a "hello world"."""
NODE = "ricc"


@dataclass(frozen=True, slots=True)
class TraceJobs:
    """A trace's jobs as the replay reads them: seconds from the trace's start, cores."""

    name: str
    cores: int
    submit: list[float]
    procs: list[int]
    runtime: list[float]
    requested: list[float]


def read_trace_jobs(path: Path) -> TraceJobs:
    """The jobs of an SWF trace, cleaned as the simulator cleans them (allocated cores
    from requested ones, requested times at least the run time)."""
    from elasticsite.traces.swf import read_swf

    t = read_swf(path, sort_by_submit=True)
    cores = int(t.header.max_procs or max(int(t.allocated_processors.max()), 1))
    procs = [max(1, min(int(p), cores)) for p in t.allocated_processors]
    run = [max(0.0, float(r)) for r in t.run_time]
    req = [max(float(q), r, 60.0) for q, r in zip(t.requested_time, run, strict=True)]
    origin = float(t.submit_time[0]) if len(t) else 0.0
    name = path.name.removesuffix(".gz").removesuffix(".swf")
    return TraceJobs(name, cores, [float(s) - origin for s in t.submit_time], procs, run, req)


@dataclass(slots=True)
class EmbeddedRun:
    """What one replay found: the urgent trials' and the background's waits."""

    policy: str
    trials: list[tuple[float, float]] = field(default_factory=list)
    """(submitted at, waited) of each urgent trial, seconds from the trace's start."""
    background: list[tuple[float, int, float]] = field(default_factory=list)
    """(submitted at, cores, waited) of each trace job that started."""
    preempted: int = 0
    lost_core_hours: float = 0.0
    """Work the preempted jobs had done and lost."""
    operations: int = 0


def replay_embedded(
    jobs: TraceJobs,
    policy: str | None,
    *,
    until: float,
    since: float = 0.0,
    trials_from: float = 0.0,
    every: float = 1800.0,
    tick: Callable[[float], None] | None = None,
) -> EmbeddedRun:
    """Replay ``jobs`` submitted in [``since``, ``until``) on the embedded batch system; with a
    ``policy`` (``next_to_run`` or ``preemption``) submit urgent trials from
    ``trials_from`` on, at most one every ``every`` seconds and one at a time.
    ``tick(now)`` is called now and then with the virtual clock."""
    user = getpass.getuser()
    now = [0.0]
    run = EmbeddedRun(policy or "none")
    with tempfile.TemporaryDirectory(prefix="elasticsite-p004-") as tmp:
        batch = LocalBatch(Path(tmp) / "batch.db", clock=lambda: now[0], heartbeat_timeout=math.inf)
        batch.register_node(NODE, jobs.cores)
        events: list[tuple[float, int, int, str, int]] = []  # time, seq, kind, job, attempt
        seq = 0
        for i, t in enumerate(jobs.submit):
            if since <= t < until:
                events.append((t, i, 0, str(i), 0))
        seq = len(events)
        heapq.heapify(events)
        if policy is not None and trials_from < until:
            heapq.heappush(events, (trials_from, seq, 1, "", 0))
            seq += 1
        ours: dict[str, int] = {}  # batch id -> trace index (-1: an urgent trial)
        submitted: dict[str, float] = {}
        started: dict[tuple[str, int], float] = {}
        waiting_urgent: str | None = None
        next_trial = trials_from
        while events:
            t, _, kind, ref, attempt = heapq.heappop(events)
            now[0] = t
            finished: list[tuple[str, int, int]] = []
            if kind == 0:  # a trace job arrives
                i = int(ref)
                jid = batch.submit(JobRequest(["true"], jobs.procs[i], jobs.requested[i], user))
                ours[jid], submitted[jid] = i, t
            elif kind == 1:  # an urgent trial
                if waiting_urgent is None and t < until:
                    jid = batch.submit(
                        JobRequest(["hello"], URGENT_CORES, URGENT_WALLTIME, user,
                                   attributes={"urgency": "red", "requeue": "no"})
                    )  # fmt: skip
                    ours[jid], submitted[jid] = -1, t
                    waiting_urgent = jid
                    if policy != "default":
                        done = elevate(batch, jid, URGENT_CORES, policy or "default")
                        run.preempted += len(done.preempted)
                        run.lost_core_hours += (
                            sum(j.cores * (t - (j.started_at or t)) for j in done.preempted)
                            / 3600.0
                        )
                next_trial = t + every
            else:  # a job's end, if that run of it was not preempted meanwhile
                finished.append((ref, attempt, 0))
            for a in batch.worker_poll(NODE, finished=finished):
                key = (a.job_id, a.attempt)
                if key in started:
                    continue
                started[key] = t
                i = ours[a.job_id]
                wait = t - submitted[a.job_id]
                if i < 0:
                    run.trials.append((submitted[a.job_id], wait))
                    waiting_urgent = None
                    length = URGENT_RUN
                    if next_trial < until:  # the next one once this one is over
                        heapq.heappush(events, (max(next_trial, t + length), seq, 1, "", 0))
                        seq += 1
                else:
                    if a.attempt == 1:
                        run.background.append((submitted[a.job_id], jobs.procs[i], wait))
                    length = min(jobs.runtime[i], jobs.requested[i])
                heapq.heappush(events, (t + length, seq, 2, a.job_id, a.attempt))
                seq += 1
            run.operations += 1
            if tick is not None and run.operations % 200 == 0:
                tick(t)
        batch.close()
    return run


@dataclass(slots=True)
class SlurmRun:
    """Allocation delays of one urgent job per policy on a real Slurm, or why none."""

    delays: dict[str, float] = field(default_factory=dict)
    cores: int = 0
    job_seconds: float = 0.0
    why_not: str = ""


def slurm_up() -> str:
    """Empty if a Slurm controller answers here, else why not (nothing is started)."""
    if shutil.which("scontrol") is None or shutil.which("sbatch") is None:
        return "no Slurm here: scontrol and sbatch are not installed"
    try:
        done = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=15,
                              check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no Slurm here: scontrol ping failed ({exc})"
    if "UP" not in done.stdout:
        return "no Slurm here: no slurmctld answers (scontrol ping)"
    return ""


def slurm_delays(job_seconds: float = 3.0, timeout: float = 120.0) -> SlurmRun:
    """On a running Slurm: fill the first idle node with ``job_seconds`` jobs of this
    user, queue as many more, submit an urgent one and elevate it; once per policy
    (default, next-to-run, preemption), each on a drained queue. Only the jobs submitted
    here are cancelled afterwards."""
    from elasticsite.batch.slurm import SlurmBatch

    why = slurm_up()
    if why:
        return SlurmRun(why_not=why)
    batch = SlurmBatch()
    user = getpass.getuser()
    mine: list[str] = []
    out = SlurmRun(job_seconds=job_seconds)
    try:
        view = batch.snapshot()
        node = next((n for n in view.nodes if n.state.value == "idle"), None)
        if node is None or view.queued:
            return SlurmRun(why_not="Slurm runs here but is busy (no idle node, or jobs queued)")
        out.cores = node.cores
        for policy in ("default", "next_to_run", "preemption"):
            fill = [
                batch.submit(JobRequest(["sleep", str(job_seconds)], 1, 60.0, user))
                for _ in range(2 * node.cores)
            ]
            mine += fill
            _wait(functools.partial(_started, batch, set(fill), node.cores), timeout)
            t0 = time.monotonic()
            urgent = batch.submit(JobRequest(["true"], 1, 60.0, user))
            mine.append(urgent)
            if policy != "default":
                elevate(batch, urgent, 1, policy)
            _wait(functools.partial(_left_queue, batch, urgent), timeout)
            out.delays[policy] = time.monotonic() - t0
            _wait(functools.partial(_all_done, batch, set(mine)), timeout)
    except (BatchError, TimeoutError) as exc:
        out.why_not = f"Slurm here, but the measurement failed: {exc}"
    finally:
        if mine:
            subprocess.run(["scancel", *mine], capture_output=True, check=False, timeout=30)
    return out


def _started(batch: SlurmBatch, ids: set[str], least: int) -> bool:
    return sum(j.id in ids for j in batch.snapshot().running) >= least


def _left_queue(batch: SlurmBatch, job: str) -> bool:
    view = batch.snapshot()
    return any(j.id == job for j in view.running) or job not in {j.id for j in view.queued}


def _all_done(batch: SlurmBatch, ids: set[str]) -> bool:
    view = batch.snapshot()
    return not ({j.id for j in view.running + view.queued} & ids)


def _wait(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"Slurm did not get there within {timeout:g} s")
        time.sleep(0.2)
