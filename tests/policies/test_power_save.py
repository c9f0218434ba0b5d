"""Slurm's power saving asks for nodes by name; elasticsite picks clouds within its limits."""

from __future__ import annotations

from elasticsite.model import Cause, CloudSpec, VMType, Worker, WorkerState
from elasticsite.policies import PolicySettings
from elasticsite.policies.power_save import decide_power
from elasticsite.snapshot import SiteSnapshot

SMALL = VMType("small", 1)


def cloud(name: str, max_instances: int, price: float = 0.0) -> CloudSpec:
    return CloudSpec(name, max_instances=max_instances, price_per_hour=price, vm_types=(SMALL,))


def worker(wid: str, node: str, state: WorkerState, cloud_name: str = "a") -> Worker:
    return Worker(wid, cloud_name, "small", 1, 0.0, state=state, node=node)


def snap(workers: list[Worker], clouds: list[CloudSpec]) -> SiteSnapshot:
    return SiteSnapshot(100.0, [], [], workers, clouds)


def test_each_node_resumed_gets_a_worker_named_for_it_on_the_cheapest_cloud() -> None:
    s = snap([], [cloud("dear", 4, 1.0), cloud("cheap", 4, 0.1)])
    out = decide_power(s, PolicySettings(), ["cloud1", "cloud2"], [])
    assert out.refused == []
    [launch] = out.decision.launch
    assert (launch.cloud, launch.count, launch.nodes) == ("cheap", 2, ("cloud1", "cloud2"))
    assert launch.cause is Cause.POWER_UP


def test_resumes_beyond_the_caps_are_refused_not_queued() -> None:
    s = snap([worker("a-1", "cloud9", WorkerState.IDLE)], [cloud("a", 2)])
    out = decide_power(s, PolicySettings(), ["cloud1", "cloud2", "cloud3"], [])
    assert out.decision.launched() == 1
    assert out.decision.launch[0].nodes == ("cloud1",)
    assert out.refused == ["cloud2", "cloud3"]


def test_spend_cap_limits_power_ups_too() -> None:
    s = snap([], [cloud("a", 10, 0.5)])
    out = decide_power(s, PolicySettings(spend_cap_per_hour=1.0), ["n1", "n2", "n3"], [])
    assert out.decision.launched() == 2 and out.refused == ["n3"]


def test_a_node_already_backed_by_a_live_worker_is_not_launched_twice() -> None:
    s = snap([worker("a-1", "cloud1", WorkerState.BOOTING)], [cloud("a", 4)])
    out = decide_power(s, PolicySettings(), ["cloud1"], [])
    assert not out.decision and out.refused == []


def test_suspend_terminates_the_nodes_worker_and_ignores_unknown_nodes() -> None:
    ws = [
        worker("a-1", "cloud1", WorkerState.IDLE),
        worker("a-2", "cloud2", WorkerState.TERMINATING),
        worker("a-3", "cloud3", WorkerState.TERMINATED),
    ]
    out = decide_power(snap(ws, [cloud("a", 4)]), PolicySettings(), [], ["cloud1", "cloud2", "x"])
    assert [(t.worker_id, t.cause) for t in out.decision.terminate] == [("a-1", Cause.POWER_DOWN)]


def test_draining_workers_are_not_reused_for_a_named_node() -> None:
    s = snap([worker("a-1", "cloud1", WorkerState.DRAINING)], [cloud("a", 4)])
    out = decide_power(s, PolicySettings(), ["cloud2"], [])
    assert not out.decision.undrain and out.decision.launch[0].nodes == ("cloud2",)
