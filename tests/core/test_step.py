"""One step driver: what both the live manager and the simulator call each step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from elasticsite import core
from elasticsite.batch.base import Node, NodeState
from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, Instance, InstanceState
from elasticsite.model import Cause, CloudSpec, Decision, Launch, VMType, Worker, WorkerState
from elasticsite.snapshot import SiteSnapshot

S = WorkerState
CLOUD = CloudSpec("lab", max_instances=8, vm_types=(VMType("small"),))
CONFIG = core.CoreConfig("site", (CLOUD,))


def joined_site() -> tuple[core.CoreState, core.Sensed]:
    """A site with one idle worker, and what a step senses of it at t=100."""
    state = core.CoreState()
    w = Worker("lab-00001", "lab", "small", 1, 0.0, S.IDLE, "i-1")
    state.records[w.id] = core.WorkerRecord(w)
    state.known.add(w.id)
    inst = Instance("i-1", w.id, InstanceState.RUNNING, {SITE_TAG: "site", WORKER_TAG: w.id})
    sensed = core.Sensed(
        100.0, [], {w.id: Node(w.id, 1, NodeState.IDLE)}, {"lab": core.by_tag([inst])}
    )
    return state, sensed


def test_a_running_site_asks_its_policy_and_launches_under_the_ids_it_is_given() -> None:
    state, sensed = joined_site()
    asked: list[Mapping[str, int]] = []

    def decide(snapshot: SiteSnapshot) -> Decision:
        assert [w.state for w in snapshot.workers] == [S.IDLE]
        return Decision(launch=[Launch("lab", "small", 2, Cause.DEMAND)])

    def ids(wanted: Mapping[str, int]) -> Mapping[str, Sequence[str]]:
        asked.append(dict(wanted))
        return {"lab": ["lab-00007", "lab-00008"]}

    _, plan = core.step(state, CONFIG, sensed, decide, ids)
    assert asked == [{"lab": 2}]
    assert plan.decision.launch == [Launch("lab", "small", 2, Cause.DEMAND)]
    assert [c.worker_id for c in plan.commands if isinstance(c, core.AddAndLaunch)] == [
        "lab-00007",
        "lab-00008",
    ]
    assert state.records["lab-00007"].worker.state is S.REQUESTED


def test_a_stopping_site_winds_down_without_asking_its_policy_or_for_ids() -> None:
    state, sensed = joined_site()
    state.shutting_down = True

    def decide(snapshot: SiteSnapshot) -> Decision:
        raise AssertionError("a stopping site decides for itself")

    def ids(wanted: Mapping[str, int]) -> Mapping[str, Sequence[str]]:
        raise AssertionError("a wind-down launches nothing")

    _, plan = core.step(state, CONFIG, sensed, decide, ids)
    assert [d.worker_id for d in plan.decision.drain] == ["lab-00001"]
    assert [type(c) for c in plan.commands] == [core.DrainNode]


def test_the_core_settings_follow_what_the_policy_declares() -> None:
    def typed(snapshot: SiteSnapshot) -> Decision:
        return Decision()

    typed.typed_nodes = True  # type: ignore[attr-defined]
    assert core.core_config(typed, site_id="site", clouds=[CLOUD]).typed_nodes
    plain = core.core_config(lambda s: Decision(), site_id="site", clouds=[CLOUD], interval=2.0)
    assert not plain.typed_nodes and plain.interval == 2.0 and plain.clouds == (CLOUD,)


def test_a_launch_is_in_flight_under_its_typed_key_until_its_outcome_is_settled() -> None:
    state = core.CoreState()
    plan = core.Plan()
    decision = Decision(launch=[Launch("lab", "small", 1, Cause.DEMAND)])
    core.apply(state, plan, CONFIG, 0.0, decision, {"lab": ["lab-00001"]})
    (launch,) = plan.commands
    assert core.command_key(launch) == core.InFlight("launch", "lab-00001")
    assert state.running(core.AddAndLaunch, "lab-00001")
    assert not state.running(core.TerminateInstance, "lab-00001")
    core.settle(state, core.Plan(), CONFIG, 1.0, [core.Outcome(launch, 1.0, instance_id="i-1")])
    assert not state.running(core.AddAndLaunch, "lab-00001")
    assert state.records["lab-00001"].worker.state is S.BOOTING


def test_the_worker_state_groups_are_one_definition() -> None:
    assert S.JOINED_STATES | {S.DRAINING} == S.UP_STATES
    for st in S:
        assert st.joined == (st in S.JOINED_STATES)
        assert st.pending == (st in S.PENDING_STATES)
        assert st.final == (st in S.FINAL_STATES) == (not st.live)
    assert "FINAL_STATES" not in S.__members__  # groups, not states
