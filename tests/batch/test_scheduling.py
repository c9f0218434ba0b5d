"""The pure scheduling passes: hand-worked FCFS and EASY cases, then properties."""

from __future__ import annotations

import math
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.batch.scheduling import easy, fcfs, reservation, schedule
from elasticsite.model import Job


class J(NamedTuple):
    id: str
    cores: int
    walltime: float


NOW = 1000.0


def test_fcfs_starts_in_order_until_the_head_does_not_fit() -> None:
    queued = [J("1", 2, 10), J("2", 4, 10), J("3", 1, 10)]
    # 4 free cores: job 1 takes 2, job 2 (4 cores) cannot start, so job 3 waits behind it.
    assert fcfs(NOW, queued, [("n1", 4)], []) == [("1", "n1")]


def test_fcfs_accepts_model_jobs() -> None:
    job = Job(id="7", cores=1, walltime=60.0, submitted_at=0.0)
    assert schedule("fcfs", NOW, [job], [("n1", 1)], []) == [("7", "n1")]


def test_easy_backfills_a_short_job_that_ends_before_the_head_reservation() -> None:
    # n1 has 4 cores: 2 busy until NOW+100, 2 free. The head needs 4: shadow = NOW+100.
    running = [("n1", 2, NOW + 100)]
    queued = [J("head", 4, 50), J("short", 2, 60), J("long", 2, 500)]
    assert easy(NOW, queued, [("n1", 2)], running) == [("short", "n1")]
    # FCFS starts nothing: the head blocks.
    assert fcfs(NOW, queued, [("n1", 2)], running) == []


def test_easy_refuses_a_long_job_that_would_delay_the_head() -> None:
    running = [("n1", 2, NOW + 100)]
    queued = [J("head", 4, 50), J("long", 1, 101)]
    assert easy(NOW, queued, [("n1", 2)], running) == []


def test_easy_lets_a_long_job_use_cores_spare_at_the_shadow_time() -> None:
    # n1: 8 cores, 4 busy until NOW+100, 4 free. Head needs 6: at the shadow time 8 are
    # free, so 2 are spare. A long 2-core job may take them; a second one may not.
    running = [("n1", 4, NOW + 100)]
    queued = [J("head", 6, 50), J("long-a", 2, 1000), J("long-b", 2, 1000)]
    assert easy(NOW, queued, [("n1", 4)], running) == [("long-a", "n1")]


def test_easy_backfills_long_jobs_on_nodes_other_than_the_reservation_node() -> None:
    # The head (4 cores) can start earliest on n1 (at NOW+10); n2 frees only at NOW+500.
    running = [("n1", 4, NOW + 10), ("n2", 2, NOW + 500)]
    queued = [J("head", 4, 50), J("long", 2, 1000)]
    assert easy(NOW, queued, [("n1", 0), ("n2", 2)], running) == [("long", "n2")]


def test_easy_counts_jobs_it_started_in_the_same_pass_in_the_reservation() -> None:
    # n1 has 4 free cores. "a" takes 3 of them for 100 s; the head (4) now waits until
    # NOW+100, so a 1-core job of 200 s must not take the last core.
    queued = [J("a", 3, 100), J("head", 4, 10), J("long", 1, 200), J("short", 1, 50)]
    assert easy(NOW, queued, [("n1", 4)], []) == [("a", "n1"), ("short", "n1")]


def test_best_fit_node_choice_keeps_large_holes() -> None:
    nodes = [("big", 8), ("small", 2), ("mid", 4)]
    assert fcfs(NOW, [J("1", 2, 10)], nodes, []) == [("1", "small")]
    assert fcfs(NOW, [J("1", 3, 10)], nodes, []) == [("1", "mid")]
    # Ties go to the earlier node.
    assert fcfs(NOW, [J("1", 1, 10)], [("a", 2), ("b", 2)], []) == [("1", "a")]


def test_easy_skips_a_job_too_big_for_every_node() -> None:
    queued = [J("huge", 16, 10), J("small", 1, 10)]
    assert easy(NOW, queued, [("n1", 4)], []) == [("small", "n1")]
    assert fcfs(NOW, queued, [("n1", 4)], []) == []


def test_overdue_running_jobs_are_expected_to_end_now() -> None:
    assert reservation(4, NOW, [("n1", 0)], [("n1", 4, NOW - 50)]) == (NOW, "n1")
    assert reservation(4, NOW, [("n1", 0)], [("n1", 2, NOW + 5)]) == (math.inf, None)


def test_running_jobs_on_unlisted_nodes_are_ignored() -> None:
    assert reservation(2, NOW, [("n1", 0)], [("gone", 2, NOW + 5), ("n1", 2, NOW + 9)]) == (
        NOW + 9,
        "n1",
    )


def test_unknown_policy_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"'sjf'.*easy, fcfs"):
        schedule("sjf", NOW, [], [], [])


# -- properties -----------------------------------------------------------------------


@st.composite
def states(draw: st.DrawFn) -> tuple[list[J], list[tuple[str, int]], list[tuple[str, int, float]]]:
    """A random cluster: nodes of 1-8 cores, some running jobs, a queue."""
    n_nodes = draw(st.integers(1, 5))
    nodes: list[tuple[str, int]] = []
    running: list[tuple[str, int, float]] = []
    for i in range(n_nodes):
        name = f"n{i}"
        total = draw(st.integers(1, 8))
        used = 0
        for _ in range(draw(st.integers(0, 3))):
            cores = draw(st.integers(1, 8))
            if used + cores > total:
                break
            used += cores
            end = NOW + draw(st.integers(-20, 400))
            running.append((name, cores, float(end)))
        nodes.append((name, total - used))
    queued = [
        J(str(k), draw(st.integers(1, 9)), float(draw(st.integers(1, 500))))
        for k in range(draw(st.integers(0, 12)))
    ]
    return queued, nodes, running


def _apply(
    started: list[tuple[str, str]],
    queued: list[J],
    nodes: list[tuple[str, int]],
    running: list[tuple[str, int, float]],
) -> tuple[list[tuple[str, int]], list[tuple[str, int, float]]]:
    """The cluster after ``started`` jobs began at NOW."""
    by_id = {j.id: j for j in queued}
    free = dict(nodes)
    running = list(running)
    for job_id, node in started:
        job = by_id[job_id]
        free[node] -= job.cores
        running.append((node, job.cores, NOW + job.walltime))
    return list(free.items()), running


@settings(max_examples=400, deadline=None)
@given(states())
def test_no_node_is_overcommitted(state: tuple) -> None:
    queued, nodes, running = state
    for policy in ("fcfs", "easy"):
        started = schedule(policy, NOW, queued, nodes, running)
        assert len({j for j, _ in started}) == len(started)
        after, _ = _apply(started, queued, nodes, running)
        assert all(free >= 0 for _, free in after), (policy, started)


@settings(max_examples=400, deadline=None)
@given(states())
def test_fcfs_starts_a_prefix_of_the_queue(state: tuple) -> None:
    queued, nodes, running = state
    started = fcfs(NOW, queued, nodes, running)
    assert [j for j, _ in started] == [j.id for j in queued[: len(started)]]


@settings(max_examples=400, deadline=None)
@given(states())
def test_easy_never_delays_the_head_reservation(state: tuple) -> None:
    queued, nodes, running = state
    by_fcfs = fcfs(NOW, queued, nodes, running)
    by_easy = easy(NOW, queued, nodes, running)
    assert by_easy[: len(by_fcfs)] == by_fcfs  # the same in-order prefix
    if len(by_fcfs) == len(queued):
        return
    head = queued[len(by_fcfs)]
    assert head.id not in {j for j, _ in by_easy}
    nodes_f, running_f = _apply(by_fcfs, queued, nodes, running)
    nodes_e, running_e = _apply(by_easy, queued, nodes, running)
    start_fcfs, _ = reservation(head.cores, NOW, nodes_f, running_f)
    start_easy, _ = reservation(head.cores, NOW, nodes_e, running_e)
    assert start_easy <= start_fcfs


@settings(max_examples=200, deadline=None)
@given(states())
def test_easy_starts_at_least_what_fcfs_starts(state: tuple) -> None:
    queued, nodes, running = state
    assert len(easy(NOW, queued, nodes, running)) >= len(fcfs(NOW, queued, nodes, running))
