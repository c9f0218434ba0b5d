"""The live manager's policies on the virtual clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.model import Cause, WorkerState
from elasticsite.policies import PolicySettings, available, settings_for
from elasticsite.sim.cloud import CloudModel, Durations
from elasticsite.sim.elastic import simulate_elastic
from elasticsite.workloads import get_workload


def cloud(
    limit: int = 10, boot: float = 30.0, shutdown: float = 5.0, billing: float = 3600
) -> CloudModel:
    return CloudModel(
        "c",
        vm_limit=limit,
        boot=Durations.constant(boot),
        shutdown=Durations.constant(shutdown),
        price_per_hour=0.10,
        billing_increment=billing,
    )


def test_two_jobs_on_demand_hand_worked() -> None:
    # t=0: both jobs queued; the first decision launches two workers (one per job).
    # t=30: both join and start their 60 s jobs; t=90: both finish, all work is done,
    # so both are drained; t=100, the next step: the batch system has drained them,
    # so both are terminated, gone at t=105 after the 5 s shutdown (as the live
    # manager does: a drain is a batch command whose outcome the next step settles).
    r = simulate_elastic([(0.0, 1, 60.0, 120.0)] * 2, [cloud()], "on_demand", interval=10.0)
    assert [(j.started_at, j.finished_at) for j in r.jobs] == [(30.0, 90.0), (30.0, 90.0)]
    assert {j.node for j in r.jobs} == {"c-00001", "c-00002"}
    m = r.metrics()
    assert m.elapsed == 90.0 and m.wait_mean == 30.0
    assert m.overhead_total == pytest.approx(2 * (105.0 - 60.0))  # boot 30 + drain 10 + 5
    assert m.cost_total == pytest.approx(0.20)  # two started VM-hours
    assert all(w.state is WorkerState.TERMINATED for w in r.workers)


def test_idle_worker_released_between_bursts_when_billed_by_the_second() -> None:
    # One job, then a second one 200 s later: on demand lets the first worker go in
    # between (drained at the first decision after its job, gone before the next job).
    r = simulate_elastic(
        [(0.0, 1, 60.0, 120.0), (200.0, 1, 60.0, 120.0)], [cloud(billing=1)], "on_demand"
    )
    first, second = r.workers
    causes = [t.cause for t in first.history]
    assert Cause.IDLE in causes and first.history[-1].at < 200.0
    assert second.requested_at == 200.0
    assert r.jobs[1].started_at == 230.0


def test_paid_for_idle_worker_is_kept_for_the_next_burst_on_an_hourly_cloud() -> None:
    # Same jobs on a cloud billing whole hours: the idle worker is already paid until
    # t=3600, so it is kept, and the second job starts at once on it.
    r = simulate_elastic(
        [(0.0, 1, 60.0, 120.0), (200.0, 1, 60.0, 120.0)], [cloud(billing=3600)], "on_demand"
    )
    assert len(r.workers) == 1
    assert r.jobs[1].started_at == 200.0 and r.jobs[1].node == r.jobs[0].node
    assert r.metrics().cost_total == pytest.approx(0.10)


def test_steady_stream_grows_one_at_a_time() -> None:
    arrivals = [(a.at, a.cores, a.runtime, a.walltime) for a in get_workload("workload1")]
    r = simulate_elastic(arrivals, [cloud(boot=60.0, shutdown=6.0)], "steady_stream")
    boots = sorted(w.requested_at for w in r.workers)
    joins = sorted(w.joined_at or 0.0 for w in r.workers)
    # Never a second launch while one is booting: each launch follows the previous join.
    assert all(b >= j for b, j in zip(boots[1:], joins, strict=False))
    assert r.metrics().jobs_done == 20


def test_same_seed_same_run() -> None:
    c = CloudModel("c", vm_limit=8, boot=Durations.uniform(20, 90), shutdown=Durations.constant(3))
    arrivals = [(a.at, a.cores, a.runtime, a.walltime) for a in get_workload("reactivity3")]
    a = simulate_elastic(arrivals, [c], "bursts", seed=3)
    b = simulate_elastic(arrivals, [c], "bursts", seed=3)
    assert [(j.started_at, j.node) for j in a.jobs] == [(j.started_at, j.node) for j in b.jobs]
    assert [w.history for w in a.workers] == [w.history for w in b.workers]


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="job 0: needs cores >= 1"):
        simulate_elastic([(0.0, 0, 1.0, 1.0)], [cloud()])
    with pytest.raises(ValueError, match="at least one cloud"):
        simulate_elastic([(0.0, 1, 1.0, 1.0)], [])
    with pytest.raises(ValueError, match="unknown scheduler"):
        simulate_elastic([(0.0, 1, 1.0, 1.0)], [cloud()], scheduler="sjf")
    with pytest.raises(
        ValueError, match=r"the largest VM of these clouds \(or the site.s node\) has 1"
    ):
        simulate_elastic([(0.0, 2, 1.0, 1.0)], [cloud()])


arrival = st.tuples(
    st.floats(0, 3000, allow_nan=False),
    st.integers(1, 2),
    st.floats(1, 900, allow_nan=False),
    st.floats(60, 1800, allow_nan=False),
)


@settings(max_examples=40, deadline=None)
@given(
    arrivals=st.lists(arrival, min_size=1, max_size=25),
    # cloud_scheduler serves jobs naming a VM type only; these name none (its own tests)
    policy=st.sampled_from(sorted(set(available()) - {"cloud_scheduler"})),
    limit=st.integers(2, 6),
    cores=st.integers(2, 4),
)
def test_every_policy_completes_every_job_within_its_caps(
    arrivals: list[tuple[float, int, float, float]], policy: str, limit: int, cores: int
) -> None:
    c = CloudModel(
        "c",
        vm_limit=limit,
        boot=Durations.uniform(10, 120),
        shutdown=Durations.constant(5),
        cores_per_vm=cores,
    )
    r = simulate_elastic(
        sorted(arrivals), [c], policy, settings_for(policy, dedicated_workers=limit), seed=1
    )
    # Every job ran exactly once, after its submission, for min(runtime, walltime).
    for job in r.jobs:
        assert job.started_at is not None and job.finished_at is not None
        assert job.started_at >= job.submitted_at
        assert job.finished_at - job.started_at == pytest.approx(
            min(job.runtime or 0, job.walltime)
        )
    # No worker ever ran more cores than it has; never more live workers than the limit.
    events = []
    for w in r.workers:
        events.append((w.requested_at, 1))
        events.append((w.history[-1].at, -1))
        assert w.state is WorkerState.TERMINATED
        on = [j for j in r.jobs if j.node == w.id]
        for t in {j.started_at for j in on}:
            assert sum(j.cores for j in on if j.started_at <= t < j.finished_at) <= w.cores
    live = 0
    for _, d in sorted(events, key=lambda e: (e[0], e[1])):
        live += d
        assert live <= limit


def test_warm_up_boots_a_dedicated_pool_before_the_first_job() -> None:
    # Decisions start 50 s early: the pool of two boots in 30 s and is idle at t=0,
    # so both jobs start on arrival.
    r = simulate_elastic(
        [(0.0, 1, 60.0, 120.0)] * 2,
        [cloud()],
        "dedicated",
        settings_for("dedicated", dedicated_workers=2),
        warm_up=50.0,
    )
    assert [j.started_at for j in r.jobs] == [0.0, 0.0]
    assert all(w.requested_at == -50.0 for w in r.workers)
    assert r.metrics().elapsed == 60.0


def test_a_workload_the_policy_can_never_serve_stops_with_a_clear_error() -> None:
    from elasticsite.sim.elastic import SimulationStalled

    with pytest.raises(SimulationStalled, match=r"can never run.*VM type"):
        simulate_elastic([(0.0, 1, 60.0, 120.0)] * 3, [cloud()], "cloud_scheduler")


@settings(max_examples=25, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(st.floats(0, 20_000), st.just(1), st.floats(60, 4 * 3600)),
        min_size=1,
        max_size=12,
    ),
    amount=st.floats(2.5, 6.0),
    billing=st.sampled_from([1.0, 3600.0]),
)
def test_the_simulator_keeps_within_the_budget_as_the_manager(jobs, amount, billing) -> None:
    """The budget is enforced in the decision both drivers share: a simulated site
    spends no more in any period than its budget, however the work arrives."""
    from elasticsite.spend import Budget, cost_between, period_bounds

    arrivals = [(at, cores, run, run * 2) for at, cores, run in jobs]
    budget = Budget(amount, "day")
    result = simulate_elastic(
        arrivals,
        [cloud(limit=8, billing=billing)],
        "on_demand",
        PolicySettings(budget=budget),
        interval=60.0,
    )
    assert all(j.finished_at is not None for j in result.jobs)
    ends = [w.history[-1].at for w in result.workers]
    days = {period_bounds(t, "day") for t in [w.requested_at for w in result.workers] + ends}
    for lo, hi in days:
        spent = sum(
            cost_between(w.requested_at, end, lo, hi, 0.10, billing)
            for w, end in zip(result.workers, ends, strict=True)
        )
        assert spent <= amount + 1e-9, (lo, spent)
