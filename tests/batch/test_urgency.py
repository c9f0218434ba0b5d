"""Which running jobs preemption stops to make room for an urgent one."""

from __future__ import annotations

from elasticsite.batch.base import Node, NodeState
from elasticsite.batch.urgency import choose_victims
from elasticsite.jobs import Job, JobState


def running(job_id: str, node: str, cores: int, started: float, **attributes: str) -> Job:
    return Job(job_id, cores, 3600.0, 0.0, JobState.RUNNING, started_at=started, node=node,
               attributes=attributes)  # fmt: skip


def busy(name: str, cores: int = 4, owner: str | None = None) -> Node:
    return Node(name, cores, NodeState.BUSY, free_cores=0, owner=owner)


def test_the_node_needing_fewest_stops_gives_them_newest_and_volunteers_first() -> None:
    jobs = [
        running("a1", "a", 1, 10.0), running("a2", "a", 1, 20.0),
        running("a3", "a", 1, 30.0), running("a4", "a", 1, 40.0),
        running("b1", "b", 2, 10.0), running("b2", "b", 2, 50.0),
        running("b3", "b", 2, 5.0, volunteer="yes"),
    ]  # fmt: skip
    nodes = [busy("a"), busy("b", 6)]
    assert [j.id for j in choose_victims(2, nodes, jobs)] == ["b3"]  # one stop, a volunteer
    # two stops on b, three on a; on b the volunteer's first, then the newest
    assert [j.id for j in choose_victims(3, nodes, jobs)] == ["b3", "b2"]
    assert [j.id for j in choose_victims(3, nodes[:1], jobs)] == ["a4", "a3", "a2"]


def test_a_job_that_may_not_be_requeued_is_never_stopped() -> None:
    jobs = [running("keep", "a", 4, 10.0, requeue="no")]
    assert choose_victims(1, [busy("a")], jobs) == []


def test_a_node_already_with_room_stops_nothing() -> None:
    idle = Node("a", 4, NodeState.IDLE, free_cores=4)
    assert choose_victims(4, [idle], [running("x", "b", 1, 1.0)]) == []


def test_a_node_that_runs_only_another_users_jobs_is_no_use_to_the_urgent_job() -> None:
    jobs = [running("theirs", "owned", 4, 10.0), running("open1", "open", 4, 20.0)]
    nodes = [busy("owned", owner="bob"), busy("open", owner="")]
    assert [j.id for j in choose_victims(4, nodes, jobs, user="ann")] == ["open1"]
    assert [j.id for j in choose_victims(4, [nodes[0]], jobs, user="bob")] == ["theirs"]
    assert choose_victims(4, [nodes[0]], jobs, user="ann") == []
