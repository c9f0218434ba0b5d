"""The manager on the embedded site, end to end: real worker processes run real jobs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from elasticsite.batch.base import JobRequest
from elasticsite.clouds.base import InstanceState
from elasticsite.manager.report import StepReport
from elasticsite.model import Cause, JobState, WorkerState

from .conftest import Running, fast_cloud, wait_for

POLICIES = ["on_demand", "steady_stream", "bursts", "core_demand", "dedicated"]


def all_done(r: Running, n: int) -> bool:
    return r.site.batch.counts().get("completed", 0) == n


def live_workers(r: Running) -> int:
    return sum(1 for rec in r.site.store.load() if rec.worker.state.live)


@pytest.mark.parametrize("policy", POLICIES)
def test_policy_runs_a_workload_end_to_end(policy: str, start_site: Callable[..., Running]) -> None:
    extra = {}
    if policy == "steady_stream":
        # Waste time 0.6 s: 5x = 3 s of queued walltime makes it grow.
        extra = {"settings": {"steady_up_factor": 5.0, "steady_down_factor": 3.0}}
    r = start_site(policy, **extra)
    ids = r.submit(0.4, n=6, walltime=3.0)
    wait_for(lambda: all_done(r, 6), 60, "all 6 jobs to finish")
    if policy in ("on_demand", "bursts", "core_demand"):
        # Elastic policies give every worker back once the queue is empty.
        wait_for(lambda: live_workers(r) == 0, 30, "idle workers to be released")
    r.stop()

    jobs = {j.id: j for j in r.site.batch.jobs()}
    assert all(jobs[i].state is JobState.DONE and jobs[i].exit_code == 0 for i in ids)
    records = r.site.store.load(include_done=True, history=True)
    assert records, "no worker was launched"
    for rec in records:
        w = rec.worker
        assert w.state is WorkerState.TERMINATED, (w.id, w.state)
        path = [t.to_state for t in w.history]
        assert path[0] is WorkerState.REQUESTED and path[-1] is WorkerState.TERMINATED
        assert WorkerState.BOOTING in path
        if WorkerState.IDLE in path or WorkerState.BUSY in path:
            assert WorkerState.DRAINING in path, (w.id, path)  # joined: drained first
        else:  # still booting when the site stopped: given back at once, never joined
            assert w.history[-2].cause == Cause.SHUTDOWN, (w.id, w.history)
        times = [t.at for t in w.history]
        assert times == sorted(times)
    ran_on = {jobs[i].node for i in ids}
    assert ran_on <= {rec.worker.node for rec in records}
    cloud = r.site.clouds["local"]
    assert all(i.state is InstanceState.TERMINATED for i in cloud.describe())
    if policy == "dedicated":
        assert len(records) == 2
    if policy == "on_demand":
        assert len(records) == 4  # one per queued job, capped by max_instances


def test_scale_down_never_kills_a_running_job(start_site: Callable[..., Running]) -> None:
    r = start_site("on_demand")
    long_job = r.submit(3.0, walltime=20.0)[0]
    short = r.submit(0.2, n=3, walltime=5.0)
    wait_for(
        lambda: all(r.site.batch.job(j).state is JobState.DONE for j in short), 30, "short jobs"
    )
    # The queue is empty now: idle workers go, the busy one must stay until its job ends.
    wait_for(lambda: r.site.batch.job(long_job).state is JobState.DONE, 30, "the long job")
    wait_for(lambda: live_workers(r) == 0, 30, "every worker to be released")
    r.stop()
    job = r.site.batch.job(long_job)
    assert job.exit_code == 0 and job.finished_at is not None
    history = r.site.store.transitions()
    ends = [t for t in history if t.worker_id == job.node and t.to_state is WorkerState.TERMINATING]
    assert len(ends) == 1 and ends[0].at >= job.finished_at
    drains = [t for t in history if t.to_state is WorkerState.DRAINING]
    assert drains and all(t.cause in (Cause.IDLE, "idle") for t in drains)


def test_drain_on_shutdown_lets_running_jobs_finish(start_site: Callable[..., Running]) -> None:
    r = start_site("on_demand")
    job_id = r.submit(1.5, walltime=20.0)[0]
    wait_for(lambda: r.site.batch.job(job_id).state is JobState.RUNNING, 30, "the job to start")
    r.stop()  # on_shutdown = drain: the busy worker is drained, not killed
    job = r.site.batch.job(job_id)
    assert job.state is JobState.DONE and job.exit_code == 0
    assert live_workers(r) == 0


def test_stalled_worker_is_terminated_and_replaced(start_site: Callable[..., Running]) -> None:
    clouds = [
        fast_cloud("flaky", 1, fail_boot=1.0, seed=3),  # cheapest, but never joins
        fast_cloud("good", 2, price=1.0, seed=4),
    ]
    r = start_site("on_demand", clouds=clouds, manager={"stall_timeout": 1.5})
    # The jobs run until the gate exists, so work outlasts the stall timeout however
    # fast or slow the machine, and the stalled worker is replaced.
    gate = r.site.state_dir / "gate"
    job = ["sh", "-c", 'while [ ! -e "$1" ]; do sleep 0.1; done', "job", str(gate)]
    ids = [r.site.batch.submit(JobRequest(job, 1, 300.0)) for _ in range(8)]
    # The stalled worker's slot is refilled once its instance is gone (a stalled
    # instance holds its cloud's quota until then).
    wait_for(
        lambda: (
            len(
                {
                    t.worker_id
                    for t in r.site.store.transitions()
                    if t.worker_id.startswith("flaky-")
                }
            )
            >= 2
        ),
        60,
        "a replacement on the flaky cloud",
    )
    gate.touch()
    wait_for(lambda: all_done(r, 8), 60, "jobs to finish on the good cloud")
    r.stop()
    history = r.site.store.transitions()
    stalled = [t for t in history if t.to_state is WorkerState.FAILED and t.cause == Cause.STALLED]
    assert stalled and all(t.worker_id.startswith("flaky-") for t in stalled)
    # Every stalled worker's instance was given back to its cloud.
    flaky = {i.name: i for i in r.site.clouds["flaky"].describe()}
    for t in stalled:
        assert flaky[t.worker_id].state is InstanceState.TERMINATED
    assert {r.site.batch.job(j).node for j in ids} <= {
        rec.worker.node
        for rec in r.site.store.load(include_done=True)
        if rec.worker.cloud == "good"
    }
    assert r.site.store.counters().get("launched", 0) >= 3


def test_launch_errors_are_retried_with_backoff_then_given_up(
    start_site: Callable[..., Running],
) -> None:
    clouds = [fast_cloud("broken", 1, fail_launch=1.0, seed=1)]
    r = start_site(
        "dedicated",
        clouds=clouds,
        settings={"dedicated_workers": 1},
        manager={"max_attempts": 3, "retry_backoff": 0.3},
    )
    wait_for(
        lambda: any(t.cause == Cause.LAUNCH_ERROR for t in r.site.store.transitions()),
        30,
        "the first worker to be given up",
    )
    r.stop()
    first = r.site.store.load(include_done=True)[0]
    assert first.worker.state is WorkerState.FAILED
    assert first.attempts == 3 and "injected API error" in first.last_error
    # Three tries, 0.3 s then 0.6 s apart: given up no sooner than 0.9 s after the request.
    failed_at = next(
        t.at for t in r.site.store.transitions(first.worker.id) if t.cause == Cause.LAUNCH_ERROR
    )
    assert failed_at - first.worker.requested_at >= 0.9
    assert r.site.store.counters()["launch_errors"] >= 3
    assert r.site.clouds["broken"].describe() == []


def test_flaky_cloud_api_still_gets_every_job_done(start_site: Callable[..., Running]) -> None:
    clouds = [fast_cloud("flaky", 3, fail_launch=0.5, seed=5)]
    r = start_site("on_demand", clouds=clouds, manager={"retry_backoff": 0.1, "max_attempts": 10})
    r.submit(0.3, n=5, walltime=5.0)
    wait_for(lambda: all_done(r, 5), 60, "every job despite launch errors")
    wait_for(lambda: live_workers(r) == 0, 30, "workers to be released")
    r.stop()
    assert r.site.store.counters().get("launch_errors", 0) >= 1


def test_a_slow_cloud_never_blocks_the_loop(start_site: Callable[..., Running]) -> None:
    delay = 6.0
    clouds = [fast_cloud("slow", 3, api_delay=delay, seed=2)]
    r = start_site("on_demand", run=False, clouds=clouds)
    reports: list[StepReport] = []
    r.thread = threading.Thread(target=r.manager.run, kwargs={"on_step": reports.append})
    r.submit(0.3, n=3, walltime=5.0)
    r.thread.start()
    wait_for(lambda: all_done(r, 3), 120, "jobs to finish despite a 6 s cloud API")
    launch_at = next(x.at for x in reports if x.decision.launch)
    # No launch can answer before its call's delay is over: the loop went on stepping
    # (every 0.2 s when the machine keeps up) while the three launches were in flight.
    # A loop that waited on them would have taken one step at most.
    during = [x for x in reports if launch_at < x.at < launch_at + delay * 0.9]
    assert len(during) >= 3, [x.at - launch_at for x in reports[:12]]
    wait_for(lambda: live_workers(r) == 0, 30, "workers to be released")
    r.stop()


def test_an_unexpected_error_does_not_kill_the_loop(start_site: Callable[..., Running]) -> None:
    r = start_site("on_demand", run=False)
    real = r.site.batch.snapshot
    calls = 0

    def snapshot_failing_twice() -> object:
        nonlocal calls
        calls += 1
        if calls in (2, 3):
            raise RuntimeError("disk hiccup")
        return real()

    r.site.batch.snapshot = snapshot_failing_twice  # type: ignore[method-assign]
    r.thread.start()
    r.submit(0.2, n=2, walltime=5.0)
    wait_for(lambda: all_done(r, 2), 30, "jobs to finish after the errors")

    def joined() -> bool:
        workers = [rec.worker for rec in r.site.store.load(include_done=True)]
        return bool(workers) and all(w.joined_at is not None for w in workers)

    # What the launches answered during the failed iterations was not lost: the workers
    # went on to boot and join (they were left "requested" when it was). The jobs can end
    # before the manager's next step sees the join, so wait for the step, not the jobs.
    wait_for(joined, 30, "every worker to be seen joined")
    r.stop()
    assert r.site.store.counters()["loop_errors"] == 2


def test_second_stop_cuts_a_draining_shutdown_short(start_site: Callable[..., Running]) -> None:
    r = start_site("on_demand")
    job = r.submit(30.0, walltime=60.0)[0]
    wait_for(lambda: r.site.batch.job(job).state is JobState.RUNNING, 30, "the job to start")
    r.manager.stop()  # drain: would wait 30 s for the job
    time.sleep(0.5)
    r.manager.stop()  # again: leave the rest for the next start
    r.thread.join(5)
    assert not r.thread.is_alive()
    # The busy worker was left draining, its job untouched, for the next start to adopt.
    assert [rec.worker.state for rec in r.site.store.load()] == [WorkerState.DRAINING]
    assert r.site.batch.job(job).state is JobState.RUNNING
