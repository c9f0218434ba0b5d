"""One pool of processors under FCFS, EASY, conservative and selective backfilling.

Hand-worked schedules on a 4-processor pool, then properties on random job
streams: no over-allocation, every job starts exactly once and never before its
submission, and every EASY/FCFS pass equals the pure pass of
:mod:`elasticsite.batch.scheduling` on one node of the same free processors.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.batch import scheduling
from elasticsite.batch.backfill import edf_key
from elasticsite.batch.pools import SCHEDULERS, BackfillPool, EasyPool, Pool, make_pool
from elasticsite.batch.selective import Categories


def test_fcfs_head_blocks_and_easy_backfills_behind_it() -> None:
    for name, expect in (("fcfs", []), ("easy", [2])):
        pool = make_pool(name, 4)
        pool.submit(0, 3, 10.0, 0.0)
        assert pool.start_now(0.0) == [0]
        pool.submit(1, 4, 5.0, 1.0)  # head: waits for job 0, shadow time 10
        pool.submit(2, 1, 9.0, 1.0)  # 1 + 9 <= 10: backfills under EASY
        assert pool.start_now(1.0) == expect, name
        assert pool.demand == 4 + (1 if name == "fcfs" else 0)
        assert pool.n_waiting == (2 if name == "fcfs" else 1)


def test_easy_backfill_may_use_processors_the_head_leaves_spare() -> None:
    pool = EasyPool(4)
    pool.submit(0, 2, 10.0, 0.0)
    pool.submit(1, 3, 5.0, 0.0)  # head: shadow 10, one processor spare then
    assert pool.start_now(0.0) == [0]
    assert pool.reservation(1) == 10.0
    pool.submit(2, 1, 50.0, 1.0)  # ends after the shadow, but fits the spare one
    pool.submit(3, 1, 50.0, 1.0)  # no spare left: it would delay the head
    assert pool.start_now(1.0) == [2]
    assert pool.free_now(1.0) == 1
    assert pool.earliest_start(3, 1.0, 2.0) == 10.0
    pool.finish(0, 6.0)  # early: the head starts now
    assert pool.start_now(6.0) == [1]
    assert pool.waiting_ids() == [3]


def test_arrivals_only_pass_checks_new_jobs_like_a_full_pass() -> None:
    pool = EasyPool(4)
    pool.submit(0, 4, 10.0, 0.0)
    assert pool.start_now(0.0) == [0]
    pool.submit(1, 4, 10.0, 1.0)
    assert pool.start_now(1.0) == []
    pool.submit(2, 1, 1.0, 2.0)  # nothing is free: cannot backfill
    assert pool.start_now(2.0) == []
    pool.finish(0, 3.0)
    assert pool.start_now(3.0) == [1]
    assert pool.start_now(3.0) == []
    assert pool.earliest_start(1, 1.0, 4.0) == 13.0


def test_easy_edf_key_puts_the_tightest_deadline_at_the_head() -> None:
    pool = EasyPool(2)
    pool.submit(0, 2, 10.0, 0.0)
    pool.start_now(0.0)
    pool.submit(1, 2, 5.0, 1.0, edf_key(None, 1.0))
    pool.submit(2, 2, 5.0, 2.0, edf_key(100.0, 2.0))
    pool.submit(3, 1, 5.0, 3.0, edf_key(50.0, 3.0))
    assert pool.waiting_ids() == [3, 2, 1]
    assert pool.plan(4.0) == {3: 10.0, 2: 15.0, 1: 20.0}
    assert pool.plan(4.0, (9, 1, 5.0, edf_key(20.0, 4.0))) == {9: 10.0, 3: 10.0, 2: 15.0, 1: 20.0}
    # asked for some jobs only, the plan stops once they started, with the same starts
    assert pool.plan(4.0, wanted=[3]) == {3: 10.0}
    assert pool.plan(4.0, (9, 1, 5.0, edf_key(20.0, 4.0)), [9, 2]) == {9: 10.0, 3: 10.0, 2: 15.0}
    pool.finish(0, 10.0)
    assert pool.start_now(10.0) == [3]


def test_remove_takes_a_job_out_of_the_queue() -> None:
    for name in SCHEDULERS:
        pool = make_pool(name, 4)
        pool.submit(0, 4, 10.0, 0.0)
        pool.start_now(0.0)
        pool.submit(1, 4, 10.0, 1.0)
        pool.submit(2, 2, 10.0, 1.0)
        pool.start_now(1.0)
        pool.remove(1, 2.0)
        assert pool.waiting_ids() == [2], name
        assert pool.demand == 2
        pool.finish(0, 10.0)
        assert pool.start_now(10.0) == [2], name


def test_conservative_remove_moves_later_reservations_up() -> None:
    pool = BackfillPool(4)
    pool.submit(0, 4, 10.0, 0.0)
    pool.submit(1, 4, 10.0, 0.0)
    pool.submit(2, 4, 10.0, 0.0)
    assert pool.start_now(0.0) == [0]
    assert (pool.reservation(1), pool.reservation(2)) == (10.0, 20.0)
    assert pool.earliest_start(1, 5.0, 1.0) == 30.0  # exact: behind every reservation
    pool.remove(1, 1.0)
    assert pool.reservation(2) == 10.0
    assert pool.free_now(1.0) == 0


def test_selective_pool_reports_its_threshold() -> None:
    pool = BackfillPool(2, selective=True)
    assert pool.threshold_of(2, 10.0) == 1.0
    pool.submit(0, 2, 10.0, 0.0)
    assert pool.start_now(0.0) == [0]
    pool.finish(0, 10.0)
    assert pool.threshold_of(2, 10.0) == 1.0
    assert BackfillPool(2).threshold_of(2, 10.0) == 1.0


def test_selective_pool_keeps_a_threshold_per_category() -> None:
    """Job 0 (1 proc, 10 s) waits 20 s behind job 1 and ends with slowdown 3 in the
    short narrow category; the long wide category has no history and stays at 1."""
    pool = BackfillPool(2, selective=True, categories=Categories((100.0,), (1,)))
    pool.submit(1, 2, 20.0, 0.0)
    pool.submit(0, 1, 10.0, 0.0)
    assert pool.start_now(0.0) == [1]
    pool.finish(1, 20.0)
    assert pool.start_now(20.0) == [0]
    pool.finish(0, 30.0)
    assert pool.threshold_of(1, 10.0) == 3.0  # (30 - 0) / 10
    assert pool.threshold_of(2, 20.0) == 1.0  # job 1: (20 - 0) / 20
    assert pool.threshold_of(2, 200.0) == 1.0  # no long wide job completed


def test_bad_jobs_and_names_are_refused() -> None:
    with pytest.raises(ValueError, match=r"1\.\.4"):
        EasyPool(4).submit(0, 5, 1.0, 0.0)
    with pytest.raises(ValueError, match="requested time"):
        BackfillPool(4).submit(0, 1, 0.0, 0.0)
    with pytest.raises(ValueError, match="valid schedulers"):
        make_pool("lottery", 4)
    with pytest.raises(ValueError, match="not running"):
        EasyPool(4).finish(3, 0.0)


@dataclass(frozen=True)
class _Q:
    id: str
    cores: int
    walltime: float


jobs_st = st.lists(
    st.tuples(
        st.integers(0, 30),  # submit
        st.integers(1, 6),  # procs
        st.integers(1, 20),  # requested
        st.integers(0, 20),  # runtime, cut at requested
        st.one_of(st.none(), st.integers(0, 60)),  # deadline for an EDF key
    ),
    min_size=1,
    max_size=25,
)


Events = list[tuple[float, int, int]]
"""A heap of (time, kind, job): kind 0, the job's finish, comes before kind 1, an
arrival, at the same time."""


def arrivals(jobs: list[tuple[int, int, int, int, int | None]]) -> Events:
    """The events of the jobs' submissions."""
    events = [(float(s), 1, i) for i, (s, *_) in enumerate(jobs)]
    heapq.heapify(events)
    return events


def next_instant(
    pool: Pool, jobs: list[tuple[int, int, int, int, int | None]], events: Events, keyed: bool
) -> tuple[float, list[int]]:
    """Take the earliest time's events off ``events``: the jobs that finish then leave
    ``pool`` and those that arrive join it (with an EDF key if ``keyed``). That time, and
    the jobs that finished."""
    now = events[0][0]
    finished = []
    while events and events[0][0] == now:
        _, kind, i = heapq.heappop(events)
        submit, procs, requested, _, deadline = jobs[i]
        if kind == 0:
            pool.finish(i, now)
            finished.append(i)
        else:
            key = edf_key(deadline, submit) if keyed else None
            pool.submit(i, procs, float(requested), now, key)
    return now, finished


@settings(max_examples=150, deadline=None)
@given(jobs=jobs_st, name=st.sampled_from(SCHEDULERS), keyed=st.booleans())
def test_pools_never_over_allocate_and_start_every_job_once(
    jobs: list[tuple[int, int, int, int, int | None]], name: str, keyed: bool
) -> None:
    capacity = 6
    pool = make_pool(name, capacity)
    events = arrivals(jobs)
    busy = 0
    start: dict[int, float] = {}
    while events:
        now, finished = next_instant(pool, jobs, events, keyed)
        busy -= sum(jobs[i][1] for i in finished)
        if isinstance(pool, EasyPool):  # each pass equals the pure pass on one node
            queue = [_Q(str(j), *pool.waiting_job(j)[:2]) for j in pool.waiting_ids()]
            running = [("n", p, end) for p, end in pool.running.values()]
            pure = scheduling.easy if pool.backfill else scheduling.fcfs
            want = [int(j) for j, _ in pure(now, queue, [("n", pool.free_now(now))], running)]
        got = pool.start_now(now)
        if isinstance(pool, EasyPool):
            assert sorted(got) == sorted(want)
        for i in got:
            assert i not in start
            start[i] = now
            submit, procs, requested, runtime, _ = jobs[i]
            assert now >= submit
            busy += procs
            heapq.heappush(events, (now + min(runtime, requested), 0, i))
        assert busy <= capacity
        assert pool.free_now(now) <= capacity - busy
    assert sorted(start) == list(range(len(jobs)))
    assert pool.n_waiting == 0 and pool.demand == 0


@settings(max_examples=150, deadline=None)
@given(jobs=jobs_st, backfill=st.booleans(), keyed=st.booleans())
def test_plan_predicts_the_schedule_when_jobs_use_their_requested_time(
    jobs: list[tuple[int, int, int, int, int | None]], backfill: bool, keyed: bool
) -> None:
    """Once the last job has arrived, EASY/FCFS run exactly as planned if every job runs
    for its requested time."""
    pool = EasyPool(6, backfill=backfill)
    last = max(s for s, *_ in jobs)
    events = arrivals(jobs)
    plan: dict[int, float] | None = None
    start: dict[int, float] = {}
    while events:
        now, _ = next_instant(pool, jobs, events, keyed)
        for i in pool.start_now(now):
            start[i] = now
            heapq.heappush(events, (now + jobs[i][2], 0, i))
        if now == last:
            plan = pool.plan(now)
            head = pool.waiting_ids()[:2]
            partial = pool.plan(now, wanted=head)
            assert set(head) <= set(partial)
            assert partial == {i: plan[i] for i in partial}
    assert plan is not None
    assert plan == {i: start[i] for i in plan}
