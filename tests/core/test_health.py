"""Clouds that refuse launches, or whose workers keep failing to boot, are closed."""

from __future__ import annotations

import math

from elasticsite import core, policies
from elasticsite.core import health
from elasticsite.core.transitions import move
from elasticsite.model import (
    Cause,
    CloudSpec,
    Decision,
    Job,
    Launch,
    Terminate,
    VMType,
    WorkerState,
)  # fmt: skip

S = WorkerState
CHEAP = CloudSpec("cheap", max_instances=4, price_per_hour=0.0, vm_types=(VMType("small"),))
DEAR = CloudSpec("dear", max_instances=4, price_per_hour=0.5, vm_types=(VMType("small"),))
CONFIG = core.CoreConfig("site", (CHEAP, DEAR), capacity_cooldown=300.0, protect_after=2)


def launch(state: core.CoreState, cloud: str, ids: list[str], now: float) -> core.Plan:
    plan = core.Plan()
    decision = Decision(launch=[Launch(cloud, "small", len(ids), Cause.DEMAND)])
    core.apply(state, plan, CONFIG, now, decision, {cloud: ids})
    return plan


def refuse(state: core.CoreState, plan: core.Plan, kind: str, now: float) -> core.Plan:
    after = core.Plan()
    outcomes = [
        core.Outcome(c, now, error=f"refused ({kind})", error_kind=kind) for c in plan.commands
    ]
    core.settle(state, after, CONFIG, now, outcomes)
    return after


def decide(state: core.CoreState, now: float, queued: int) -> Decision:
    snapshot = core.observe(
        state, core.Plan(), CONFIG, now, [], {}, {"cheap": {}, "dear": {}},
        [Job(str(i), 1, 60.0, 0.0) for i in range(queued)],
    )  # fmt: skip
    return policies.evaluate(policies.get("on_demand"), snapshot, policies.PolicySettings())


def test_a_capacity_refusal_fails_the_worker_and_sends_the_next_launch_elsewhere() -> None:
    state = core.CoreState()
    after = refuse(state, launch(state, "cheap", ["cheap-1"], 0.0), "capacity", 1.0)
    assert state.records["cheap-1"].worker.state is S.FAILED
    assert after.health_changed and after.counts["cloud_closed_capacity"] == 1
    assert health.closed(state, 1.0) == {"cheap"}
    assert decide(state, 2.0, 1).launch == [Launch("dear", "small", 1, Cause.DEMAND)]
    assert health.closed(state, 301.0) == frozenset()  # the cool-down is over


def test_capacity_closes_one_vm_type_and_the_cloud_only_when_every_type_is_out() -> None:
    two = (VMType("small"), VMType("large", cores=4))
    config = core.CoreConfig("site", (CloudSpec("cheap", vm_types=two), DEAR))
    state = core.CoreState()
    plan = core.Plan()
    health.launch_refused(state, plan, config, 0.0, "cheap", "capacity", "none left", "small")
    clouds, shut = health.open_clouds(state, 1.0, config.clouds)
    assert shut == frozenset() and [v.name for v in clouds[0].vm_types] == ["large"]
    assert clouds[0].default_vm.name == "large" and clouds[1] is DEAR
    health.launch_refused(state, plan, config, 0.0, "cheap", "capacity", "none left", "large")
    assert health.closed(state, 1.0, config.clouds) == {"cheap"}
    assert health.closed(state, 1.0) == frozenset()  # no spec given: per-type only
    assert (
        health.reset(state, "cheap") and health.open_clouds(state, 1.0, config.clouds)[1] == set()
    )
    health.launch_refused(state, plan, config, 0.0, "cheap", "quota", "limit", "small")
    assert health.closed(state, 1.0, config.clouds) == {"cheap"}  # quota: the account


def test_bad_credentials_close_the_cloud_until_an_operator_resets_it() -> None:
    state = core.CoreState()
    refuse(state, launch(state, "cheap", ["cheap-1"], 0.0), "credentials", 1.0)
    assert health.closed(state, 1e9) == {"cheap"}
    assert math.isinf(state.health["cheap"].closed_until)
    assert "refused (credentials)" in state.health["cheap"].reason
    data = health.dump(state)
    assert data["cheap"]["closed_until"] is None
    assert health.load(data)["cheap"].closed_until == math.inf
    assert health.reset(state, "cheap") and health.closed(state, 1e9) == frozenset()


def test_throttled_launches_are_retried_with_jitter_not_failed() -> None:
    state = core.CoreState()
    refuse(state, launch(state, "cheap", ["cheap-1"], 0.0), "throttled", 10.0)
    rec = state.records["cheap-1"]
    assert rec.worker.state is S.REQUESTED and health.closed(state, 10.0) == frozenset()
    plain = CONFIG.backoff(1)
    assert 10.0 + plain / 2 <= rec.next_attempt_at <= 10.0 + plain
    assert health.jittered(CONFIG, "cheap-1", 1) != health.jittered(CONFIG, "cheap-2", 1)


def test_workers_failing_before_joining_protect_the_cloud_and_a_join_clears_the_count() -> None:
    state = core.CoreState()
    for i, now in ((1, 0.0), (2, 10.0)):
        wid = f"cheap-{i}"
        launch(state, "cheap", [wid], now)
        plan = core.Plan()
        decision = Decision(terminate=[Terminate(wid, Cause.STALLED)])
        core.apply(state, plan, CONFIG, now + 1, decision, {})
    assert state.health["cheap"].failures == 2
    assert state.health["cheap"].kind == "protected"
    assert health.closed(state, 12.0) == {"cheap"}
    assert health.closed(state, 12.0 + CONFIG.protect_cooldown) == frozenset()


def test_a_worker_that_joins_clears_its_clouds_failure_count() -> None:
    state = core.CoreState()
    launch(state, "cheap", ["cheap-1"], 0.0)
    core.apply(
        state,
        core.Plan(),
        CONFIG,
        1.0,
        Decision(terminate=[Terminate("cheap-1", Cause.STALLED)]),
        {},
    )
    assert state.health["cheap"].failures == 1
    plan = launch(state, "cheap", ["cheap-2"], 5.0)
    rec = state.records["cheap-2"]
    since = len(plan.transitions)
    move(plan, rec, S.BOOTING, 6.0, Cause.BOOTED)
    move(plan, rec, S.IDLE, 7.0, Cause.JOINED)
    health.track(state, plan, CONFIG, 7.0, plan.transitions[since:])
    assert state.health["cheap"].failures == 0 and plan.health_changed


def test_a_stall_that_protects_a_cloud_stops_the_launches_of_the_same_decision() -> None:
    state = core.CoreState()
    launch(state, "cheap", ["cheap-1", "cheap-2"], 0.0)
    plan = core.Plan()
    decision = Decision(
        terminate=[Terminate("cheap-1", Cause.STALLED), Terminate("cheap-2", Cause.LOST)],
        launch=[Launch("cheap", "small", 2, Cause.DEMAND)],
    )
    core.apply(state, plan, CONFIG, 5.0, decision, {"cheap": ["cheap-3", "cheap-4"]})
    assert state.health["cheap"].kind == "protected"
    assert plan.counts.get("launches_on_closed_cloud") == 2
    assert "launched" not in plan.counts
    assert not plan.new and {"cheap-3", "cheap-4"}.isdisjoint(state.records)
