"""Properties every registered policy keeps on random sites, through engine.evaluate.

Random queues, workers in every state across one to three clouds with random
capacity, prices and billing, random settings (cap, cloud rule, margin, stall).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elasticsite import feasibility, servable
from elasticsite.model import Cause, CloudSpec, Job, VMType, Worker, WorkerState
from elasticsite.policies import (
    CLOUD_RULES,
    PolicySettings,
    available,
    evaluate,
    get,
    options_of,
    settings_for,
)
from elasticsite.policies.redirect import redirect_target
from elasticsite.policies.steady_stream import SteadyStreamOptions
from elasticsite.snapshot import SiteSnapshot

S = WorkerState
POLICIES = available()
EPS = 1e-6

common = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# The strategies are built once: hypothesis validates and caches each strategy object on
# its first draw, and building them again for every example was most of these tests' CPU.
ints = functools.cache(st.integers)
"""``st.integers(lo, hi)``, one strategy object per bounds (the bounds vary per example)."""
PRICES = st.sampled_from([0.0, 0.05, 0.1, 0.25, 0.3, 0.5, 1.0, 2.0])
BILLINGS = st.sampled_from([1.0, 60.0, 600.0, 3600.0])
BOOTS = st.sampled_from([0.0, 30.0, 60.0, 300.0])
SHUTDOWNS = st.sampled_from([0.0, 10.0, 60.0])
STATES = st.sampled_from(list(WorkerState))
CLOUD_NAMES = {n: st.sampled_from([f"c{i}" for i in range(n)] + ["retired"]) for n in (1, 2, 3)}
"""Where a worker is: one of ``n`` clouds, or one no longer configured."""


@functools.cache
def idle_free(cores: int) -> st.SearchStrategy[int]:
    """An idle worker's free cores: none reported yet, or all of them."""
    return st.sampled_from((0, cores))


@st.composite
def sites(draw) -> SiteSnapshot:
    clouds = []
    for i in range(draw(ints(1, 3))):
        clouds.append(
            CloudSpec(
                f"c{i}",
                max_instances=draw(ints(0, 6)),
                price_per_hour=draw(PRICES),
                billing_increment=draw(BILLINGS),
                boot_time=draw(BOOTS),
                shutdown_time=draw(SHUTDOWNS),
                vm_types=(VMType("small", cores=draw(ints(1, 8))),),
            )
        )
    names = CLOUD_NAMES[len(clouds)]
    now = draw(ints(0, 20_000))
    workers = []
    for i in range(draw(ints(0, 12))):
        state = draw(STATES)
        cores = draw(ints(1, 8))
        running, free = 0, 0
        if state is S.IDLE:
            free = draw(idle_free(cores))
        elif state is S.BUSY:
            running = draw(ints(1, 4))
            free = draw(ints(0, cores - 1))
        elif state is S.DRAINING:
            running = draw(ints(0, 2))
            free = draw(ints(0, cores))
        workers.append(
            Worker(
                f"w{i}",
                draw(names),
                "small",
                cores,
                requested_at=float(draw(ints(0, now))),
                state=state,
                running_jobs=running,
                free_cores=free,
            )
        )
    queued = [
        Job(
            f"j{k}",
            cores=draw(ints(1, 16)),
            walltime=float(draw(ints(1, 20_000))),
            submitted_at=0.0,
        )
        for k in range(draw(ints(0, 15)))
    ]
    return SiteSnapshot(now=float(now), queued=queued, running=[], workers=workers, clouds=clouds)


policy_settings = st.builds(
    # on_demand has no options of its own: its model is the built-in policies' joined, so
    # these settings hold every built-in's thresholds, whichever policy decides with them
    lambda **values: settings_for("on_demand", **values),
    steady_min_workers=st.integers(1, 3),
    bursts_factor=st.sampled_from([1.0, 2.0, 3.0]),
    dedicated_workers=st.integers(0, 8),
    spend_cap_per_hour=st.none() | st.sampled_from([0.0, 0.1, 0.5, 1.0, 1.5, 2.0, 5.0]),
    cloud_rule=st.sampled_from(sorted(CLOUD_RULES)),
    billing_margin=st.sampled_from([0.0, 60.0, 120.0, 600.0]),
    stall_timeout=st.sampled_from([60.0, 600.0, 1200.0]),
)


class Outcome:
    """One evaluation and the quantities the properties are stated in."""

    def __init__(self, policy: str, site: SiteSnapshot, cfg: PolicySettings):
        self.site, self.cfg = site, cfg
        self.d = evaluate(get(policy), site, cfg)
        self.by_id = {w.id: w for w in site.workers}
        self.prices = {c.name: c.price_per_hour for c in site.clouds}
        self.terminated = {t.worker_id for t in self.d.terminate}
        self.stalled = {t.worker_id for t in self.d.terminate if t.cause is Cause.STALLED}
        self.drained = {x.worker_id for x in self.d.drain}
        self.undrained = {x.worker_id for x in self.d.undrain}
        # What the policy saw: every live worker, the stalled ones as leaving (their
        # instances hold their cloud's slot and cost until the cloud confirms them gone).
        self.view = [w for w in site.workers if w.state.live]
        self.remaining = [w for w in self.view if w.id not in self.terminated]
        # The jobs some cloud (or worker) could serve, and which workers they could use.
        # The engine judges them with the stalled workers leaving, as the policy sees them.
        redirect = redirect_target(cfg) if get(policy).redirects else None
        judged = feasibility.judge(site.clouds, site.closed, redirect)
        leaving = [replace(w, state=S.TERMINATING) if w.id in self.stalled else w
                   for w in site.workers]  # fmt: skip
        self.verdict = servable.split(site.with_workers(leaving), judged)

    def usable(self, w: Worker) -> bool:
        """Some queued job the clouds could serve could run on ``w``."""
        return self.verdict.usable(w)

    def price(self, w: Worker) -> float:
        return self.prices.get(w.cloud, 0.0)

    @property
    def spend_seen(self) -> float:
        """What the policy saw the site spend (stalled workers included)."""
        return sum(self.price(w) for w in self.view)

    @property
    def launch_spend(self) -> float:
        return sum(self.prices[x.cloud] * x.count for x in self.d.launch)

    def live(self, workers: list[Worker], cloud: str) -> int:
        return sum(1 for w in workers if w.cloud == cloud)

    def serving(self) -> list[Worker]:
        return [
            w for w in self.view if (w.state.pending and w.id not in self.stalled) or w.state.joined
        ]

    def under_cap(self) -> bool:
        cap = self.cfg.spend_cap_per_hour
        return cap is None or self.spend_seen <= cap

    def has_capacity(self, for_queue: bool = False) -> bool:
        """Some cloud has a free slot the cap clearly allows (``for_queue``: and a VM
        type one of the queued jobs the clouds can serve fits)."""
        cap = self.cfg.spend_cap_per_hour
        spend = self.spend_seen
        judged = self.verdict.judge
        return any(
            self.live(self.view, c.name) < c.max_instances
            and (cap is None or spend + c.price_per_hour <= cap - EPS)
            and (
                not for_queue
                or any(judged.launch_type(judged.key(j), c) for j in self.verdict.feasible)
            )
            for c in self.site.clouds
        )


def launches_fit_every_clouds_max_instances(o: Outcome) -> None:
    site = o.site
    for x in o.d.launch:
        assert x.count > 0
        assert x.vm_type == site.cloud(x.cloud).default_vm.name
    # Workers this decision terminates still hold their slot until they are gone.
    for c in site.clouds:
        launched = o.d.launched(c.name)
        assert launched <= max(0, c.max_instances - o.live(o.view, c.name)), c.name


def projected_spend_stays_under_the_cap(o: Outcome) -> None:
    cap = o.cfg.spend_cap_per_hour
    if cap is None:
        return
    projected = sum(o.price(w) for w in o.remaining) + o.launch_spend
    if o.spend_seen <= cap:
        assert projected <= cap + EPS
        assert all(x.cause is not Cause.SPEND_CAP for x in o.d.drain)
    if o.spend_seen > cap:
        # Over the cap: nothing priced is launched.
        assert o.launch_spend == 0
    # Idle workers are drained until the site is back under the cap or none is left.
    staying = [w for w in o.remaining if w.id not in o.drained and w.state is not S.TERMINATING]
    after = sum(o.price(w) for w in staying) + o.launch_spend
    assert after <= cap + EPS or not any(w.state is S.IDLE for w in staying)


def only_idle_are_drained_only_draining_undrained_and_no_busy_touched(o: Outcome) -> None:
    site, cfg = o.site, o.cfg
    ids = (
        [x.worker_id for x in o.d.drain]
        + [x.worker_id for x in o.d.undrain]
        + [x.worker_id for x in o.d.terminate]
    )
    assert len(ids) == len(set(ids)), o.d
    assert all(o.by_id[i].state is S.IDLE for i in o.drained)
    assert all(o.by_id[i].state is S.DRAINING for i in o.undrained)
    for t in o.d.terminate:
        w = o.by_id[t.worker_id]
        assert w.state is not S.BUSY
        if t.cause is Cause.STALLED:
            assert w.state.pending and site.now - w.requested_at > cfg.stall_timeout
        else:
            assert t.cause is Cause.DRAINED
            assert w.state is S.DRAINING and w.running_jobs == 0


def every_stalled_and_every_drained_worker_is_dealt_with(o: Outcome) -> None:
    site, cfg = o.site, o.cfg
    for w in site.workers:
        if w.state.pending and site.now - w.requested_at > cfg.stall_timeout:
            assert w.id in o.stalled
        if w.state is S.DRAINING and w.running_jobs == 0:
            assert (w.id in o.terminated) != (w.id in o.undrained)
    replacements = sum(x.count for x in o.d.launch if x.cause is Cause.REPLACEMENT)
    assert replacements == min(len(o.stalled), o.d.launched())


def undrain_comes_before_any_launch(o: Outcome) -> None:
    if o.d.launch:
        still_draining = [
            w for w in o.view if w.state is S.DRAINING and w.id not in o.undrained and o.usable(w)
        ]
        # Whoever launches has put every draining worker back first (those that just
        # finished their last job included) that some queued job could use.
        assert not still_draining


def decisions_are_deterministic_and_leave_the_snapshot_alone(
    policy: str, site: SiteSnapshot, cfg: PolicySettings
) -> None:
    before = copy.deepcopy(site)
    first = evaluate(get(policy), site, cfg)
    assert site == before
    assert evaluate(get(policy), site, cfg) == first
    assert evaluate(get(policy), copy.deepcopy(site), cfg) == first
    assert site == before


def bursts_answers_a_waiting_queue_with_no_serving_worker(o: Outcome) -> None:
    if o.verdict.feasible and not o.serving() and o.has_capacity(for_queue=True):
        assert o.d.launched() + len(o.d.undrain) >= 1


def steady_stream_keeps_its_baseline(o: Outcome) -> None:
    serving = len(o.serving())
    if serving and o.under_cap():
        # A draining worker put back serves again.
        back = len(o.undrained - o.terminated)
        floor = options_of(o.cfg, SteadyStreamOptions).steady_min_workers
        assert serving - len(o.drained) + back >= min(serving, floor)
    # While jobs some cloud could serve wait, a new worker must be one they could use.
    if not serving and o.has_capacity(for_queue=bool(o.verdict.feasible)):
        assert o.d.launched() + len(o.d.undrain) >= 1


def nothing_is_released_while_jobs_wait(o: Outcome) -> None:
    if o.verdict.feasible:
        # Only what no job that can be served could use goes (or the cap says so).
        assert all(
            x.cause is Cause.SPEND_CAP or not o.usable(o.by_id[x.worker_id]) for x in o.d.drain
        )


EVERY_POLICY_KEEPS = (
    launches_fit_every_clouds_max_instances,
    projected_spend_stays_under_the_cap,
    only_idle_are_drained_only_draining_undrained_and_no_busy_touched,
    every_stalled_and_every_drained_worker_is_dealt_with,
    undrain_comes_before_any_launch,
)
ONE_POLICY_KEEPS = {
    "bursts": (bursts_answers_a_waiting_queue_with_no_serving_worker,
               nothing_is_released_while_jobs_wait),
    "on_demand": (nothing_is_released_while_jobs_wait,),
    "steady_stream": (steady_stream_keeps_its_baseline,),
}  # fmt: skip


@pytest.mark.parametrize("policy", POLICIES)
@common
@given(site=sites(), cfg=policy_settings)
def test_every_policy_keeps_its_properties(policy, site, cfg):
    """Each random site is judged by every property the policy keeps: generating the
    site is most of an example's CPU, so the properties share it. Each property is
    still checked on ``common``'s examples per policy, as when each had a test."""
    decisions_are_deterministic_and_leave_the_snapshot_alone(policy, site, cfg)
    o = Outcome(policy, site, cfg)
    for keeps in EVERY_POLICY_KEEPS + ONE_POLICY_KEEPS.get(policy, ()):
        keeps(o)


@st.composite
def core_surplus_sites(draw) -> SiteSnapshot:
    """Joined workers of mixed sizes and a queue that needs some of their cores."""
    spec = CloudSpec("c0", max_instances=20, vm_types=(VMType("small", cores=4),))
    workers = [
        Worker(
            f"w{i}",
            "c0",
            "small",
            cores,
            requested_at=0.0,
            state=S.IDLE if idle else S.BUSY,
            running_jobs=0 if idle else 1,
            free_cores=cores if idle else 0,
        )
        for i, (cores, idle) in enumerate(
            draw(st.lists(st.tuples(st.integers(1, 8), st.booleans()), max_size=8))
        )
    ]
    queued = [
        Job(f"j{k}", cores=c, walltime=60.0, submitted_at=0.0)
        for k, c in enumerate(draw(st.lists(st.integers(1, 8), max_size=4)))
    ]
    return SiteSnapshot(now=100.0, queued=queued, running=[], workers=workers, clouds=[spec])


def free_cores(workers: list[Worker]) -> int:
    return sum(
        (w.free_cores or w.cores) if w.state is S.IDLE else w.free_cores
        for w in workers
        if w.state.joined
    )


@common
@given(site=sites() | core_surplus_sites(), cfg=policy_settings)
def test_core_demand_never_releases_cores_queued_jobs_need(site, cfg):
    o = Outcome("core_demand", site, cfg)
    released = [o.by_id[x.worker_id] for x in o.d.drain if x.cause is not Cause.SPEND_CAP]
    # Idle workers no queued job the clouds could serve could use are no capacity for it.
    useful = [w for w in o.remaining if w.state is not S.IDLE or o.usable(w)]
    released = [w for w in released if o.usable(w)]
    if released:
        wanted = sum(j.cores for j in o.verdict.feasible)
        assert free_cores(useful) - free_cores(released) >= wanted


def test_the_properties_of_one_policy_name_a_registered_policy():
    assert set(ONE_POLICY_KEEPS) <= set(POLICIES)
