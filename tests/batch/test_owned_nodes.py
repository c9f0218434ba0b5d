"""Nodes kept for one user: the scheduling pass that honours them, and the embedded
batch system that stores them (Cloud Scheduler mode's VMs serve the user whose share
booted them)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.batch.conftest import FakeClock
from tests.users import real_users

from elasticsite.batch.base import BatchError, JobRequest, UnknownNode
from elasticsite.batch.local import LocalBatch
from elasticsite.batch.scheduling import schedule_owned


def jobs(*users: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(id=str(i), cores=1, walltime=60.0) for i in range(len(users))]


def test_owners_jobs_go_to_their_nodes_and_the_rest_to_nobodys() -> None:
    users = ["ann", "ann", "bob", "bob", "cid"]
    queued = jobs(*users)
    by_id = {j.id: u for j, u in zip(queued, users, strict=True)}
    nodes = [("a1", 1, "ann"), ("b1", 1, "bob"), ("free", 1, ""), ("c1", 1, "cid")]
    started = dict(schedule_owned("easy", 0.0, queued, nodes, [], by_id))
    assert started == {"0": "a1", "2": "b1", "4": "c1", "1": "free"}


def test_no_owner_is_one_ordinary_pass() -> None:
    queued = jobs("ann", "bob")
    started = schedule_owned("fcfs", 0.0, queued, [("n", 2, "")], [], {"0": "ann", "1": "bob"})
    assert started == [("0", "n"), ("1", "n")]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["ann", "bob", "cid"]), max_size=12),
    st.lists(st.tuples(st.integers(1, 2), st.sampled_from(["", "ann", "bob"])), max_size=6),
    st.sampled_from(["fcfs", "easy"]),
)
def test_no_job_ever_starts_on_another_users_node(
    users: list[str], shape: list[tuple[int, str]], policy: str
) -> None:
    queued = jobs(*users)
    by_id = {j.id: u for j, u in zip(queued, users, strict=True)}
    nodes = [(f"n{i}", free, owner) for i, (free, owner) in enumerate(shape)]
    owner_of = {name: owner for name, _, owner in nodes}
    started = schedule_owned(policy, 0.0, queued, nodes, [], by_id)
    assert len({j for j, _ in started}) == len(started), "a job started twice"
    for job_id, node in started:
        assert owner_of[node] in ("", by_id[job_id]), f"{by_id[job_id]}'s job on {node}"
    left = {name: free for name, free, _ in nodes}
    for _, node in started:
        left[node] -= 1
    assert all(f >= 0 for f in left.values()), "a node got more jobs than cores"
    if policy == "fcfs":  # nothing waits for a node of its own user, or nobody's, that is free
        waiting = {by_id[j.id] for j in queued} - {by_id[j] for j, _ in started}
        assert not any(left[n] > 0 and o in waiting for n, _, o in nodes)


def test_the_embedded_system_keeps_owned_nodes_for_their_user(tmp_path: Path) -> None:
    with real_users(2) as (ann, bob):
        batch = LocalBatch(tmp_path / "b.db", clock=FakeClock())
        batch.add_node("a1", 1, pool="small")
        batch.set_owner("a1", ann.pw_name)
        batch.register_node("a1", 1)
        theirs = [
            batch.submit(JobRequest(["true"], 1, 60.0, u, attributes={"vm_type": "small"}))
            for u in (bob.pw_name, ann.pw_name)
        ]
        view = batch.snapshot()
        assert [j.id for j in view.running] == [theirs[1]], "the node did not take ann's job"
        assert [j.id for j in view.queued] == [theirs[0]]
        (node,) = view.nodes
        assert node.owner == ann.pw_name
        batch.set_owner("a1", bob.pw_name)  # handed over: ann's job goes on, then bob's
        assert [j.id for j in batch.snapshot().running] == [theirs[1]]


def test_set_owner_refuses_a_bad_name_and_an_unknown_node(batch: LocalBatch) -> None:
    batch.add_node("w1", 1)
    with pytest.raises(BatchError, match="not a user name"):
        batch.set_owner("w1", "ann; rm -rf /")
    with pytest.raises(UnknownNode):
        batch.set_owner("w2", "ann")


def test_a_version_3_file_gets_nodes_of_nobody(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    LocalBatch(path).add_node("w1", 2)
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE nodes DROP COLUMN owner")
        db.execute("PRAGMA user_version = 3")
    db.close()
    (node,) = LocalBatch(path).snapshot().nodes
    assert (node.name, node.owner) == ("w1", "")
