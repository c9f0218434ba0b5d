"""Availability profile, conservative and selective backfilling: worked cases, properties."""

from __future__ import annotations

import heapq
import math
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.batch.backfill import ConservativeBackfill, Profile, edf_key
from elasticsite.batch.scheduling import easy
from elasticsite.batch.selective import SelectiveBackfill

# --- the profile -------------------------------------------------------------------------


def test_an_empty_profile_starts_anything_that_fits_at_once() -> None:
    p = Profile(8, start=0.0)
    assert p.earliest(8, 100.0, 5.0) == 5.0
    assert p.free_at(1e9) == 8


def test_earliest_skips_past_a_blocked_step_inside_the_window() -> None:
    p = Profile(4)
    p.reserve(0, 10, 4)  # full until 10
    p.reserve(12, 15, 3)  # one free on [12, 15)
    # 2 procs for 5 s: [10, 15) is cut by [12, 15); the first window is [15, 20).
    assert p.earliest(2, 5, 0) == 15
    # 2 procs for 2 s fit in the hole [10, 12).
    assert p.earliest(2, 2, 0) == 10
    # 1 proc fits through the narrow step.
    assert p.earliest(1, 5, 0) == 10
    assert p.earliest(2, 5, 0, limit=14) == 14  # gave up at the limit


def test_reserve_and_release_keep_the_step_function_minimal() -> None:
    p = Profile(4)
    p.reserve(0, 10, 2)
    p.reserve(10, 20, 2)  # same level on both sides: one step [0, 20)
    assert (p.times, p.free) == ([0, 20], [2, 4])
    p.release(5, 20, 2)  # the tail of a job that ended at 5
    assert (p.times, p.free) == ([0, 5], [2, 4])


def test_compact_forgets_the_past_but_keeps_the_current_step() -> None:
    p = Profile(4)
    p.reserve(0, 10, 1)
    p.reserve(2, 8, 1)
    p.compact(5)
    assert (p.times, p.free) == ([5, 8, 10], [2, 3, 4])
    assert p.earliest(3, 1, 0) == 8  # a time before the origin reads as the origin


def test_over_allocation_and_over_release_are_refused_and_change_nothing() -> None:
    p = Profile(4)
    p.reserve(0, 10, 3)
    before = (list(p.times), list(p.free))
    with pytest.raises(ValueError, match=r"outside 0\.\.4"):
        p.reserve(5, 15, 2)
    with pytest.raises(ValueError, match=r"outside 0\.\.4"):
        p.release(12, 15, 1)
    assert (p.times, p.free) == before
    with pytest.raises(ValueError, match="never fits"):
        p.earliest(5, 1, 0)
    with pytest.raises(ValueError, match="positive"):
        Profile(0)


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 6),
    ops=st.lists(
        st.tuples(st.integers(1, 6), st.integers(1, 8), st.integers(0, 20), st.integers(0, 8)),
        max_size=25,
    ),
)
def test_earliest_is_the_first_fitting_integer_start_of_a_brute_force_grid(
    capacity: int, ops: list[tuple[int, int, int, int]]
) -> None:
    """With integer times the free count is constant on each [k, k+1): check against a grid."""
    p = Profile(capacity)
    horizon = 400
    grid = [capacity] * horizon
    for procs, duration, after, cut in ops:
        procs = min(procs, capacity)
        start = p.earliest(procs, duration, after)
        assert start == next(
            t
            for t in range(after, horizon)
            if all(grid[k] >= procs for k in range(t, t + duration))
        )
        p.reserve(start, start + duration, procs)
        end = start + duration
        early = max(start, end - cut)  # some jobs end early and give back their tail
        p.release(early, end, procs)
        for k in range(int(start), int(early)):
            grid[k] -= procs
        assert all(p.free_at(k + 0.5) == grid[k] for k in range(horizon))
        assert all(a < b for a, b in zip(p.times, p.times[1:], strict=False))


# --- conservative backfilling ------------------------------------------------------------


def test_conservative_hand_worked_schedule_with_compression() -> None:
    c = ConservativeBackfill[str](4)
    # At t=0 on 4 processors, in arrival order:
    #   A 4p x10 -> starts 0, runs [0,10)
    #   B 2p x10 -> 10 (everything is taken until A ends)
    #   C 2p x5  -> 10 (the 2 processors B leaves on [10,15))
    #   D 4p x5  -> 20 (B holds 2 until 20)
    #   E 2p x3  -> 15 ([15,18) has 2 free and D only starts at 20)
    for job, procs, req in [("A", 4, 10), ("B", 2, 10), ("C", 2, 5), ("D", 4, 5), ("E", 2, 3)]:
        c.submit(job, procs, req, now=0)
    assert c.start_now(0) == ["A"]
    assert c.reservations() == {"B": 10, "C": 10, "D": 20, "E": 15}
    # A ends early at 2. Pass 1 in order: B -> 2 ([2,12)), C -> 2 ([2,7)),
    # D -> 18 (E still sits on [15,18)), E -> 7 ([7,10) between C and B's end).
    # Pass 2: E left [15,18), so D -> 12 (B ends at 12). Pass 3 moves nothing.
    c.finish("A", now=2)
    assert c.reservations() == {"B": 2, "C": 2, "D": 12, "E": 7}
    assert c.start_now(2) == ["B", "C"]
    c.finish("C", now=7)  # on time: nothing to compress
    assert c.start_now(7) == ["E"]
    c.finish("E", now=10)
    assert c.start_now(10) == []
    c.finish("B", now=12)
    assert c.start_now(12) == ["D"]
    assert c.waiting == 0
    assert c.running == {"D": (4, 17)}


def test_conservative_backfills_a_job_that_fits_before_the_reservations() -> None:
    c = ConservativeBackfill[str](4)
    c.submit("A", 2, 10, now=0)  # [0,10)
    c.submit("B", 4, 10, now=0)  # 10
    c.submit("long", 2, 11, now=0)  # [0,11) would cut B: after B, 20
    c.submit("short", 2, 10, now=0)  # [0,10) fits beside A: starts now
    assert c.start_now(0) == ["A", "short"]
    assert c.reservations() == {"B": 10, "long": 20}
    assert c.reservation("B") == 10
    assert c.next_start() == 10


def test_conservative_compression_follows_an_edf_key() -> None:
    def run(keys: bool) -> dict[str, float]:
        c = ConservativeBackfill[str](4)
        c.submit("A", 4, 10, now=0)
        c.start_now(0)
        # Z (no key), X (deadline 100), Y (deadline 50), 4p x5 each: reserved 10, 15, 20
        # on arrival whatever the keys.
        c.submit("Z", 4, 5, now=1)
        for job, deadline in [("X", 100.0), ("Y", 50.0)]:
            c.submit(job, 4, 5, now=1, key=edf_key(deadline, 1) if keys else None)
        assert c.reservations() == {"Z": 10, "X": 15, "Y": 20}
        c.finish("A", now=2)  # compression hands out [2,7), [7,12), [12,17) in priority order
        return c.reservations()

    assert run(keys=False) == {"Z": 2, "X": 7, "Y": 12}
    # Keyed jobs first, earliest deadline first, the job without a key last: Y -> 2; X cannot
    # use [7,12) while Z still holds [10,15), so it stays at 15; Z -> 7; pass 2: X -> 12.
    assert run(keys=True) == {"Y": 2, "Z": 7, "X": 12}


def test_edf_key_puts_jobs_without_deadline_last_and_works_for_easy() -> None:
    class J(NamedTuple):
        id: str
        cores: int
        walltime: float
        deadline: float | None
        submitted: float

    queue = [J("none", 4, 5, None, 0), J("late", 4, 5, 90, 1), J("soon", 4, 5, 30, 2)]
    ordered = sorted(queue, key=lambda j: edf_key(j.deadline, j.submitted))
    assert [j.id for j in ordered] == ["soon", "late", "none"]
    assert easy(0.0, ordered, [("m", 4)], []) == [("soon", "m")]


def test_submit_rejects_bad_jobs_with_the_reason() -> None:
    c = ConservativeBackfill[str](4)
    with pytest.raises(ValueError, match=r"needs 1\.\.4"):
        c.submit("big", 5, 10, now=0)
    with pytest.raises(ValueError, match="must be > 0"):
        c.submit("zero", 1, 0, now=0)
    c.submit("a", 1, 10, now=0)
    with pytest.raises(ValueError, match="already queued"):
        c.submit("a", 1, 10, now=0)
    with pytest.raises(ValueError, match="is not running"):
        c.finish("a", now=1)


# --- selective backfilling ---------------------------------------------------------------


def test_selective_hand_worked_schedule() -> None:
    s = SelectiveBackfill[str](4, bound=0)
    assert s.thresholds == [1.0]  # no completions yet; one global category
    # Warm-up, t=0: X and Y (4p x2 each). X starts; Y has waited 0 (XFactor 1, not > 1).
    s.submit("X", 4, 2, now=0)
    s.submit("Y", 4, 2, now=0)
    assert s.start_now(0) == ["X"]
    assert s.reservations() == {}
    # t=2: X ends on time (slowdown 1). Y: XFactor (2+2)/2 = 2 > 1, reserved at 2, starts.
    s.finish("X", now=2)
    assert s.start_now(2) == ["Y"]
    s.finish("Y", now=4)  # slowdown (4-0)/2 = 2
    assert s.thresholds == [1.5]
    # t=4: L 2p x10 runs [4,14).
    s.submit("L", 2, 10, now=4)
    assert s.start_now(4) == ["L"]
    # t=5: P 4p x10 has XFactor 1 < 1.5: no reservation, so S 2p x20 starts in the 2 free
    # processors although it runs past L's end (conservative would have held S for P).
    s.submit("P", 4, 10, now=5)
    s.submit("S", 2, 20, now=5)
    assert s.start_now(5) == ["S"]
    # t=14: L ends on time (slowdown 1): threshold (1+2+1)/3 = 4/3. P: (9+10)/10 = 1.9,
    # reserved at 25 when S ends.
    s.finish("L", now=14)
    assert s.start_now(14) == []
    assert s.thresholds == [pytest.approx(4 / 3)]
    assert s.reservations() == {"P": 25}
    # t=15: T 2p x20 would overlap P's [25,35), U 2p x5 ends by 20: only U backfills.
    s.submit("T", 2, 20, now=15)
    s.submit("U", 2, 5, now=15)
    assert s.start_now(15) == ["U"]
    s.finish("U", now=20)
    assert s.start_now(20) == []
    s.finish("S", now=25)
    assert s.start_now(25) == ["P"]


def test_conservative_holds_the_job_selective_lets_through() -> None:
    c = ConservativeBackfill[str](4)
    c.submit("L", 2, 10, now=4)
    c.start_now(4)
    c.submit("P", 4, 10, now=5)  # reserved at 14
    c.submit("S", 2, 20, now=5)  # [5,25) would cut P: after P, 24
    assert c.start_now(5) == []
    assert c.reservations() == {"P": 14, "S": 24}


# --- properties over random streams ------------------------------------------------------


class Spec(NamedTuple):
    gap: int
    procs: int
    requested: int
    actual: int


specs = st.lists(
    st.builds(
        Spec,
        gap=st.integers(0, 6),
        procs=st.integers(1, 8),
        requested=st.integers(1, 15),
        actual=st.integers(1, 15),
    ),
    min_size=1,
    max_size=30,
)


def simulate(
    sched: ConservativeBackfill[int] | SelectiveBackfill[int], capacity: int, jobs: list[Spec]
) -> dict[int, float]:
    """Replay ``jobs`` (waking only at submits and finishes), checking invariants as it goes."""
    events: list[tuple[float, int, int]] = []
    t = 0
    for i, job in enumerate(jobs):
        t += job.gap
        heapq.heappush(events, (t, 1, i))
    started: dict[int, float] = {}
    running: dict[int, int] = {}
    conservative = isinstance(sched, ConservativeBackfill)
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, i = heapq.heappop(events)
            before = sched.reservations()
            if kind:
                job = jobs[i]
                sched.submit(i, min(job.procs, capacity), job.requested, now)
                after = sched.reservations()
                # A new job never delays (nor moves) an existing reservation.
                assert all(after[j] == before[j] for j in before)
                if conservative:
                    assert i in after
            else:
                sched.finish(i, now)
                del running[i]
                after = sched.reservations()
                assert all(after[j] <= before[j] for j in before)
        before = sched.reservations()
        for i in sched.start_now(now):
            assert i not in started, "started twice"
            if i in before:
                assert before[i] == now, "started away from its reservation"
            started[i] = now
            running[i] = min(jobs[i].procs, capacity)
            heapq.heappush(events, (now + min(jobs[i].actual, jobs[i].requested), 0, i))
        after = sched.reservations()
        assert all(after[j] == before[j] for j in before if j in after)  # backfill delays none
        assert all(r > now for r in after.values()), "a reservation was passed over"
        assert sum(running.values()) <= capacity
        assert sched.next_start() == min(after.values(), default=math.inf)
    return started


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(1, 8), jobs=specs)
def test_conservative_runs_every_job_once_without_over_allocation(
    capacity: int, jobs: list[Spec]
) -> None:
    started = simulate(ConservativeBackfill[int](capacity), capacity, jobs)
    assert sorted(started) == list(range(len(jobs)))


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(1, 8), jobs=specs, bound=st.sampled_from([0.0, 10.0]))
def test_selective_runs_every_job_once_without_over_allocation(
    capacity: int, jobs: list[Spec], bound: float
) -> None:
    started = simulate(SelectiveBackfill[int](capacity, bound=bound), capacity, jobs)
    assert sorted(started) == list(range(len(jobs)))


def test_cancel_gives_back_the_slot_and_compresses() -> None:
    s = ConservativeBackfill[str](4)
    s.submit("run", 4, 10.0, 0.0)
    assert s.start_now(0.0) == ["run"]
    s.submit("a", 4, 10.0, 0.0)  # reserved at 10
    s.submit("b", 4, 10.0, 0.0)  # reserved at 20
    assert s.reservations() == {"a": 10.0, "b": 20.0}
    s.cancel("a", 1.0)
    assert s.reservations() == {"b": 10.0} and s.waiting_order() == ["b"]
    with pytest.raises(ValueError, match="not waiting"):
        s.cancel("a", 1.0)
