"""A worker serves the user whose share it was launched for: the owner travels from the
decision to the worker record, its launch and its node, and back after a restart."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from elasticsite import core
from elasticsite.batch.base import Node, NodeState
from elasticsite.clouds.base import Instance, InstanceState
from elasticsite.manager.store import StateStore
from elasticsite.model import Assign, Cause, CloudSpec, Decision, Launch, WorkerState

CONFIG = core.CoreConfig("site", (CloudSpec("c", max_instances=4),), typed_nodes=True)


def launched(state: core.CoreState, user: str) -> core.AddAndLaunch:
    plan = core.Plan()
    decision = Decision(launch=[Launch("c", "small", 1, Cause.DEMAND, user=user)])
    core.apply(state, plan, CONFIG, 0.0, decision, {"c": [f"c-{len(state.known) + 1:05d}"]})
    (command,) = plan.commands
    assert isinstance(command, core.AddAndLaunch)
    return command


def step(state: core.CoreState, now: float, outcomes: list[core.Outcome], node: Node) -> core.Plan:
    plan = core.Plan()
    wid = next(iter(state.records))
    inst = Instance("i-1", wid, InstanceState.RUNNING)
    core.observe(state, plan, CONFIG, now, outcomes, {node.name: node}, {"c": {wid: inst}})
    return plan


def test_a_launch_for_a_user_declares_its_node_for_them_before_it_boots() -> None:
    state = core.CoreState()
    command = launched(state, "ann")
    assert command.owner == "ann" and command.pool == "small"
    assert state.records[command.worker_id].worker.owner == "ann"


def test_the_core_tells_the_node_its_owner_when_it_joins_and_whenever_it_differs() -> None:
    state = core.CoreState()
    command = launched(state, "ann")
    wid, node = command.worker_id, command.node
    booted = core.Outcome(command, 1.0, instance_id="i-1")
    # a system that does not say who a node is for: told again when it joins
    plan = step(state, 2.0, [booted], Node(node, 1, NodeState.IDLE, owner=None))
    assert state.records[wid].worker.state is WorkerState.IDLE
    assert core.OwnNode(wid, node, "ann") in plan.commands
    settled = step(
        state,
        3.0,
        [core.Outcome(core.OwnNode(wid, node, "ann"), 3.0)],
        Node(node, 1, NodeState.IDLE, owner="ann"),
    )
    assert not settled.commands
    # one that says, and says otherwise (set by hand, or lost): set again
    plan = step(state, 4.0, [], Node(node, 1, NodeState.IDLE, owner=""))
    assert plan.commands == [core.OwnNode(wid, node, "ann")]


def test_a_worker_handed_to_another_user_changes_hands_at_once_and_in_the_batch_system() -> None:
    state = core.CoreState()
    command = launched(state, "ann")
    wid = command.worker_id
    waiting = core.Plan()  # not launched yet: its launch will carry the new owner
    core.apply(
        state, waiting, CONFIG, 1.0, Decision(assign=[Assign(wid, "bob", Cause.FAIR_SHARE)]), {}
    )
    assert state.records[wid].worker.owner == "bob" and not waiting.commands
    assert waiting.counts == {"workers_reassigned": 1} and wid in waiting.dirty
    joined = step(
        state,
        2.0,
        [core.Outcome(command, 2.0, instance_id="i-1")],
        Node(command.node, 1, NodeState.BUSY, 1, owner="ann"),
    )
    told = core.OwnNode(wid, command.node, "bob")
    assert joined.commands == [told]  # declared for ann before the hand-over
    settled = [core.Outcome(told, 2.5)]
    step(state, 2.5, settled, Node(command.node, 1, NodeState.BUSY, 1, owner="bob"))
    plan = core.Plan()
    decision = Decision(assign=[Assign(wid, "cid", Cause.FAIR_SHARE)])
    core.apply(state, plan, CONFIG, 3.0, decision, {})
    assert state.records[wid].worker.owner == "cid"
    assert plan.commands == [core.OwnNode(wid, command.node, "cid")]
    assert Decision(assign=[Assign(wid, "cid", Cause.FAIR_SHARE)]).summary() == "assign 1"


def test_the_owner_is_stored_and_an_older_store_gains_the_column(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = StateStore(path)
    state = core.CoreState()
    launched(state, "ann")
    (rec,) = state.records.values()
    store.save(rec)
    store.close()
    with sqlite3.connect(path) as db:  # as the store was before owners were kept
        db.execute("ALTER TABLE workers DROP COLUMN owner")
    db.close()
    old = StateStore(path)
    (loaded,) = old.load()
    assert loaded.worker.owner == ""  # nobody's: the policy counts it by the job it runs
    old.save(rec)
    (loaded,) = StateStore(path).load()
    assert loaded.worker.owner == "ann"
