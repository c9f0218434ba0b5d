"""Paper 001's Figures 3, 5 and 6 on the simulator, run by the manager's own core.

Every run is :class:`~elasticsite.sim.elastic.ElasticRun` with the ``core_demand``
policy (the paper's decision engine: launch the cores queued jobs ask for less the free
and pending workers' cores) deciding every 5 s. The EPU's sensor reads the queue every
60 s, so the decision engine first sees jobs submitted together at its next reading
and decision: the jobs reach the simulated site that much later (a uniform phase of the
two periods, drawn per run), and every time is counted from their submission. After
that the sensor's age changes nothing the policy counts: a node it has not yet seen
join still counts as pending, and its job as queued.

Set as the paper's EPU ran: a pending instance is replaced after 10 minutes (EC2), no
cloud is closed after failures in a row (the EPU had no such state), and an idle
worker is released at once. On FutureGrid, where boots wait for the cloud's places for
most of an hour, nothing is taken for stalled: the EPU's rule looks for a pending
instance that does not change, ours for one that has not joined, and the paper saw no
stall there.

An MPI job of ``n`` ranks is ``n`` one-core jobs submitted together: the last starts
when the ``n``-th worker joins, as the MPI job would (lines 486-488); they sleep an
hour, longer than any run takes to start them all, so no worker frees up for one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from elasticsite import policies
from elasticsite.metrics import Timeline, timeline
from elasticsite.model import Cause, Job, WorkerState
from elasticsite.reproduce.paper001_clouds import DECISION_PERIOD, SENSOR_PERIOD, STALL_TIMEOUT
from elasticsite.sim.cloud import CloudModel
from elasticsite.sim.elastic import ElasticRun, RunStatus

__all__ = [
    "ReactivityRun",
    "Trace",
    "reactivity_run",
    "trace_run",
]

Status = Callable[[RunStatus], None] | None

MPI_SLEEP = 3600.0
"""Figure 3's job sleeps 60 minutes (lines 501-503)."""
SLEEP = 1800.0
"""Figures 5 and 6: single-core jobs that sleep 30 minutes (lines 504-507, 609, 621)."""
NO_STALL = 1e9
"""FutureGrid's runs: no boot is taken for stalled."""


def _settings(stall: float) -> policies.PolicySettings:
    return policies.PolicySettings(stall_timeout=stall, billing_margin=3600.0)


def _run(
    jobs: int, runtime: float, clouds: Sequence[CloudModel], stall: float, seed: int,
    status: Status, *, protect: bool = False,
) -> tuple[ElasticRun, float]:  # fmt: skip
    """A site whose ``jobs`` one-core jobs are submitted at 0 and seen at the EPU's next
    sensor reading and decision; returns the run (not started) and that delay."""
    rng = random.Random(seed)
    seen = rng.uniform(0, SENSOR_PERIOD) + rng.uniform(0, DECISION_PERIOD)
    arrivals = [(seen, 1, runtime, 2 * runtime)] * jobs
    run = ElasticRun(
        arrivals, clouds, policies.get("core_demand"), _settings(stall), DECISION_PERIOD,
        "easy", seed, status=status,
    )  # fmt: skip
    if not protect:  # the EPU kept replacing stalled instances (lines 631-633)
        run.config = replace(run.config, protect_after=0)
    return run, seen


@dataclass(frozen=True, slots=True)
class ReactivityRun:
    """One run of Figure 3: ``seconds`` from submission until the last rank started."""

    nodes: int
    run: int
    seconds: float
    stalled: int
    """Boots replaced after the stall timeout."""


def reactivity_run(
    nodes: int, index: int, cloud: CloudModel, seed: int, status: Status = None,
    *, protect: bool = False,
) -> ReactivityRun:  # fmt: skip
    """Figure 3's test once: an MPI job of ``nodes`` ranks on an empty site."""
    run, seen = _run(nodes, MPI_SLEEP, [cloud], STALL_TIMEOUT, seed, status, protect=protect)
    t = seen
    while any(j.started_at is None for j in run.jobs):
        if t - seen > MPI_SLEEP:
            raise RuntimeError(f"{nodes} nodes: the job did not start within an hour")
        t += SENSOR_PERIOD
        run.sim.run(until=t)
    last = max(j.started_at or 0.0 for j in run.jobs)
    return ReactivityRun(nodes, index, last, _stalled(run))


@dataclass(slots=True)
class Trace:
    """A multi-cloud trace (Figures 5, 6 and Hotel's first test): the whole run."""

    name: str
    jobs: list[Job]
    clouds: list[CloudModel]
    up: dict[str, Timeline]
    """Per cloud, and ``all``: workers up (joined) over time since submission."""
    launched: int
    stalled: int
    release_delay: float
    """The longest a worker stayed after its last job ended before it was released."""

    def up_at(self, cloud: str, at: float) -> int:
        """Workers of ``cloud`` (or ``all``) up ``at`` seconds after submission."""
        tl = self.up[cloud]
        i = int(np.searchsorted(tl.time, at, side="right")) - 1
        return int(tl.joined_workers[i]) if i >= 0 else 0

    def peak(self, cloud: str, until: float = math.inf) -> tuple[int, float]:
        """The most workers of ``cloud`` up until ``until``, and when first reached."""
        tl = self.up[cloud]
        inside = tl.time <= until
        if not inside.any():
            return 0, 0.0
        values = tl.joined_workers[inside]
        top = int(values.max())
        return top, float(tl.time[inside][int(np.argmax(values))])

    def reaching(self, cloud: str, count: int) -> float | None:
        """When ``cloud`` (or ``all``) first had ``count`` workers up."""
        tl = self.up[cloud]
        hit = np.flatnonzero(tl.joined_workers >= count)
        return float(tl.time[hit[0]]) if len(hit) else None

    @property
    def done(self) -> int:
        return sum(1 for j in self.jobs if j.finished_at is not None)

    @property
    def finished(self) -> float:
        return max((j.finished_at or 0.0 for j in self.jobs), default=0.0)

    def reused(self) -> int:
        """Jobs that started on a worker that had run a job before."""
        by_node: dict[str, list[float]] = {}
        for j in self.jobs:
            if j.node is not None and j.started_at is not None:
                by_node.setdefault(j.node, []).append(j.started_at)
        return sum(len(starts) - 1 for starts in by_node.values())


def trace_run(
    name: str, jobs: int, clouds: Sequence[CloudModel], seed: int, status: Status = None,
    *, stall: float = NO_STALL,
) -> Trace:  # fmt: skip
    """``jobs`` single-core 30-minute jobs submitted at once, run to the end."""
    run, _ = _run(jobs, SLEEP, clouds, stall, seed, status)
    run.sim.run()
    origin = [Job("0", 1, 1.0, 0.0)]  # times count from the submission, at 0
    up = {c.name: timeline(origin, [w for w in run.workers if w.cloud == c.name])
          for c in clouds}  # fmt: skip
    up["all"] = timeline(origin, run.workers)
    return Trace(name, run.jobs, list(clouds), up, len(run.workers), _stalled(run),
                 _release_delay(run))  # fmt: skip


def _stalled(run: ElasticRun) -> int:
    """Workers given up on after the stall timeout."""
    return sum(1 for t in run.log if t.cause is Cause.STALLED and t.to_state is WorkerState.FAILED)


def _release_delay(run: ElasticRun) -> float:
    """The longest a joined worker stayed after its last job ended before it was
    drained or terminated."""
    last: dict[str, float] = {}
    for j in run.jobs:
        if j.node is not None and j.finished_at is not None:
            last[j.node] = max(last.get(j.node, 0.0), j.finished_at)
    leaving = {WorkerState.DRAINING, WorkerState.TERMINATING}
    released: dict[str, float] = {}
    for tr in run.log:
        if tr.to_state in leaving and tr.worker_id not in released:
            released[tr.worker_id] = tr.at
    delays = [
        released[w.id] - last[w.node] for w in run.workers if w.node in last and w.id in released
    ]
    return max(delays, default=0.0)
