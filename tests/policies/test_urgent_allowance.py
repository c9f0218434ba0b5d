"""Urgent jobs and the site's elastic capacity: the allowance past the normal limits."""

from __future__ import annotations

from dataclasses import replace

from elasticsite.model import Cause, Job, Launch, Terminate

from .conftest import S, cloud, job, run, snap, worker


def urgent(cores: int = 1, urgency: str = "red") -> Job:
    """An urgent job of ``cores`` one-core nodes."""
    return replace(job(cores=cores), attributes={"urgency": urgency, "node_count": str(cores)})


def full(n: int = 4) -> list:
    return [worker(f"w{k}", S.BUSY) for k in range(n)]


def test_without_an_allowance_nothing_changes() -> None:
    s = snap([urgent()], full(), [cloud(max_instances=4)])
    assert run("on_demand", s).launch == []


def test_an_urgent_job_bursts_past_max_instances_within_the_allowance() -> None:
    s = snap([urgent(cores=3)], full(), [cloud(max_instances=4)])
    d = run("on_demand", s, urgent_extra_instances=2)
    assert d.launch == [Launch("a", "small", 2, Cause.URGENT, (), "red")]


def test_non_urgent_jobs_get_nothing_past_the_limits() -> None:
    s = snap([job(), job()], full(), [cloud(max_instances=4)])
    assert run("on_demand", s, urgent_extra_instances=5).launch == []


def test_the_allowance_counts_what_is_already_over_the_limit() -> None:
    s = snap([urgent(cores=3)], full(5), [cloud(max_instances=4)])
    d = run("on_demand", s, urgent_extra_instances=2)
    assert d.launch == [Launch("a", "small", 1, Cause.URGENT, (), "red")]


def test_urgent_workers_may_spend_past_the_cap_up_to_the_extra() -> None:
    s = snap([urgent(cores=4)], full(2), [cloud(max_instances=2, price=1.0)])
    d = run(
        "on_demand", s, urgent_extra_instances=10, spend_cap_per_hour=2.0,
        urgent_extra_spend_per_hour=3.0,
    )  # fmt: skip
    assert d.launch == [Launch("a", "small", 3, Cause.URGENT, (), "red")]
    assert d.drain == []


def test_the_most_urgent_job_names_the_launch() -> None:
    s = snap([urgent(urgency="yellow"), urgent(urgency="orange")], full(), [cloud(max_instances=4)])
    d = run("on_demand", s, urgent_extra_instances=2)
    assert [x.urgency for x in d.launch] == ["orange"]


def test_at_the_quota_busy_non_urgent_workers_make_room() -> None:
    a = replace(cloud(max_instances=4), quota=4)
    running_urgent = replace(urgent(), node="w3")
    workers = [
        worker("w0", S.BUSY), worker("w1", S.IDLE), worker("w2", S.DRAINING),
        worker("w3", S.BUSY),
    ]  # fmt: skip
    s = snap([urgent(), urgent(), urgent()], workers, [a], running=[running_urgent])
    d = run("on_demand", s, urgent_extra_instances=5)
    assert not any(x.cause is Cause.URGENT for x in d.launch)
    # The idle w1 takes one urgent job; the draining w2 goes first, then the busy w0;
    # w3 runs an urgent job and is never taken.
    assert [t for t in d.terminate if t.cause is Cause.URGENT] == [
        Terminate("w2", Cause.URGENT), Terminate("w0", Cause.URGENT),
    ]  # fmt: skip


def test_room_already_being_made_is_not_made_twice() -> None:
    a = replace(cloud(max_instances=3), quota=3)
    workers = [worker("w0", S.BUSY), worker("w1", S.TERMINATING), worker("w2", S.BUSY)]
    s = snap([urgent()], workers, [a])
    d = run("on_demand", s, urgent_extra_instances=5)
    assert not [t for t in d.terminate if t.cause is Cause.URGENT]
