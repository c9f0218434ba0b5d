"""The worker state machine and the small rules of the shared model."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elasticsite.model import (
    ALLOWED_TRANSITIONS,
    Cause,
    CloudSpec,
    InvalidTransition,
    Job,
    Worker,
    WorkerState,
    billed_cost,
)
from elasticsite.snapshot import SiteSnapshot

S = WorkerState


def test_happy_path_is_timestamped_with_causes() -> None:
    w = Worker("w1", "c", "small", 1, requested_at=10.0)
    steps = [
        (S.BOOTING, 11.0, Cause.BOOTED),
        (S.IDLE, 70.0, Cause.JOINED),
        (S.BUSY, 71.0, Cause.JOB_STARTED),
        (S.IDLE, 131.0, Cause.JOB_FINISHED),
        (S.DRAINING, 140.0, Cause.IDLE),
        (S.TERMINATING, 150.0, Cause.DRAINED),
        (S.TERMINATED, 156.0, Cause.CLOUD_REPORTED),
    ]
    for to, at, cause in steps:
        w.transition(to, at, cause)
    assert [(t.from_state, t.to_state, t.at, t.cause) for t in w.history] == [
        (S.REQUESTED, S.BOOTING, 11.0, Cause.BOOTED),
        (S.BOOTING, S.IDLE, 70.0, Cause.JOINED),
        (S.IDLE, S.BUSY, 71.0, Cause.JOB_STARTED),
        (S.BUSY, S.IDLE, 131.0, Cause.JOB_FINISHED),
        (S.IDLE, S.DRAINING, 140.0, Cause.IDLE),
        (S.DRAINING, S.TERMINATING, 150.0, Cause.DRAINED),
        (S.TERMINATING, S.TERMINATED, 156.0, Cause.CLOUD_REPORTED),
    ]
    assert w.joined_at == 70.0 and w.state_since == 156.0


def test_draining_worker_can_return_to_service() -> None:
    w = Worker("w1", "c", "small", 1, requested_at=0.0, state=S.DRAINING)
    w.transition(S.BUSY, 5.0, Cause.DEMAND_RETURNED)
    assert w.state is S.BUSY


@pytest.mark.parametrize("state", [s for s in S if not s.final])
def test_failed_reachable_from_every_live_state(state: WorkerState) -> None:
    w = Worker("w", "c", "small", 1, requested_at=0.0, state=state)
    w.transition(S.FAILED, 1.0, Cause.LOST)
    assert w.state is S.FAILED


@pytest.mark.parametrize(
    "start,to",
    [
        (S.TERMINATED, S.IDLE),
        (S.FAILED, S.TERMINATED),
        (S.REQUESTED, S.DRAINING),
        (S.TERMINATING, S.IDLE),
        (S.IDLE, S.BOOTING),
        (S.IDLE, S.IDLE),
    ],
)
def test_illegal_moves_are_refused(start: WorkerState, to: WorkerState) -> None:
    w = Worker("w", "c", "small", 1, requested_at=0.0, state=start)
    with pytest.raises(InvalidTransition, match="w"):
        w.transition(to, 1.0, Cause.OPERATOR)
    assert w.state is start and not w.history


@given(st.lists(st.sampled_from(list(S)), max_size=30))
def test_random_walks_only_take_allowed_edges(moves: list[WorkerState]) -> None:
    w = Worker("w", "c", "small", 1, requested_at=0.0)
    t = 0.0
    for to in moves:
        before = w.state
        t += 1.0
        if to in ALLOWED_TRANSITIONS[before]:
            w.transition(to, t, Cause.OPERATOR)
            assert w.state is to
        else:
            with pytest.raises(InvalidTransition):
                w.transition(to, t, Cause.OPERATOR)
            assert w.state is before
    assert all(a.to_state is b.from_state for a, b in zip(w.history, w.history[1:], strict=False))
    if w.state.final:
        assert not ALLOWED_TRANSITIONS[w.state]


def test_waste_time_and_billing() -> None:
    spec = CloudSpec("ec2", boot_time=74.0, shutdown_time=4.0, billing_increment=3600)
    assert spec.waste_time == 78.0 and spec.hourly_billing
    assert billed_cost(3601, 0.10, 3600) == pytest.approx(0.20)
    assert billed_cost(3600, 0.10, 3600) == pytest.approx(0.10)
    assert billed_cost(90, 0.10, 1) == pytest.approx(0.0025)
    assert billed_cost(0, 0.10, 3600) == 0.0


def test_snapshot_aggregates_queue_once() -> None:
    jobs = [Job(str(i), cores=i + 1, walltime=60.0 * (i + 1), submitted_at=0.0) for i in range(4)]
    snap = SiteSnapshot(0.0, jobs, [], [], [CloudSpec("c")])
    assert snap.queued_walltime == 600.0 and snap.queued_cores == 10
    view = snap.with_workers([Worker("w", "c", "small", 1, 0.0)])
    assert view.queued_walltime == 600.0 and len(view.workers) == 1
    with pytest.raises(KeyError, match="no cloud named 'x'"):
        snap.cloud("x")
