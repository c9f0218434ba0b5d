"""The live manager and the simulator are one engine: driven over the same workload,
with the same simulated clouds and batch system, they make the same transitions, in
the same order, at the same times, for the same causes.

The manager here is the real :class:`~elasticsite.manager.loop.Manager`, with its
SQLite store and its command runner; only its clock (the simulation's) and its pool
(one that runs a command when it is submitted, as the simulator does) are injected.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elasticsite import policies
from elasticsite.config import ManagerConfig
from elasticsite.manager.loop import Manager
from elasticsite.manager.store import StateStore
from elasticsite.model import Job, Transition
from elasticsite.sim.batch import SimBatch
from elasticsite.sim.cloud import CloudModel, Durations, SimCloud
from elasticsite.sim.elastic import SIM_SITE, SITE_NODE, ElasticRun
from elasticsite.sim.engine import Simulation
from elasticsite.workloads import WORKLOADS, get_workload

Arrival = tuple[float, int, float, float]
Log = list[tuple[str, str | None, str, float, str]]


class AtOnce(Executor):
    """An executor that runs each call when it is submitted."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def flat(transitions: Sequence[Transition]) -> Log:
    return [
        (t.worker_id, t.from_state.value if t.from_state else None, t.to_state.value, t.at,
         str(t.cause))
        for t in transitions
    ]  # fmt: skip


Seen = dict[str, tuple[tuple[float, ...], tuple[float, ...]]]


def seen_times(state: Any) -> Seen:
    """Each cloud's observed boots and shutdowns (the running estimates' windows)."""
    return {name: (tuple(t.boots), tuple(t.shutdowns)) for name, t in state.times.items()}


def simulator(
    arrivals: Sequence[Arrival], clouds: Sequence[CloudModel], policy: str, interval: float,
    seed: int, site_cores: int = 0, seen: Seen | None = None,
    cfg: policies.PolicySettings | None = None,
) -> Log:  # fmt: skip
    run = ElasticRun(
        arrivals, clouds, policies.get(policy), cfg or policies.PolicySettings(), interval,
        "easy", seed, site_cores=site_cores,
    )  # fmt: skip
    run.sim.run()
    assert not run.state.records, "the simulated site did not wind down"
    if seen is not None:
        seen.update(seen_times(run.state))
    return flat(run.log)


def manager(
    arrivals: Sequence[Arrival], clouds: Sequence[CloudModel], policy: str, interval: float,
    seed: int, db: Path, site_cores: int = 0, seen: Seen | None = None,
    cfg: policies.PolicySettings | None = None,
) -> Log:  # fmt: skip
    first = min(a[0] for a in arrivals)
    sim = Simulation(start=first)
    redirects = policies.get(policy).redirects
    batch = SimBatch(sim, "easy", node_partition="cloud" if redirects else "")
    if site_cores:
        batch.add_site_node(SITE_NODE, site_cores)
    rng = random.Random(seed)
    drivers = {c.name: SimCloud(c, sim, rng, batch) for c in clouds}
    jobs = [Job(str(i + 1), c, w, at, runtime=r) for i, (at, c, r, w) in enumerate(arrivals)]
    for job in jobs:
        sim.at(job.submitted_at, batch.arrive, job)
    store = StateStore(db)
    m = Manager(
        config=ManagerConfig(site_id=SIM_SITE, interval=interval),
        batch=batch,
        clouds=drivers,
        specs=[c.spec() for c in clouds],
        store=store,
        policy=policies.get(policy),
        settings=cfg or policies.PolicySettings(),
        clock=lambda: sim.now,
        executor=AtOnce(),
    )

    def tick(_: object) -> None:
        if len(batch.jobs) == len(jobs) and not batch.queue and not batch.running:
            m.state.shutting_down = True  # all work done: stop, draining, as the simulator
        m.step()
        if not (m.shutting_down and not m.records):
            sim.at(sim.now + interval, tick)

    sim.at(first, tick)
    sim.run()
    assert not m.records, "the managed site did not wind down"
    if seen is not None:
        seen.update(seen_times(m.state))
    log = flat(store.transitions())
    store.close()
    return log


def models(
    boots: Sequence[tuple[float, float]], limits: Sequence[int], shared: bool = False
) -> list[CloudModel]:
    """Clouds booting in ``low`` to ``low + spread`` s; ``shared``: at most 3 boots at once,
    each moving its image (15 s alone, or its whole boot if shorter) over one link."""
    return [
        CloudModel(
            name=f"c{i}",
            vm_limit=limit,
            boot=Durations.uniform(low, low + spread),
            shutdown=Durations.uniform(2.0, 8.0),
            price_per_hour=0.1 * (i + 1),
            billing_increment=1.0 if i else 3600.0,
            cores_per_vm=2,
            image_transfer=min(15.0, low) if shared else 0.0,
            parallel_boots=3 if shared else 0,
        )
        for i, ((low, spread), limit) in enumerate(zip(boots, limits, strict=True))
    ]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@pytest.mark.parametrize("policy", ["bursts", "on_demand", "steady_stream"])
def test_paper_000_workloads_give_identical_logs(name: str, policy: str, tmp_path: Path) -> None:
    arrivals = [(a.at, a.cores, a.runtime, a.walltime) for a in get_workload(name)]
    clouds = models([(50.0, 20.0)], [200])
    live = manager(arrivals, clouds, policy, 10.0, 1, tmp_path / "m.db")
    assert live == simulator(arrivals, clouds, policy, 10.0, 1)
    assert any(t[2] == "terminated" for t in live)


arrival = st.tuples(
    st.integers(0, 600).map(float),
    st.integers(1, 2),
    st.integers(0, 400).map(float),
    st.integers(1, 500).map(float),
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    arrivals=st.lists(arrival, min_size=1, max_size=25),
    boots=st.lists(st.tuples(st.integers(0, 120), st.integers(0, 60)), min_size=1, max_size=2),
    limit=st.integers(1, 12),
    # cloud_scheduler serves jobs naming a VM type only; these name none (its own tests)
    policy=st.sampled_from(sorted(set(policies.available()) - {"cloud_scheduler"})),
    interval=st.sampled_from([5.0, 10.0, 30.0]),
    seed=st.integers(0, 3),
    site_cores=st.sampled_from([0, 2, 4]),
    shared=st.booleans(),
)
def test_random_workloads_give_identical_logs(
    tmp_path_factory: pytest.TempPathFactory,
    arrivals: list[Arrival],
    boots: list[tuple[int, int]],
    limit: int,
    policy: str,
    interval: float,
    seed: int,
    site_cores: int,
    shared: bool,
) -> None:
    arrivals = [(at, c, r, max(w, 1.0)) for at, c, r, w in arrivals]
    clouds = models([(float(b), float(s)) for b, s in boots], [limit] * len(boots), shared)
    db = tmp_path_factory.mktemp("engine") / "m.db"
    assert manager(arrivals, clouds, policy, interval, seed, db, site_cores) == simulator(
        arrivals, clouds, policy, interval, seed, site_cores
    )


@pytest.mark.parametrize("policy", ["bursts", "on_demand"])
def test_a_budget_holds_back_the_same_launches_live_and_simulated(
    policy: str, tmp_path: Path
) -> None:
    """What was spent comes from the manager's bills and from the simulator's ledger;
    the budget the shared decision enforces on it holds back the same launches."""
    from elasticsite.spend import Budget

    arrivals = [(a.at, a.cores, a.runtime, a.walltime) for a in get_workload("workload2")]
    clouds = models([(50.0, 20.0), (30.0, 10.0)], [20, 20])
    cfg = policies.PolicySettings(budget=Budget(6.0, "day"))
    live = manager(arrivals, clouds, policy, 10.0, 1, tmp_path / "m.db", cfg=cfg)
    assert live == simulator(arrivals, clouds, policy, 10.0, 1, cfg=cfg)
    free = manager(arrivals, clouds, policy, 10.0, 1, tmp_path / "free.db")
    launched = len({t[0] for t in live})
    assert 0 < launched < len({t[0] for t in free})


@pytest.mark.parametrize("policy", ["naive", "shortest_queue", "weighted_queue", "selective"])
def test_redirecting_policies_give_identical_logs_on_a_site_with_its_own_node(
    policy: str, tmp_path: Path
) -> None:
    arrivals = [(a.at, a.cores, a.runtime, a.walltime) for a in get_workload("workload2")]
    clouds = models([(50.0, 20.0)], [20])
    live = manager(arrivals, clouds, policy, 10.0, 1, tmp_path / "m.db", site_cores=2)
    assert live == simulator(arrivals, clouds, policy, 10.0, 1, site_cores=2)
    assert any(t[2] == "terminated" for t in live)  # some jobs did burst to the cloud


@pytest.mark.parametrize("name", ["workload1", "workload2", "reactivity3"])
@pytest.mark.parametrize("policy", ["bursts", "steady_stream"])
def test_boot_estimates_are_the_same_live_and_simulated(
    name: str, policy: str, tmp_path: Path
) -> None:
    # Paper 000's contended cloud, configured far from what it shows (30 s): the
    # policies weigh the running estimate, and both drivers arrive at the same one.
    arrivals = [(a.at, a.cores, a.runtime, a.walltime) for a in get_workload(name)]
    clouds = [CloudModel.paper000("uchicago", boot_estimate=30.0)]
    live_seen: Seen = {}
    sim_seen: Seen = {}
    live = manager(arrivals, clouds, policy, 10.0, 1, tmp_path / "m.db", seen=live_seen)
    assert live == simulator(arrivals, clouds, policy, 10.0, 1, seen=sim_seen)
    assert live_seen == sim_seen
    boots, shutdowns = live_seen["uchicago"]
    assert any(b > 90.0 for b in boots) and all(5.0 <= s <= 7.0 or s == 6.0 for s in shutdowns)
