"""A slow cloud's listing is judged as of when it was asked for, and a termination the
cloud accepted is not asked again while listings may still show the instance up."""

from __future__ import annotations

from elasticsite import core
from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, Instance, InstanceState
from elasticsite.model import Cause, CloudSpec, Decision, Launch, Terminate, VMType, WorkerState

S = WorkerState
AWS = CloudSpec("aws", max_instances=4, vm_types=(VMType("small"),))
CONFIG = core.CoreConfig("site", (AWS,), interval=10.0)  # grace: 30 s


def booting(state: core.CoreState, wid: str, at: float) -> None:
    plan = core.Plan()
    decision = Decision(launch=[Launch("aws", "small", 1, Cause.DEMAND)])
    core.apply(state, plan, CONFIG, at, decision, {"aws": [wid]})
    (launch,) = plan.commands
    core.settle(state, core.Plan(), CONFIG, at, [core.Outcome(launch, at, instance_id=f"i-{wid}")])
    assert state.records[wid].worker.state is S.BOOTING


def running(wid: str) -> Instance:
    tags = {SITE_TAG: "site", WORKER_TAG: wid}
    return Instance(f"i-{wid}", wid, InstanceState.RUNNING, tags)


def test_an_instance_started_after_a_slow_listing_was_asked_is_not_lost() -> None:
    state = core.CoreState()
    booting(state, "old", 0.0)
    booting(state, "new", 100.0)  # launched after the listing below was asked for
    plan = core.Plan()
    listing = {"aws": {"old": running("old")}}
    core.observe(state, plan, CONFIG, 200.0, [], {}, listing, listed={"aws": 90.0})
    assert state.records["new"].worker.state is S.BOOTING, plan.transitions
    # the same listing, asked for now: the instance is missing past the grace
    core.observe(state, core.Plan(), CONFIG, 200.0, [], {}, listing)
    assert state.records["new"].worker.state is S.FAILED


def test_an_accepted_termination_is_not_asked_again_within_the_grace() -> None:
    state = core.CoreState()
    booting(state, "w1", 0.0)
    plan = core.Plan()
    core.apply(state, plan, CONFIG, 10.0, Decision(terminate=[Terminate("w1", Cause.IDLE)]), {})
    (terminate,) = plan.commands
    up = {"aws": {"w1": running("w1")}}  # listings may show it up a while yet
    again = core.Plan()
    core.observe(state, again, CONFIG, 20.0, [core.Outcome(terminate, 11.0)], {}, up)
    assert not [c for c in again.commands if isinstance(c, core.TerminateInstance)]
    later = core.Plan()
    core.observe(state, later, CONFIG, 45.0, [], {}, up)  # past the grace: asked again
    assert [c.kind for c in later.commands] == ["terminate"]
