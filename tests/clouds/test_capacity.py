"""The finite cloud's planner: what each policy does to make room, and whom it picks."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.clouds.capacity import Capacity, CapacityError
from elasticsite.clouds.capacity_policy import BREADBOARD_TYPES as T
from elasticsite.clouds.capacity_policy import (
    CloudPolicy,
    Migrate,
    Preempt,
    Restore,
    Resume,
    Shrink,
    Suspend,
)

XL = T["c1.xlarge"]


def full(fill: str, nodes: int = 1, volunteers: set[int] = frozenset()) -> Capacity:  # type: ignore[assignment]
    cap = Capacity.uniform(nodes)
    k = 0
    while True:
        try:
            cap.admit(f"vm{k}", T[fill], volunteer=k in volunteers)
        except CapacityError:
            return cap
        k += 1


def test_a_vm_that_fits_needs_no_action() -> None:
    cap = Capacity.uniform(1)
    plan = cap.plan(XL, CloudPolicy.PREEMPTION)
    assert plan is not None and plan.actions == ()


def test_a_full_cloud_refuses_and_says_why() -> None:
    cap = full("c1.xlarge")
    with pytest.raises(CapacityError, match=r"no host has room for a c1\.xlarge"):
        cap.admit("x", XL)


def test_urgent_only_refuses_non_urgent_requests_and_takes_urgent_ones() -> None:
    cap = Capacity.uniform(1, cores=8)
    cap.urgent_only = True
    with pytest.raises(CapacityError, match="urgent requests only"):
        cap.admit("a", XL)
    assert cap.admit("u", XL, urgent=True).urgent
    assert cap.plan(XL, CloudPolicy.URGENT_ONLY) is not None  # still room for one more
    cap.admit("u2", XL, urgent=True)
    assert cap.plan(XL, CloudPolicy.URGENT_ONLY) is None  # it touches nothing running


def test_preemption_takes_the_fewest_vms_and_never_an_urgent_one() -> None:
    cap = Capacity.uniform(1)
    cap.add("small1", T["m1.small"], "node01")
    cap.add("small2", T["m1.small"], "node01")
    cap.add("large", T["m1.large"], "node01")
    cap.add("urgent", T["m1.large"], "node01", urgent=True)
    cap.add("small3", T["m1.small"], "node01")
    cap.add("small4", T["m1.small"], "node01")
    plan = cap.plan(T["m1.large"], CloudPolicy.PREEMPTION)
    # Full (8 cores): one m1.large frees 2 cores, where two smalls would be two VMs.
    assert plan is not None and plan.actions == (Preempt("large"),)
    cap.apply(plan, "u2", T["m1.large"])
    assert "large" not in cap.slots and cap.slots["u2"].urgent


def test_volunteers_are_taken_first_even_when_more_are_needed() -> None:
    cap = Capacity.uniform(1)
    for k in range(4):
        cap.add(f"s{k}", T["m1.small"], "node01", volunteer=k < 2)
    cap.add("large", T["m1.large"], "node01")
    cap.add("large2", T["m1.large"], "node01")
    plan = cap.plan(T["m1.large"], CloudPolicy.PREEMPTION)
    assert plan is not None and set(plan.targets) == {"s0", "s1"}


def test_across_hosts_the_plan_with_fewest_then_smallest_targets_wins() -> None:
    cap = Capacity.uniform(2)
    cap.add("a1", T["c1.xlarge"], "node01")
    cap.add("a2", T["c1.xlarge"], "node01")
    for k in range(4):
        cap.add(f"b{k}", T["m1.large"], "node02")
    plan = cap.plan(XL, CloudPolicy.SUSPENSION)
    assert plan is not None and plan.host == "node01" and len(plan.targets) == 1
    cap2 = Capacity.uniform(2)
    cap2.add("a1", T["c1.xlarge"], "node01")
    cap2.add("a2", T["c1.xlarge"], "node01")
    cap2.add("b1", T["c1.xlarge"], "node02")
    for k in range(4):
        cap2.add(f"b{k + 2}", T["m1.small"], "node02")
    plan = cap2.plan(T["m1.small"], CloudPolicy.PREEMPTION)
    assert plan is not None and plan.host == "node02" and plan.targets[0].startswith("b")
    assert cap2.slots[plan.targets[0]].vm_type.name == "m1.small"  # the smallest


def test_suspended_vms_resume_when_the_urgent_vm_leaves() -> None:
    cap = full("c1.xlarge")
    plan = cap.plan(XL, CloudPolicy.SUSPENSION)
    assert plan is not None and isinstance(plan.actions[0], Suspend)
    cap.apply(plan, "u", XL)
    victim = plan.targets[0]
    assert cap.slots[victim].suspended and cap.free("node01") == (0, 16384 - 2 * 2048)
    assert cap.remove("u") == [Resume(victim)]
    assert not cap.slots[victim].suspended


def test_migration_moves_one_small_vm_to_where_it_fits() -> None:
    cap = Capacity.uniform(2)
    for k in range(5):
        cap.add(f"a{k}", T["m1.small"], "node01")
    for k in range(6):
        cap.add(f"b{k}", T["m1.small"], "node02")
    assert cap.place(XL) is None  # 3 cores free on node01, 2 on node02
    plan = cap.plan(XL, CloudPolicy.MIGRATION)
    assert plan is not None and plan.host == "node01"
    assert plan.actions == (Migrate(plan.targets[0], "node01", "node02"),)
    cap.apply(plan, "u", XL)
    assert cap.free("node01")[0] == 0 and cap.free("node02")[0] == 1


def test_migration_needs_room_elsewhere() -> None:
    assert full("m1.small", nodes=2).plan(XL, CloudPolicy.MIGRATION) is None


def test_qos_halves_volunteers_only_and_restores_them_afterwards() -> None:
    cap = full("c1.xlarge", volunteers={0})
    assert cap.plan(XL, CloudPolicy.QOS) is None  # one volunteer frees 2 of the 4 cores
    cap = full("c1.xlarge", volunteers={0, 1})
    plan = cap.plan(XL, CloudPolicy.QOS)
    assert plan is not None
    assert set(plan.actions) == {Shrink("vm0", 2, 1024), Shrink("vm1", 2, 1024)}
    cap.apply(plan, "u", XL)
    assert cap.slots["vm0"].shrunk
    assert sorted(cap.remove("u"), key=str) == [Restore("vm0"), Restore("vm1")]
    assert cap.slots["vm0"].cores == 4


def test_one_core_vms_cannot_give_cores_under_qos() -> None:
    assert full("m1.small", volunteers=set(range(8))).plan(XL, CloudPolicy.QOS) is None


def test_default_policy_touches_nothing() -> None:
    assert full("c1.xlarge").plan(XL, CloudPolicy.DEFAULT) is None


@settings(max_examples=150, deadline=None)
@given(
    fills=st.lists(st.sampled_from(sorted(T)), min_size=1, max_size=40),
    volunteer=st.lists(st.booleans(), min_size=40, max_size=40),
    urgent=st.sampled_from(sorted(T)),
    policy=st.sampled_from(list(CloudPolicy)),
    nodes=st.integers(1, 4),
)
def test_a_plan_never_overcommits_a_host_or_touches_urgent_vms(
    fills: list[str], volunteer: list[bool], urgent: str, policy: CloudPolicy, nodes: int
) -> None:
    cap = Capacity.uniform(nodes)
    for k, name in enumerate(fills):
        with contextlib.suppress(CapacityError):
            cap.admit(f"v{k}", T[name], urgent=k % 7 == 3, volunteer=volunteer[k])
    plan = cap.plan(T[urgent], policy)
    if plan is None:
        return
    before = {k: (s.urgent, s.cores) for k, s in cap.slots.items()}
    assert not any(before[t][0] for t in plan.targets)
    if policy is CloudPolicy.QOS:
        assert all(cap.slots[t].volunteer for t in plan.targets)
    cap.apply(plan, "urgent-new", T[urgent])
    for host in cap.hosts:
        cores, memory = cap.free(host)
        assert cores >= 0 and memory >= 0
    cap.remove("urgent-new")
    for host in cap.hosts:
        cores, memory = cap.free(host)
        assert cores >= 0 and memory >= 0
