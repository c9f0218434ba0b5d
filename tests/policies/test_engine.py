"""engine.evaluate: the lifecycle rules around every policy (stall, drained, spend cap)."""

from __future__ import annotations

import pytest

from elasticsite.model import Cause, Decision, Drain, Launch, Terminate, Undrain
from elasticsite.plugins import PolicyPlugin
from elasticsite.policies import PolicySettings, evaluate

from .conftest import S, cloud, job, jobs, run, snap, worker

# -- stalled workers -------------------------------------------------------------------


def test_pending_worker_older_than_the_stall_timeout_is_terminated_and_replaced():
    site = snap([], [worker("p", S.REQUESTED, requested_at=0.0)], now=601.0)
    assert run("dedicated", site, dedicated_workers=1) == Decision(
        launch=[Launch("a", "small", 1, Cause.REPLACEMENT)],
        terminate=[Terminate("p", Cause.STALLED)],
    )


def test_pending_worker_at_exactly_the_stall_timeout_is_not_stalled():
    site = snap([], [worker("p", S.BOOTING, requested_at=0.0)], now=600.0)
    assert run("dedicated", site, dedicated_workers=1) == Decision()


def test_booting_workers_stall_too_and_joined_ones_never_do():
    site = snap(
        [],
        [
            worker("old-idle", S.IDLE, requested_at=0.0),
            worker("old-busy", S.BUSY, requested_at=0.0),
            worker("old-boot", S.BOOTING, requested_at=0.0),
        ],
        now=10_000.0,
    )
    assert run("dedicated", site, dedicated_workers=3) == Decision(
        launch=[Launch("a", "small", 1, Cause.REPLACEMENT)],
        terminate=[Terminate("old-boot", Cause.STALLED)],
    )


def test_stall_timeout_setting():
    site = snap([], [worker("p", S.REQUESTED, requested_at=900.0)], now=1000.0)
    assert run("dedicated", site, dedicated_workers=1, stall_timeout=99.0).terminate == [
        Terminate("p", Cause.STALLED)
    ]
    assert run("dedicated", site, dedicated_workers=1, stall_timeout=100.0) == Decision()


def test_only_as_many_launches_as_stalled_workers_are_labelled_replacements():
    site = snap(jobs(3), [worker("p", S.BOOTING, requested_at=0.0)])
    assert run("on_demand", site) == Decision(
        launch=[
            Launch("a", "small", 1, Cause.REPLACEMENT),
            Launch("a", "small", 2, Cause.DEMAND),
        ],
        terminate=[Terminate("p", Cause.STALLED)],
    )


def test_replacement_labels_run_across_clouds_in_launch_order():
    def fixed(snapshot, settings):
        return Decision(
            launch=[Launch("a", "small", 1, Cause.DEMAND), Launch("b", "small", 3, Cause.DEMAND)]
        )

    site = snap(
        [],
        [worker("p1", S.REQUESTED, cloud="b"), worker("p2", S.BOOTING, cloud="b")],
        [cloud("a"), cloud("b")],
    )
    assert evaluate(PolicyPlugin(fixed), site, PolicySettings()).launch == [
        Launch("a", "small", 1, Cause.REPLACEMENT),
        Launch("b", "small", 1, Cause.REPLACEMENT),
        Launch("b", "small", 2, Cause.DEMAND),
    ]


def test_stalled_worker_is_replaced_at_once_where_there_is_room():
    site = snap(jobs(1), [worker("p", S.BOOTING, requested_at=0.0)], [cloud(max_instances=2)])
    assert run("on_demand", site) == Decision(
        launch=[Launch("a", "small", 1, Cause.REPLACEMENT)],
        terminate=[Terminate("p", Cause.STALLED)],
    )


def test_stalled_worker_holds_its_cloud_slot_until_it_is_gone():
    site = snap(jobs(1), [worker("p", S.BOOTING, requested_at=0.0)], [cloud(max_instances=1)])
    assert run("on_demand", site) == Decision(terminate=[Terminate("p", Cause.STALLED)])


def test_stalled_worker_without_demand_is_terminated_and_not_replaced():
    site = snap([], [worker("p", S.REQUESTED, requested_at=0.0)])
    assert run("on_demand", site) == Decision(terminate=[Terminate("p", Cause.STALLED)])


def test_undrain_standing_in_for_a_stalled_worker_is_not_a_launch():
    site = snap(jobs(1), [worker("p", S.REQUESTED, requested_at=0.0), worker("d", S.DRAINING)])
    assert run("on_demand", site) == Decision(
        undrain=[Undrain("d", Cause.DEMAND_RETURNED)],
        terminate=[Terminate("p", Cause.STALLED)],
    )


# -- drained workers -----------------------------------------------------------------


def test_draining_worker_with_no_job_left_is_terminated():
    site = snap([], [worker("d", S.DRAINING, running=0), worker("busy-d", S.DRAINING, running=2)])
    assert run("on_demand", site) == Decision(terminate=[Terminate("d", Cause.DRAINED)])


def test_drained_worker_is_put_back_rather_than_replaced_when_demand_returns():
    site = snap(jobs(3), [worker("d", S.DRAINING, running=0)])
    assert run("on_demand", site) == Decision(
        launch=[Launch("a", "small", 2, Cause.DEMAND)],
        undrain=[Undrain("d", Cause.DEMAND_RETURNED)],
    )


def test_drained_workers_beyond_demand_are_terminated():
    site = snap(jobs(1), [worker("d1", S.DRAINING, running=0), worker("d2", S.DRAINING, running=0)])
    assert run("on_demand", site) == Decision(
        undrain=[Undrain("d1", Cause.DEMAND_RETURNED)],
        terminate=[Terminate("d2", Cause.DRAINED)],
    )


def test_stall_and_drained_together():
    site = snap(
        [],
        [worker("d", S.DRAINING, running=0), worker("p", S.BOOTING, requested_at=0.0)],
        now=5000.0,
    )
    assert run("steady_stream", site) == Decision(
        undrain=[Undrain("d", Cause.DEMAND_RETURNED)],
        terminate=[Terminate("p", Cause.STALLED)],
    )


# -- spend cap -------------------------------------------------------------------------


def test_spend_cap_drains_the_dearest_idle_workers_until_under_it():
    site = snap(
        jobs(4),
        [
            worker("cheap", cloud="cheap"),
            worker("dear2", cloud="dear"),
            worker("dear1", cloud="dear"),
            worker("busy", S.BUSY, cloud="dear"),
        ],
        [cloud("cheap", price=0.2), cloud("dear", price=0.5)],
    )
    # 1.7 per hour against a cap of 1.0: two dear idle workers go (1.2, then 0.7).
    assert run("on_demand", site, spend_cap_per_hour=1.0) == Decision(
        drain=[Drain("dear1", Cause.SPEND_CAP), Drain("dear2", Cause.SPEND_CAP)]
    )


def test_spend_cap_drains_ignore_paid_time():
    hourly = cloud(price=1.0, billing=3600.0)
    site = snap([job()], [worker("fresh", requested_at=990.0), worker("b", S.BUSY)], [hourly])
    assert run("on_demand", site, spend_cap_per_hour=1.0) == Decision(
        drain=[Drain("fresh", Cause.SPEND_CAP)]
    )


def test_spend_cap_never_drains_busy_workers_even_when_still_over():
    site = snap([], [worker(f"b{k}", S.BUSY) for k in range(3)], [cloud(price=0.5)])
    assert run("on_demand", site, spend_cap_per_hour=1.0) == Decision()


def test_spend_cap_does_not_drain_a_worker_twice():
    hourly = cloud(price=1.0, billing=3600.0)
    ending = worker("ending", requested_at=-2550.0)  # the policy releases it at its boundary
    fresh = worker("fresh", requested_at=990.0)  # the policy keeps it: paid for
    site = snap([], [ending, fresh], [hourly])
    assert run("on_demand", site) == Decision(drain=[Drain("ending", Cause.BILLING_BOUNDARY)])
    assert run("on_demand", site, spend_cap_per_hour=0.5) == Decision(
        drain=[Drain("ending", Cause.BILLING_BOUNDARY), Drain("fresh", Cause.SPEND_CAP)]
    )


def test_terminating_and_terminated_workers_do_not_count_against_the_cap():
    site = snap(
        [],
        [worker("t", S.TERMINATING), worker("i"), worker("x", S.TERMINATED)],
        [cloud(price=1.0)],
    )
    assert run("steady_stream", site, spend_cap_per_hour=1.0) == Decision()


def test_replacement_of_a_stalled_worker_stays_under_the_cap():
    site = snap(
        [],
        [worker("p", S.BOOTING, requested_at=0.0), worker("i")],
        [cloud(price=1.0)],
        now=5000.0,
    )
    assert run("dedicated", site, dedicated_workers=2, spend_cap_per_hour=1.0) == Decision(
        terminate=[Terminate("p", Cause.STALLED)]
    )
    # The stalled instance is paid for until it is gone, so the replacement needs room
    # for three.
    assert run("dedicated", site, dedicated_workers=2, spend_cap_per_hour=2.0) == Decision(
        terminate=[Terminate("p", Cause.STALLED)]
    )
    assert run("dedicated", site, dedicated_workers=2, spend_cap_per_hour=3.0) == Decision(
        launch=[Launch("a", "small", 1, Cause.REPLACEMENT)],
        terminate=[Terminate("p", Cause.STALLED)],
    )


def test_under_the_cap_nothing_is_drained_for_it():
    site = snap(jobs(2), [worker("i1"), worker("i2")], [cloud(price=0.5)])
    assert run("on_demand", site, spend_cap_per_hour=1.0) == Decision()


@pytest.mark.parametrize(
    ("policy", "launched"),
    [("on_demand", 2), ("steady_stream", 1), ("bursts", 2), ("core_demand", 2), ("dedicated", 2)],
)
def test_launches_never_push_spend_over_the_cap(policy, launched):
    # 0.3 spent of 1.0: two more workers at 0.3 fit, a third would not.
    site = snap(jobs(20, walltime=3600), [worker("b", S.BUSY)], [cloud(price=0.3)])
    d = run(policy, site, spend_cap_per_hour=1.0, dedicated_workers=20)
    assert d == Decision(launch=[Launch("a", "small", launched, d.launch[0].cause)])
    assert d.launch[0].cause is (Cause.BASELINE if policy == "dedicated" else Cause.DEMAND)
