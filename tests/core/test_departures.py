"""A node that leaves is a departure the core keeps until the broker has recorded it:
sent when the worker is gone, sent again at every step after a failure (one warning
per failure), and sent again by a restarted driver from the state it persisted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from elasticsite import core
from elasticsite.core import departures
from elasticsite.model import CloudSpec, Decision, VMType, Worker, WorkerState
from elasticsite.snapshot import SiteSnapshot

S = WorkerState
CLOUD = CloudSpec("lab", max_instances=4, vm_types=(VMType("small"),))
CONFIG = core.CoreConfig("site", (CLOUD,), interval=10.0)


def nothing(snapshot: SiteSnapshot) -> Decision:
    return Decision()


def no_ids(wanted: Mapping[str, int]) -> Mapping[str, Sequence[str]]:
    raise AssertionError("nothing launches here")


def step(state: core.CoreState, now: float, *outcomes: core.Outcome) -> core.Plan:
    """A step at ``now`` that finds no instance and no node (the worker's are gone)."""
    sensed = core.Sensed(now, outcomes, {}, {"lab": {}})
    return core.step(state, CONFIG, sensed, nothing, no_ids)[1]


def forgets(plan: core.Plan) -> list[core.ForgetNode]:
    return [c for c in plan.commands if isinstance(c, core.ForgetNode)]


def gone_worker() -> tuple[core.CoreState, core.ForgetNode]:
    """A site whose one worker was terminated and whose node is removed: the step that
    settles the removal returns with the worker's departure sent."""
    state = core.CoreState()
    w = Worker("lab-00001", "lab", "small", 1, 0.0, S.TERMINATING, "i-1", node="cloud7")
    state.records[w.id] = core.WorkerRecord(w)
    state.known.add(w.id)
    first = step(state, 100.0)
    (remove,) = first.commands
    assert isinstance(remove, core.RemoveNode)
    plan = step(state, 110.0, core.Outcome(remove, 101.0))
    assert [t.to_state for t in plan.transitions] == [S.TERMINATED]
    assert plan.departures_changed and state.departures == {"cloud7": "lab-00001"}
    (forget,) = forgets(plan)
    assert forget == core.ForgetNode("cloud7", "lab-00001")
    return state, forget


def test_a_departure_the_broker_could_not_take_is_warned_once_and_sent_again() -> None:
    state, forget = gone_worker()
    assert not forgets(step(state, 115.0)), "one at a time: it is still in flight"

    failed = core.Outcome(forget, 111.0, error="broker: connection refused")
    plan = step(state, 120.0, failed)
    assert plan.errors == [
        "broker: removing cloud7 failed (will retry): broker: connection refused"
    ]
    assert plan.errors[0].ids == {"node": "cloud7", "worker": "lab-00001"}  # type: ignore[attr-defined]
    assert not plan.departures_changed and state.departures == {"cloud7": "lab-00001"}
    (again,) = forgets(plan)
    assert again == forget

    plan = step(state, 130.0, core.Outcome(again, 121.0))
    assert plan.departures_changed and not state.departures
    assert not plan.errors and not forgets(plan)
    assert not forgets(step(state, 140.0)), "a recorded departure is not sent again"


def test_a_restarted_driver_sends_the_departures_it_persisted() -> None:
    state, forget = gone_worker()  # sent, and the driver stopped before its outcome
    persisted = dict(state.departures)  # what the manager's store holds

    restarted = core.CoreState(departures=persisted)
    plan = step(restarted, 200.0)
    assert forgets(plan) == [forget]
    assert not plan.departures_changed, "nothing new to persist before it is sent"

    plan = step(restarted, 210.0, core.Outcome(forget, 201.0))
    assert plan.departures_changed and not restarted.departures


def test_a_node_taken_again_and_left_again_is_one_departure() -> None:
    """Slurm's power saving reuses node names: a second departure of the same node
    while the first is pending is the same departure, not a second command."""
    state, _ = gone_worker()
    plan = core.Plan()
    departures.leave(state, plan, "cloud7", "lab-00002")
    assert not plan.commands and not plan.departures_changed
    assert state.departures == {"cloud7": "lab-00001"}
