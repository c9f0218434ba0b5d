"""Workload metrics of an elastic-site run: what it took, what it wasted, what it cost.

The definitions follow the source papers: elapsed workload time, queue wait and VM
overhead (paper 000) and reactivity time (paper 001). Everything here is a pure
function of finished or in-progress job and worker records, so the live manager, the
simulator and the demo report the same numbers. Instants stay on the input clock;
``scale`` multiplies durations only, so a demo run at N times speed reports in
uncompressed seconds (and pays for uncompressed seconds).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from elasticsite.model import CloudSpec, Job, JobState, Worker, WorkerState, billed_cost

__all__ = [
    "JobGroup",
    "Row",
    "Timeline",
    "WorkerUsage",
    "WorkloadMetrics",
    "elapsed_workload_time",
    "horizon",
    "job_done",
    "queue_waits",
    "reactivity_groups",
    "timeline",
    "worker_usage",
    "workload_metrics",
]

Row = tuple[str, float | int | None, str]
"""One line of a summary table: label, value (None when undefined), unit."""


@dataclass(frozen=True, slots=True)
class WorkerUsage:
    """How one worker spent its life: instants on the input clock, durations scaled.

    ``active`` runs from the request until the first final state (or the horizon for a
    worker still live); ``busy`` is the part of it during which at least one job ran on
    the worker's node; ``overhead`` is the rest (boot, idle and shutdown time).
    """

    id: str
    cloud: str
    vm_type: str
    requested_at: float
    joined_at: float | None
    ended_at: float | None
    state: WorkerState
    active: float
    busy: float
    overhead: float
    cost: float
    end_cause: str | None


@dataclass(frozen=True, slots=True)
class JobGroup:
    """Jobs submitted together, and how long the site took to start all of them.

    ``reactivity`` (scaled) is None while any job of the group has not started.
    """

    first_submitted_at: float
    size: int
    last_started_at: float | None
    reactivity: float | None


@dataclass(frozen=True, slots=True, eq=False)
class Timeline:
    """Exact step series of a run: value ``i`` holds from ``time[i]`` until ``time[i + 1]``.

    ``origin`` is the first submission (or first worker request when there are no
    jobs), the zero of every plot and CSV drawn from it.
    """

    origin: float
    time: npt.NDArray[np.float64]
    queued: npt.NDArray[np.int64]
    running: npt.NDArray[np.int64]
    live_workers: npt.NDArray[np.int64]
    joined_workers: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.time)

    def relative(self, scale: float = 1.0) -> npt.NDArray[np.float64]:
        """Times as seconds since ``origin``, multiplied by ``scale``."""
        return (self.time - self.origin) * scale


@dataclass(frozen=True, slots=True)
class WorkloadMetrics:
    """Every summary figure of one run; durations in (scaled) seconds, money in the
    clouds' price unit. Fields are None where the run gives them no meaning yet."""

    scale: float
    jobs_total: int
    jobs_done: int
    jobs_not_done: int
    elapsed: float | None
    queue_waits: Mapping[str, float]
    wait_mean: float | None
    wait_median: float | None
    wait_max: float | None
    groups: tuple[JobGroup, ...]
    reactivity_max: float | None
    workers: tuple[WorkerUsage, ...]
    workers_launched: int
    workers_failed: int
    failed_by_cause: Mapping[str, int]
    peak_workers: int
    active_total: float
    busy_total: float
    overhead_total: float
    worker_hours: float
    cost_total: float
    cost_by_cloud: Mapping[str, float]

    def to_rows(self) -> list[Row]:
        """The figures as (label, value, unit) rows, in the order a summary table shows them."""
        rows: list[Row] = [
            ("jobs done", self.jobs_done, "jobs"),
            ("jobs not done", self.jobs_not_done, "jobs"),
            ("elapsed workload time", self.elapsed, "s"),
            ("queue wait mean", self.wait_mean, "s"),
            ("queue wait median", self.wait_median, "s"),
            ("queue wait max", self.wait_max, "s"),
            ("submission groups", len(self.groups), "groups"),
            ("reactivity time max", self.reactivity_max, "s"),
            ("workers launched", self.workers_launched, "workers"),
            ("workers failed", self.workers_failed, "workers"),
        ]
        rows += [
            (f"workers failed: {cause}", n, "workers")
            for cause, n in sorted(self.failed_by_cause.items())
        ]
        rows += [
            ("peak workers", self.peak_workers, "workers"),
            ("worker time", self.active_total, "s"),
            ("busy worker time", self.busy_total, "s"),
            ("overhead", self.overhead_total, "s"),
            ("worker-hours", self.worker_hours, "h"),
            ("cost", self.cost_total, "money"),
        ]
        rows += [
            (f"cost: {cloud}", cost, "money") for cloud, cost in sorted(self.cost_by_cloud.items())
        ]
        return rows


def job_done(job: Job) -> bool:
    """A job ran to its end (completed or failed, whatever its exit code); cancelled
    jobs never count."""
    if job.state in (JobState.COMPLETED, JobState.FAILED):
        return True
    return (
        job.state is not JobState.CANCELLED
        and job.started_at is not None
        and job.finished_at is not None
    )


def horizon(jobs: Iterable[Job], workers: Iterable[Worker]) -> float:
    """The last instant any record mentions: where still-open intervals end by default."""
    last = -np.inf
    for job in jobs:
        for t in (job.submitted_at, job.started_at, job.finished_at):
            if t is not None:
                last = max(last, t)
    for w in workers:
        last = max(last, w.requested_at, *(t.at for t in w.history))
    return float(last) if np.isfinite(last) else 0.0


def elapsed_workload_time(jobs: Sequence[Job]) -> float | None:
    """From the first submission to the last completion; None if no job has finished."""
    done = [j.finished_at for j in jobs if job_done(j) and j.finished_at is not None]
    if not done:
        return None
    return max(done) - min(j.submitted_at for j in jobs)


def queue_waits(jobs: Iterable[Job]) -> dict[str, float]:
    """Seconds each started job waited between its submission and its start."""
    return {j.id: j.started_at - j.submitted_at for j in jobs if j.started_at is not None}


def reactivity_groups(
    jobs: Sequence[Job], tolerance: float = 1.0, scale: float = 1.0
) -> list[JobGroup]:
    """Group jobs submitted together and time how long the last of each took to start.

    Scanning in submission order, a job joins the current group when it was submitted
    within ``tolerance`` seconds (input clock) of the group's first job, else it opens
    a new group. ``scale`` multiplies the reactivity times.
    """
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0 seconds, got {tolerance}")
    ordered = sorted(jobs, key=lambda j: j.submitted_at)
    buckets: list[list[Job]] = []
    for job in ordered:
        if buckets and job.submitted_at - buckets[-1][0].submitted_at <= tolerance:
            buckets[-1].append(job)
        else:
            buckets.append([job])
    groups = []
    for bucket in buckets:
        first = bucket[0].submitted_at
        starts = [j.started_at for j in bucket]
        if any(s is None for s in starts):
            groups.append(JobGroup(first, len(bucket), None, None))
        else:
            last = max(s for s in starts if s is not None)
            groups.append(JobGroup(first, len(bucket), last, (last - first) * scale))
    return groups


def _first(worker: Worker, wanted: Iterable[WorkerState]) -> tuple[float, str] | None:
    """When and why ``worker`` first entered one of ``wanted``, from its history."""
    states = set(wanted)
    for t in worker.history:
        if t.to_state in states:
            return t.at, str(t.cause)
    return None


def _end(worker: Worker) -> tuple[float | None, str | None]:
    """When the worker stopped costing money (None while live) and why."""
    final = _first(worker, (WorkerState.TERMINATED, WorkerState.FAILED))
    if final is not None:
        return max(final[0], worker.requested_at), final[1]
    if worker.state.final:
        return max(worker.state_since, worker.requested_at), None
    return None, None


def _joined(worker: Worker) -> float | None:
    joined = _first(worker, (WorkerState.IDLE, WorkerState.BUSY))
    return joined[0] if joined is not None else worker.joined_at


def _union_length(intervals: Iterable[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of half-open intervals, clipped to ``[lo, hi)``."""
    total = 0.0
    covered = lo  # everything before this instant is already counted (or out of range)
    for a, b in sorted(intervals):
        a, b = max(a, covered), min(b, hi)
        if b > a:
            total += b - a
            covered = b
    return total


def _cloud_map(clouds: Mapping[str, CloudSpec] | Iterable[CloudSpec]) -> Mapping[str, CloudSpec]:
    if isinstance(clouds, Mapping):
        return clouds
    return {c.name: c for c in clouds}


def worker_usage(
    workers: Sequence[Worker],
    jobs: Sequence[Job],
    clouds: Mapping[str, CloudSpec] | Iterable[CloudSpec],
    *,
    until: float | None = None,
    scale: float = 1.0,
) -> list[WorkerUsage]:
    """Active, busy and overhead time and money of each worker, in the order given.

    Still-live workers and still-running jobs count up to ``until`` (default: the last
    instant any record mentions). Cost is billed on the scaled active time.
    """
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    specs = _cloud_map(clouds)
    stop = horizon(jobs, workers) if until is None else until
    by_node: dict[str, list[tuple[float, float]]] = {}
    for job in jobs:
        if job.started_at is not None and job.node is not None:
            end = job.finished_at if job.finished_at is not None else stop
            by_node.setdefault(job.node, []).append((job.started_at, end))
    usages = []
    for w in workers:
        spec = specs.get(w.cloud)
        if spec is None:
            known = ", ".join(sorted(specs)) or "none"
            raise ValueError(
                f"worker {w.id} names cloud {w.cloud!r}, which is not among the clouds "
                f"given (known: {known})"
            )
        ended_at, cause = _end(w)
        end = ended_at if ended_at is not None else max(stop, w.requested_at)
        active = end - w.requested_at
        busy = _union_length(by_node.get(w.node or w.id, ()), w.requested_at, end)
        usages.append(
            WorkerUsage(
                id=w.id,
                cloud=w.cloud,
                vm_type=w.vm_type,
                requested_at=w.requested_at,
                joined_at=_joined(w),
                ended_at=ended_at,
                state=w.state,
                active=active * scale,
                busy=busy * scale,
                overhead=(active - busy) * scale,
                cost=billed_cost(active * scale, spec.price_per_hour, spec.billing_increment),
                end_cause=cause,
            )
        )
    return usages


def timeline(
    jobs: Sequence[Job], workers: Sequence[Worker], until: float | None = None
) -> Timeline:
    """Queued, running, live and joined counts after every event, exactly, in time order.

    Events after ``until`` are left out and, when ``until`` lies past the last event,
    a last point at ``until`` carries the final counts to it.
    """
    # Each event is (time, column, delta) over columns queued, running, live, joined.
    events: list[tuple[float, int, int]] = []
    for job in jobs:
        events.append((job.submitted_at, 0, 1))
        if job.started_at is not None:
            events += [(job.started_at, 0, -1), (job.started_at, 1, 1)]
            if job.finished_at is not None:
                events.append((job.finished_at, 1, -1))
        elif job.finished_at is not None:  # left the queue without running (cancelled)
            events.append((job.finished_at, 0, -1))
    for w in workers:
        ended_at, _ = _end(w)
        joined_at = _joined(w)
        events.append((w.requested_at, 2, 1))
        if ended_at is not None:
            events.append((ended_at, 2, -1))
        if joined_at is not None and (ended_at is None or joined_at < ended_at):
            events.append((joined_at, 3, 1))
            if ended_at is not None:
                events.append((ended_at, 3, -1))
    if until is not None:
        events = [e for e in events if e[0] <= until]
    starts = [j.submitted_at for j in jobs] or [w.requested_at for w in workers] or [0.0]
    origin = float(min(starts))
    if not events:
        empty_t = np.array([] if until is None else [until], dtype=np.float64)
        zeros = np.zeros(len(empty_t), dtype=np.int64)
        return Timeline(origin, empty_t, zeros, zeros.copy(), zeros.copy(), zeros.copy())
    times = np.array([e[0] for e in events], dtype=np.float64)
    unique, index = np.unique(times, return_inverse=True)
    deltas = np.zeros((len(unique), 4), dtype=np.int64)
    columns = np.array([e[1] for e in events], dtype=np.intp)
    np.add.at(deltas, (index, columns), np.array([e[2] for e in events], dtype=np.int64))
    counts = np.cumsum(deltas, axis=0)
    if until is not None and until > unique[-1]:
        unique = np.append(unique, until)
        counts = np.vstack([counts, counts[-1]])
    queued, running, live, joined = (counts[:, i].copy() for i in range(4))
    return Timeline(origin, unique, queued, running, live, joined)


def _stats(values: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    if not values:
        return None, None, None
    return statistics.fmean(values), statistics.median(values), max(values)


def workload_metrics(
    jobs: Sequence[Job],
    workers: Sequence[Worker],
    clouds: Mapping[str, CloudSpec] | Iterable[CloudSpec],
    *,
    until: float | None = None,
    scale: float = 1.0,
    tolerance: float = 1.0,
) -> WorkloadMetrics:
    """Every summary figure of a run from its job and worker records.

    ``until`` closes still-open intervals (default: the last instant any record
    mentions); ``scale`` multiplies every duration, and money and worker-hours are
    computed on the scaled durations; ``tolerance`` groups submissions for reactivity.
    """
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    stop = horizon(jobs, workers) if until is None else until
    usage = worker_usage(workers, jobs, clouds, until=stop, scale=scale)
    waits = {k: v * scale for k, v in queue_waits(jobs).items()}
    mean, median, worst = _stats(list(waits.values()))
    groups = tuple(reactivity_groups(jobs, tolerance, scale))
    reactions = [g.reactivity for g in groups if g.reactivity is not None]
    elapsed = elapsed_workload_time(jobs)
    failed: dict[str, int] = {}
    for w in workers:
        hit = _first(w, (WorkerState.FAILED,))
        if hit is None and w.state is WorkerState.FAILED:
            hit = (w.state_since, "unknown")  # no history kept: the cause is lost
        if hit is not None:
            failed[hit[1]] = failed.get(hit[1], 0) + 1
    by_cloud: dict[str, float] = {}
    for u in usage:
        by_cloud[u.cloud] = by_cloud.get(u.cloud, 0.0) + u.cost
    live = timeline(jobs, workers, until=stop).live_workers
    done = sum(1 for j in jobs if job_done(j))
    active_total = sum(u.active for u in usage)
    return WorkloadMetrics(
        scale=scale,
        jobs_total=len(jobs),
        jobs_done=done,
        jobs_not_done=len(jobs) - done,
        elapsed=None if elapsed is None else elapsed * scale,
        queue_waits=waits,
        wait_mean=mean,
        wait_median=median,
        wait_max=worst,
        groups=groups,
        reactivity_max=max(reactions) if reactions else None,
        workers=tuple(usage),
        workers_launched=len(workers),
        workers_failed=sum(failed.values()),
        failed_by_cause=failed,
        peak_workers=int(live.max()) if len(live) else 0,
        active_total=active_total,
        busy_total=sum(u.busy for u in usage),
        overhead_total=sum(u.overhead for u in usage),
        worker_hours=active_total / 3600.0,
        cost_total=sum(by_cloud.values()),
        cost_by_cloud=by_cloud,
    )
