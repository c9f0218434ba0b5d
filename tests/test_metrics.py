"""Hand-worked examples for every workload metric and for the exact timeline."""

from __future__ import annotations

import pytest

from elasticsite.metrics import (
    elapsed_workload_time,
    queue_waits,
    reactivity_groups,
    timeline,
    worker_usage,
    workload_metrics,
)
from elasticsite.model import Cause, CloudSpec, Job, JobState, Worker, WorkerState

S = WorkerState
FREE = CloudSpec("free", billing_increment=1.0, price_per_hour=0.0)
HOURLY = CloudSpec("hourly", price_per_hour=1.0, billing_increment=3600.0)
PER_SECOND = CloudSpec("persec", price_per_hour=3.6, billing_increment=1.0)
CLOUDS = {c.name: c for c in (FREE, HOURLY, PER_SECOND)}


def worker(
    wid: str,
    requested: float,
    *moves: tuple[WorkerState, float] | tuple[WorkerState, float, Cause],
    cloud: str = "free",
    node: str | None = None,
) -> Worker:
    """A worker taken through ``moves`` by its own state machine."""
    w = Worker(wid, cloud, "small", 1, requested_at=requested, node=node)
    for move in moves:
        state, at = move[0], move[1]
        cause = move[2] if len(move) == 3 else Cause.OPERATOR
        w.transition(state, at, cause)
    return w


def one_stint(
    wid: str,
    boot: float,
    busy: float,
    idle: float,
    release: float,
    gone: float,
    cause: Cause = Cause.OPERATOR,
) -> Worker:
    """A worker requested at 0 that boots from ``boot``, joins and takes work at ``busy``,
    is idle from ``idle``, is released at ``release`` and gone at ``gone`` for ``cause``."""
    return worker(
        wid, 0.0, (S.BOOTING, boot), (S.IDLE, busy), (S.BUSY, busy), (S.IDLE, idle),
        (S.TERMINATING, release), (S.TERMINATED, gone, cause),
    )  # fmt: skip


def job(
    jid: str,
    submitted: float,
    started: float | None = None,
    finished: float | None = None,
    node: str | None = None,
) -> Job:
    state = JobState.QUEUED
    if started is not None:
        state = JobState.RUNNING if finished is None else JobState.DONE
    return Job(
        jid,
        cores=1,
        walltime=600.0,
        submitted_at=submitted,
        state=state,
        started_at=started,
        finished_at=finished,
        node=node,
        exit_code=0 if finished is not None else None,
    )


def two_workers_three_jobs() -> tuple[list[Job], list[Worker]]:
    """Worker a boots 0-60, runs overlapping j1 [60,160) and j2 [100,180), shuts down
    200-206; worker b boots 0-90, runs j3 [90,130), shuts down 300-310."""
    a = one_stint("a", 10.0, 60.0, 180.0, 200.0, 206.0, Cause.CLOUD_REPORTED)
    b = one_stint("b", 5.0, 90.0, 130.0, 300.0, 310.0)
    jobs = [
        job("j1", 5.0, 60.0, 160.0, "a"),
        job("j2", 10.0, 100.0, 180.0, "a"),
        job("j3", 5.0, 90.0, 130.0, "b"),
        job("static", 5.0, 6.0, 7.0, "headnode"),  # not a cloud worker: counts for no one
    ]
    return jobs, [a, b]


def test_overhead_is_active_time_minus_union_of_job_intervals() -> None:
    jobs, workers = two_workers_three_jobs()
    a, b = worker_usage(workers, jobs, CLOUDS)
    assert (a.active, a.busy, a.overhead) == (206.0, 120.0, 86.0)
    assert (b.active, b.busy, b.overhead) == (310.0, 40.0, 270.0)
    assert a.joined_at == 60.0 and a.ended_at == 206.0 and a.end_cause == "cloud-reported"
    m = workload_metrics(jobs, workers, CLOUDS)
    assert m.overhead_total == 356.0
    assert m.busy_total == 160.0
    assert m.active_total == 516.0
    assert m.worker_hours == pytest.approx(516.0 / 3600.0)


def test_jobs_are_clipped_to_the_workers_life() -> None:
    # The node name outlives the worker: a job there before or after it is not its work.
    w = worker("w", 100.0, (S.IDLE, 110.0), (S.TERMINATING, 190.0), (S.TERMINATED, 200.0))
    jobs = [job("before", 0.0, 50.0, 120.0, "w"), job("after", 0.0, 150.0, 400.0, "w")]
    (u,) = worker_usage([w], jobs, CLOUDS)
    assert (u.active, u.busy, u.overhead) == (100.0, 70.0, 30.0)


def test_live_worker_and_running_job_count_until_the_horizon() -> None:
    w = worker("w", 0.0, (S.BOOTING, 1.0), (S.IDLE, 30.0), (S.BUSY, 40.0))
    jobs = [job("j", 0.0, 40.0, None, "w")]
    (u,) = worker_usage([w], jobs, CLOUDS, until=100.0)
    assert (u.active, u.busy, u.overhead, u.ended_at) == (100.0, 60.0, 40.0, None)
    # Without ``until`` the last instant any record mentions closes the intervals.
    (u,) = worker_usage([w], jobs, CLOUDS)
    assert (u.active, u.busy, u.overhead) == (40.0, 0.0, 40.0)


def test_failed_worker_stops_costing_at_failure_and_is_counted_by_cause() -> None:
    stalled = worker("s", 0.0, (S.BOOTING, 5.0), (S.FAILED, 50.0, Cause.STALLED))
    refused = worker("r", 0.0, (S.FAILED, 2.0, Cause.LAUNCH_ERROR))
    lost = worker("l", 0.0, (S.IDLE, 10.0), (S.FAILED, 20.0, Cause.LOST))
    fine = worker("f", 0.0, (S.IDLE, 10.0), (S.TERMINATING, 20.0), (S.TERMINATED, 21.0))
    m = workload_metrics([], [stalled, refused, lost, fine], CLOUDS)
    assert [u.active for u in m.workers] == [50.0, 2.0, 20.0, 21.0]
    assert m.workers[0].end_cause == "stalled"
    assert m.workers_launched == 4
    assert m.workers_failed == 3
    assert dict(m.failed_by_cause) == {"stalled": 1, "launch-error": 1, "lost": 1}
    assert m.jobs_total == 0 and m.elapsed is None and m.wait_mean is None


def test_hourly_billing_rounds_61_minutes_up_to_two_hours() -> None:
    w = worker("h", 0.0, (S.IDLE, 60.0), (S.TERMINATING, 3600.0), (S.TERMINATED, 3660.0))
    w.cloud = "hourly"
    m = workload_metrics([], [w], CLOUDS)
    assert m.cost_total == pytest.approx(2.0)
    assert m.worker_hours == pytest.approx(3660.0 / 3600.0)


def test_per_second_billing_charges_exactly_the_time_used() -> None:
    w = worker(
        "p",
        0.0,
        (S.IDLE, 60.0),
        (S.TERMINATING, 3600.0),
        (S.TERMINATED, 3660.0),
        cloud="persec",
    )
    m = workload_metrics([], [w], CLOUDS)
    assert m.cost_total == pytest.approx(3.66)


def test_cost_is_summed_per_cloud() -> None:
    h1 = worker("h1", 0.0, (S.IDLE, 1.0), (S.TERMINATING, 10.0), (S.TERMINATED, 11.0))
    h2 = worker("h2", 0.0, (S.IDLE, 1.0), (S.TERMINATING, 4000.0), (S.TERMINATED, 4001.0))
    p = worker("p", 0.0, (S.IDLE, 1.0), (S.TERMINATING, 99.0), (S.TERMINATED, 100.0))
    h1.cloud = h2.cloud = "hourly"
    p.cloud = "persec"
    m = workload_metrics([], [h1, h2, p], CLOUDS)
    assert dict(m.cost_by_cloud) == pytest.approx({"hourly": 3.0, "persec": 0.1})
    assert m.cost_total == pytest.approx(3.1)


def test_unknown_cloud_is_named_in_the_error() -> None:
    w = worker("x", 0.0, cloud="nowhere")
    with pytest.raises(ValueError, match=r"worker x names cloud 'nowhere'.*known: free"):
        workload_metrics([], [w], CLOUDS)


def test_clouds_may_be_given_as_a_sequence() -> None:
    jobs, workers = two_workers_three_jobs()
    by_seq = workload_metrics(jobs, workers, list(CLOUDS.values()))
    assert by_seq.overhead_total == 356.0


def test_elapsed_workload_time_and_queue_waits() -> None:
    jobs, workers = two_workers_three_jobs()
    assert elapsed_workload_time(jobs) == 175.0  # first arrival 5, last completion 180
    assert queue_waits(jobs) == {"j1": 55.0, "j2": 90.0, "j3": 85.0, "static": 1.0}
    m = workload_metrics(jobs, workers, CLOUDS)
    assert m.elapsed == 175.0
    assert m.wait_mean == pytest.approx((55 + 90 + 85 + 1) / 4)
    assert m.wait_median == 70.0
    assert m.wait_max == 90.0
    assert (m.jobs_done, m.jobs_not_done) == (4, 0)


def test_elapsed_is_none_until_a_job_finishes_and_unfinished_jobs_count_as_not_done() -> None:
    jobs = [job("q", 0.0), job("r", 1.0, 5.0)]
    assert elapsed_workload_time(jobs) is None
    m = workload_metrics(jobs, [], CLOUDS)
    assert (m.jobs_done, m.jobs_not_done) == (0, 2)
    assert m.queue_waits == {"r": 4.0}
    cancelled = Job("c", 1, 60.0, 0.0, state=JobState.CANCELLED, finished_at=3.0)
    assert workload_metrics([cancelled], [], CLOUDS).jobs_done == 0


def test_reactivity_per_submission_group() -> None:
    jobs = [
        job("a1", 0.0, 10.0),
        job("a2", 0.5, 40.0),
        job("a3", 0.9, 25.0),
        job("b1", 1.5, 100.0),  # 1.5 s after the first group's start: a new group
        job("b2", 2.4, 70.0),  # within 1 s of b1, though 2.4 s after a1
    ]
    groups = reactivity_groups(jobs)
    assert [(g.first_submitted_at, g.size, g.reactivity) for g in groups] == [
        (0.0, 3, 40.0),
        (1.5, 2, 98.5),
    ]
    m = workload_metrics(jobs, [], CLOUDS)
    assert m.reactivity_max == 98.5


def test_reactivity_groups_are_anchored_on_their_first_job() -> None:
    # 0.9 s apart each, but the third is 1.8 s after the group's first: no chaining.
    jobs = [job("x", 0.0, 5.0), job("y", 0.9, 5.0), job("z", 1.8, 9.0)]
    assert [g.size for g in reactivity_groups(jobs)] == [2, 1]
    assert [g.size for g in reactivity_groups(jobs, tolerance=2.0)] == [3]


def test_group_with_an_unstarted_job_has_no_reactivity_yet() -> None:
    jobs = [job("a", 0.0, 5.0), job("b", 100.0, 130.0), job("c", 100.0)]
    groups = reactivity_groups(jobs)
    assert [g.reactivity for g in groups] == [5.0, None]
    assert workload_metrics(jobs, [], CLOUDS).reactivity_max == 5.0


def test_scale_multiplies_every_duration_and_bills_scaled_time() -> None:
    jobs, workers = two_workers_three_jobs()
    h = worker("h", 0.0, (S.IDLE, 6.0), (S.TERMINATING, 360.0), (S.TERMINATED, 366.0))
    h.cloud = "hourly"
    workers.append(h)
    jobs.append(job("j4", 5.0, 7.0, 8.0, "h"))
    one = workload_metrics(jobs, workers, CLOUDS)
    ten = workload_metrics(jobs, workers, CLOUDS, scale=10.0)
    for field in (
        "elapsed",
        "wait_mean",
        "wait_median",
        "wait_max",
        "reactivity_max",
        "active_total",
        "busy_total",
        "overhead_total",
        "worker_hours",
    ):
        assert getattr(ten, field) == pytest.approx(10 * getattr(one, field)), field
    assert ten.queue_waits["j1"] == 550.0
    assert ten.workers[0].overhead == 860.0
    assert ten.groups[0].reactivity == pytest.approx(10 * one.groups[0].reactivity)
    # 366 s bills one hour; 3660 s (the same run at ten times speed) bills two.
    assert one.cost_by_cloud["hourly"] == pytest.approx(1.0)
    assert ten.cost_by_cloud["hourly"] == pytest.approx(2.0)
    assert (ten.peak_workers, ten.jobs_done) == (one.peak_workers, one.jobs_done)
    with pytest.raises(ValueError, match="scale"):
        workload_metrics(jobs, workers, CLOUDS, scale=0.0)


def test_peak_workers_counts_only_overlapping_lives() -> None:
    jobs, workers = two_workers_three_jobs()
    assert workload_metrics(jobs, workers, CLOUDS).peak_workers == 2
    # One worker requested the instant another ends: never two at once.
    first = worker("1", 0.0, (S.IDLE, 5.0), (S.TERMINATING, 9.0), (S.TERMINATED, 10.0))
    second = worker("2", 10.0, (S.IDLE, 15.0))
    assert workload_metrics([], [first, second], CLOUDS, until=20.0).peak_workers == 1


def test_timeline_on_a_tiny_case() -> None:
    j = job("j", 0.0, 10.0, 20.0, "w")
    w = one_stint("w", 2.0, 10.0, 20.0, 25.0, 30.0)
    late = job("late", 12.0)
    tl = timeline([j, late], [w])
    assert tl.origin == 0.0
    assert tl.time.tolist() == [0.0, 10.0, 12.0, 20.0, 30.0]
    assert tl.queued.tolist() == [1, 0, 1, 1, 1]
    assert tl.running.tolist() == [0, 1, 1, 0, 0]
    assert tl.live_workers.tolist() == [1, 1, 1, 1, 0]
    assert tl.joined_workers.tolist() == [0, 1, 1, 1, 0]
    assert tl.relative(2.0).tolist() == [0.0, 20.0, 24.0, 40.0, 60.0]

    cut = timeline([j, late], [w], until=15.0)
    assert cut.time.tolist() == [0.0, 10.0, 12.0, 15.0]
    assert cut.queued.tolist() == [1, 0, 1, 1]
    assert cut.live_workers.tolist() == [1, 1, 1, 1]


def test_timeline_counts_a_cancelled_job_out_of_the_queue_and_ignores_unjoined_workers() -> None:
    cancelled = Job("c", 1, 60.0, 5.0, state=JobState.CANCELLED, finished_at=8.0)
    never_joined = worker("n", 3.0, (S.BOOTING, 4.0), (S.FAILED, 9.0, Cause.STALLED))
    tl = timeline([cancelled], [never_joined])
    assert tl.origin == 5.0
    assert tl.time.tolist() == [3.0, 5.0, 8.0, 9.0]
    assert tl.queued.tolist() == [0, 1, 0, 0]
    assert tl.live_workers.tolist() == [1, 1, 1, 0]
    assert tl.joined_workers.tolist() == [0, 0, 0, 0]
    assert len(timeline([], [])) == 0


def test_to_rows_lists_every_figure_with_its_unit() -> None:
    jobs, workers = two_workers_three_jobs()
    workers.append(worker("f", 0.0, (S.FAILED, 1.0, Cause.LAUNCH_ERROR)))
    rows = workload_metrics(jobs, workers, CLOUDS).to_rows()
    table = {label: (value, unit) for label, value, unit in rows}
    assert table["elapsed workload time"] == (175.0, "s")
    assert table["overhead"] == (357.0, "s")
    assert table["workers launched"] == (3, "workers")
    assert table["workers failed: launch-error"] == (1, "workers")
    assert table["peak workers"] == (3, "workers")
    assert table["cost: free"] == (0.0, "money")
    assert table["reactivity time max"][1] == "s"
    assert all(len(row) == 3 for row in rows)
