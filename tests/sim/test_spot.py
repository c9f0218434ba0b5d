"""Spot capacity in the simulator: the cloud takes workers back at a configured rate;
noticed workers are drained, taken-back ones fail and their jobs run elsewhere."""

from __future__ import annotations

from elasticsite.model import Cause, WorkerState
from elasticsite.policies import PolicySettings
from elasticsite.sim.cloud import CloudModel, Durations
from elasticsite.sim.elastic import simulate_elastic


def spot(rate: float, notice: float = 120.0, price: float = 0.03) -> CloudModel:
    return CloudModel(
        "spot", spot=True, vm_limit=8, boot=Durations.constant(30.0),
        shutdown=Durations.constant(5.0), price_per_hour=price, billing_increment=1.0,
        interruptions_per_hour=rate, spot_notice=notice,
    )  # fmt: skip


def on_demand() -> CloudModel:
    return CloudModel(
        "ondemand", vm_limit=8, boot=Durations.constant(30.0), shutdown=Durations.constant(5.0),
        price_per_hour=0.10, billing_increment=1.0,
    )  # fmt: skip


ARRIVALS = [(i * 60.0, 1, 1800.0, 3600.0) for i in range(20)]


def causes(workers: list, cause: Cause) -> int:  # type: ignore[type-arg]
    return sum(1 for w in workers for t in w.history if t.cause == cause)


def test_interrupted_spot_workers_lose_no_job() -> None:
    r = simulate_elastic(ARRIVALS, [spot(rate=2.0)], "on_demand", seed=5)
    assert all(j.finished_at is not None for j in r.jobs), "a job was lost with its worker"
    interrupted = [w for w in r.workers if w.history[-1].cause == Cause.SPOT_INTERRUPTED]
    assert interrupted, "at two interruptions per VM-hour some worker must be taken back"
    assert all(w.state is WorkerState.FAILED for w in interrupted)
    assert causes(r.workers, Cause.SPOT_NOTICE) >= 1  # drained on notice first
    # Work was redone: the jobs' total runtime is counted once each, the workers' time more.
    assert len(r.workers) > 8


def test_no_interruptions_without_a_rate() -> None:
    r = simulate_elastic(ARRIVALS, [spot(rate=0.0)], "on_demand", seed=5)
    assert not causes(r.workers, Cause.SPOT_INTERRUPTED)
    assert not causes(r.workers, Cause.SPOT_NOTICE)


def test_spot_first_prefers_spot_and_uses_on_demand_when_spot_is_full() -> None:
    arrivals = [(0.0, 1, 600.0, 1200.0)] * 12
    r = simulate_elastic(
        arrivals, [on_demand(), spot(rate=0.0, price=0.2)], "on_demand",
        PolicySettings(cloud_rule="spot_first"), seed=1,
    )  # fmt: skip
    by_cloud = {c: sum(1 for w in r.workers if w.cloud == c) for c in ("spot", "ondemand")}
    assert by_cloud == {"spot": 8, "ondemand": 4}  # spot first despite its price


def test_same_seed_same_interruptions() -> None:
    a = simulate_elastic(ARRIVALS, [spot(rate=1.0)], "on_demand", seed=9)
    b = simulate_elastic(ARRIVALS, [spot(rate=1.0)], "on_demand", seed=9)
    assert [j.finished_at for j in a.jobs] == [j.finished_at for j in b.jobs]
