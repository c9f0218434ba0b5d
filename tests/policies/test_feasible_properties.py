"""Capacity only for work it can run: properties every registered policy keeps.

Random sites with several VM types per cloud, ``serves`` selectors, closed clouds,
jobs naming VM types, partitions, node counts and memory, idle and booting workers of
every type. The oracle below is written apart from :mod:`elasticsite.feasibility`:

* no launch is of a worker that no queued job could use: each launch is on an open
  cloud, of a type some servable queued job fits there (with nothing servable queued,
  only a baseline launches, and then the cloud's default type);
* no idle worker is kept for jobs it cannot run: an idle worker no servable queued job
  could use is released as if nothing were queued. What may still keep it is what
  keeps an idle worker then: a paid hourly worker with more than ``billing_margin``
  seconds of paid time left, and a policy's own floor (steady stream's minimum,
  dedicated's pool) — never more of them than that floor.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elasticsite.attributes import EMPTY, EVERY_JOB, Selector
from elasticsite.model import Cause, CloudSpec, Decision, Job, VMType, Worker, WorkerState
from elasticsite.policies import PolicySettings, available, evaluate, get, options_of, settings_for
from elasticsite.policies.dedicated import DedicatedOptions
from elasticsite.policies.planning import paid_time_left
from elasticsite.policies.redirect import redirect_target
from elasticsite.policies.steady_stream import SteadyStreamOptions
from elasticsite.snapshot import SiteSnapshot

S = WorkerState
POLICIES = available()
TYPES = (
    VMType("small", 1, 2048),
    VMType("medium", 4, 8192),
    VMType("large", 16, 32768),
    VMType("gpu", 8, 65536),
)
SELECTORS = (
    EVERY_JOB,
    EVERY_JOB,
    Selector.of({"partition": ["cloud"]}),
    Selector.of({"partition": ["cloud", "gpu"]}),
)
common = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# The strategies are built once: hypothesis validates and caches each strategy object on
# its first draw, and building them again for every draw was most of these tests' CPU.
ints = functools.cache(st.integers)
"""``st.integers(lo, hi)``, one strategy object per bounds (some vary per example)."""
PARTITIONS = st.sampled_from(["cloud", "site", "gpu"])
NAMED_TYPES = st.sampled_from(["small", "large", "gpu", "tiny"])
MEMORIES = st.sampled_from([1024, 16384, 100_000])
TYPE_SETS = st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True)
PRICES = st.sampled_from([0.0, 0.1, 1.0])
BILLINGS = st.sampled_from([1.0, 3600.0])
BOOTS = st.sampled_from([10.0, 60.0, 300.0])
SHUTDOWNS = st.sampled_from([5.0, 60.0])
SERVES = st.sampled_from(SELECTORS)
STATES = st.sampled_from([S.IDLE, S.IDLE, S.BOOTING, S.REQUESTED, S.BUSY, S.DRAINING,
                          S.TERMINATING])  # fmt: skip
ANY_TYPE = st.sampled_from(TYPES)
CORES = st.sampled_from([1, 1, 2, 4, 8, 16, 32, 64])
SITE_CORES = st.sampled_from([0, 0, 16])


@functools.cache
def one_of(values: tuple[str, ...]) -> st.SearchStrategy[str]:
    """``st.sampled_from(values)``, one strategy object per tuple of values."""
    return st.sampled_from(values)


@st.composite
def attributes(draw: st.DrawFn) -> Mapping[str, str]:
    found = {}
    if draw(st.booleans()):
        found["partition"] = draw(PARTITIONS)
    if draw(ints(0, 3)) == 0:
        found["vm_type"] = draw(NAMED_TYPES)
    if draw(ints(0, 3)) == 0:
        found["node_count"] = str(draw(ints(1, 4)))
    if draw(ints(0, 4)) == 0:
        found["vm_memory"] = str(draw(MEMORIES))
    return found or EMPTY


@st.composite
def sites(draw: st.DrawFn) -> SiteSnapshot:
    clouds = []
    for i in range(draw(ints(1, 3))):
        types = draw(TYPE_SETS)
        clouds.append(
            CloudSpec(
                f"c{i}",
                max_instances=draw(ints(0, 6)),
                price_per_hour=draw(PRICES),
                billing_increment=draw(BILLINGS),
                boot_time=draw(BOOTS),
                shutdown_time=draw(SHUTDOWNS),
                vm_types=tuple(types),
                serves=draw(SERVES),
            )
        )
    names = [c.name for c in clouds]
    closed = frozenset(draw(st.sets(one_of(tuple(names)))))
    now = draw(ints(0, 20_000))
    places = [*clouds, None]  # None: a cloud no longer configured
    workers = []
    for i in range(draw(ints(0, 10))):
        state = draw(STATES)
        where = places[draw(ints(0, len(clouds)))]
        if where is None:
            vm = draw(ANY_TYPE)
        else:
            vm = where.vm_types[draw(ints(0, len(where.vm_types) - 1))]
        busy = state in (S.BUSY, S.DRAINING)
        workers.append(
            Worker(
                f"w{i}",
                where.name if where is not None else "retired",
                vm.name,
                vm.cores,
                requested_at=float(draw(ints(max(0, now - 7200), now))),
                state=state,
                running_jobs=draw(ints(0, 1)) if busy else 0,
                free_cores=vm.cores if state is S.IDLE else 0,
            )
        )
    queued = [
        Job(
            f"j{k}",
            cores=draw(CORES),
            walltime=float(draw(ints(1, 20_000))),
            submitted_at=0.0,
            attributes=draw(attributes()),
        )
        for k in range(draw(ints(0, 8)))
    ]
    site = SiteSnapshot(float(now), queued, [], workers, clouds)
    site.closed = closed
    site.site_cores = draw(SITE_CORES)
    return site


policy_settings = st.builds(
    # every built-in's thresholds (on_demand's model is the built-ins' joined)
    lambda **values: settings_for("on_demand", **values),
    steady_min_workers=st.integers(1, 3),
    dedicated_workers=st.integers(0, 6),
    spend_cap_per_hour=st.none() | st.sampled_from([0.5, 2.0, 5.0]),
    cloud_rule=st.sampled_from(["cheapest", "fastest", "ordered", "balanced", "spot_first"]),
    billing_margin=st.sampled_from([0.0, 120.0, 600.0]),
    stall_timeout=st.sampled_from([600.0, 100_000.0]),
)


class Oracle:
    """Which queued jobs the site could serve and which workers they could use,
    computed the plain way: every job against every type of every cloud."""

    def __init__(self, site: SiteSnapshot, redirect_to: str | None, stall: float) -> None:
        self.site = site
        self.redirect_to = redirect_to
        # Workers that will run jobs: joined, or on their way and not given up as stalled.
        self.serving = [
            w
            for w in site.workers
            if w.state in (S.IDLE, S.BUSY)
            or (w.state in (S.REQUESTED, S.BOOTING) and site.now - w.requested_at <= stall)
        ]
        self.specs = {c.name: c for c in site.clouds}
        self.servable = [j for j in site.queued if self._servable(j)]

    def _serves(self, cloud: CloudSpec, job: Job) -> bool:
        attrs = dict(job.attributes)
        if cloud.serves.matches(attrs):
            return True
        return self.redirect_to is not None and cloud.serves.matches(
            {**attrs, "partition": self.redirect_to}
        )

    @staticmethod
    def _nodes(job: Job) -> int:
        raw = job.attributes.get("node_count", "1")
        return int(raw) if raw.isdigit() and int(raw) > 0 else 1

    def fits(self, job: Job, cloud: CloudSpec | None, vm_name: str, cores: int) -> bool:
        """Whether a worker of ``vm_name`` with ``cores`` on ``cloud`` runs one node of ``job``."""
        per_node = -(-job.cores // self._nodes(job))
        named = job.attributes.get("vm_type")
        if cores < per_node or (named is not None and named != vm_name):
            return False
        if cloud is None:
            return True
        vm = next((v for v in cloud.vm_types if v.name == vm_name), None)
        memory = job.attributes.get("vm_memory")
        if vm is not None and memory is not None and int(memory) > vm.memory_mb:
            return False
        return self._serves(cloud, job)

    def _servable(self, job: Job) -> bool:
        for c in self.site.clouds:
            if c.name in self.site.closed or c.max_instances < self._nodes(job):
                continue
            if any(self.fits(job, c, v.name, v.cores) for v in c.vm_types):
                return True
        return any(
            self.fits(job, self.specs.get(w.cloud), w.vm_type, w.cores) for w in self.serving
        )

    def usable(self, w: Worker) -> bool:
        spec = self.specs.get(w.cloud)
        return any(self.fits(j, spec, w.vm_type, w.cores) for j in self.servable)


def outcome(policy: str, site: SiteSnapshot, cfg: PolicySettings):
    redirect = redirect_target(cfg) if get(policy).redirects else None
    return evaluate(get(policy), site, cfg), Oracle(site, redirect, cfg.stall_timeout)


def no_launch_is_of_a_worker_no_queued_job_could_use(
    site: SiteSnapshot, d: Decision, oracle: Oracle
) -> None:
    for x in d.launch:
        spec = site.cloud(x.cloud)
        assert x.cloud not in site.closed, x
        vm = next(v for v in spec.vm_types if v.name == x.vm_type)
        if oracle.servable:
            assert any(oracle.fits(j, spec, vm.name, vm.cores) for j in oracle.servable), x
        else:
            assert x.cause in (Cause.BASELINE, Cause.REPLACEMENT), x
            assert x.vm_type == spec.default_vm.name, x
    # Every job left out is marked with its reason, and none that could be served.
    assert set(d.unservable) == {j.id for j in site.queued} - {j.id for j in oracle.servable}
    assert all(d.unservable.values())


def floor(policy: str, cfg: PolicySettings) -> int:
    """Idle workers a policy keeps with nothing queued, whatever they are."""
    if policy == "steady_stream":
        return options_of(cfg, SteadyStreamOptions).steady_min_workers
    if policy == "dedicated":
        return options_of(cfg, DedicatedOptions).dedicated_workers
    return 0


def no_idle_worker_is_kept_for_jobs_it_cannot_run(
    policy: str, site: SiteSnapshot, cfg: PolicySettings, d: Decision, oracle: Oracle
) -> None:
    leaving = {x.worker_id for x in d.drain} | {t.worker_id for t in d.terminate}
    kept = []
    for w in site.workers:
        if w.state is not S.IDLE or w.id in leaving or oracle.usable(w):
            continue
        spec = oracle.specs.get(w.cloud)
        paid = spec is not None and spec.hourly_billing
        if paid and paid_time_left(w, spec, site.now) > cfg.billing_margin:
            continue  # paid for: kept like any idle worker with nothing queued
        kept.append(w.id)
    assert len(kept) <= floor(policy, cfg), (kept, d)


@pytest.mark.parametrize("policy", POLICIES)
@common
@given(site=sites(), cfg=policy_settings)
def test_capacity_is_only_for_work_it_can_run(policy, site, cfg):
    """Both properties judge the same random site: generating it is most of an example's
    CPU. Each is still checked on ``common``'s examples per policy."""
    d, oracle = outcome(policy, site, cfg)
    no_launch_is_of_a_worker_no_queued_job_could_use(site, d, oracle)
    no_idle_worker_is_kept_for_jobs_it_cannot_run(policy, site, cfg, d, oracle)
