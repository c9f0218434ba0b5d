"""Boots that slow each other down by sharing a finite boot path (paper 000, IV-A), the
calibrated clouds, the running estimate of boot and shutdown times, and the dedicated
baseline booted before its jobs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite import policies
from elasticsite.boottime import PAPER000, BootPath, replay
from elasticsite.clouds.base import LaunchRequest
from elasticsite.config import ConfigError, load_config, parse_config
from elasticsite.core import estimates
from elasticsite.model import Job, VMType, WorkerState
from elasticsite.policies import PolicySettings, settings_for
from elasticsite.policies.bursts import wanted
from elasticsite.sim.cloud import CloudModel, Durations, SimCloud, sim_cloud
from elasticsite.sim.elastic import ElasticRun, simulate_elastic
from elasticsite.sim.engine import Simulation
from elasticsite.snapshot import SiteSnapshot
from elasticsite.workloads import get_workload

VM = VMType("vm")


class Joins:
    """A batch system that notes when each node registers."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.at: dict[str, float] = {}

    def register(self, name: str) -> None:
        self.at[name] = self.sim.now

    def node_down(self, name: str) -> None:
        pass


def boot_times(model: CloudModel, launches: list[tuple[float, int]], seed: int = 0) -> list[float]:
    """Each instance's boot time when ``n`` are launched at each ``(time, n)``."""
    sim = Simulation()
    batch = Joins(sim)
    cloud = SimCloud(model, sim, random.Random(seed), batch)
    names: list[str] = []

    def go(n: int) -> None:
        fresh = [f"w{len(names) + k}" for k in range(n)]
        names.extend(fresh)
        for name in fresh:  # one call per instance, as the manager's runner makes them
            cloud.launch(LaunchRequest(VM, [name], {"node": name}))

    for at, n in launches:
        sim.at(at, go, n)
    sim.run()
    created = {i.name: i.created_at or 0.0 for i in cloud.describe()}
    return [batch.at[name] - created[name] for name in names]


boot_list = st.lists(st.tuples(st.integers(0, 400).map(float), st.floats(0, 200)), max_size=10)


@settings(max_examples=200, deadline=None)
@given(transfer=st.floats(0, 100), boots=boot_list, more=boot_list)
def test_on_a_link_alone_more_boots_never_make_a_boot_end_sooner(
    transfer: float, boots: list[tuple[float, float]], more: list[tuple[float, float]]
) -> None:
    # Every boot moving its image shares the link (no limit on places): another boot
    # only ever takes bandwidth. (With few places it may not: two boots kept apart by a
    # third move their images one after the other, each at full speed.)
    path = BootPath(transfer, 0)
    mine = [(("mine", i), at, rest, None) for i, (at, rest) in enumerate(boots)]
    theirs = [(("more", i), at, rest, None) for i, (at, rest) in enumerate(more)]
    alone = replay(sorted(mine, key=lambda b: b[1]), path)
    shared = replay(sorted(mine + theirs, key=lambda b: b[1]), path)
    for key, end in alone.items():
        assert shared[key] >= end - 1e-6


@settings(max_examples=200, deadline=None)
@given(transfer=st.floats(0, 100), parallel=st.integers(1, 5), boots=boot_list)
def test_each_boot_ends_within_its_bound_from_the_boots_ahead_of_it(
    transfer: float, parallel: int, boots: list[tuple[float, float]]
) -> None:
    # No boot is faster than alone; none waits longer than the rounds of `parallel`
    # boots ahead of it (each round: its share of the link, then the longest rest),
    # whatever is launched after it.
    path = BootPath(transfer, parallel)
    order = sorted(boots)
    launches = [(i, at, rest, None) for i, (at, rest) in enumerate(order)]
    ends = replay(launches, path)
    longest = max((rest for _, rest in order), default=0.0)
    for i, at, rest, _ in launches:
        assert ends[i] >= at + transfer + rest - 1e-6
        ahead = sum(1 for j, a2, _, _ in launches[:i] if ends[j] > at)
        rounds = -(-(ahead + 1) // parallel)
        assert ends[i] <= at + rounds * (parallel * transfer + longest) + 1e-6


@settings(max_examples=40, deadline=None)
@given(
    base=st.floats(1, 200), transfer=st.floats(0, 60), n=st.integers(1, 12),
    extra=st.integers(1, 6),
)  # fmt: skip
def test_boot_times_are_monotone_in_concurrency(
    base: float, transfer: float, n: int, extra: int
) -> None:
    t = min(transfer, base)
    model = CloudModel("c", boot=Durations.constant(base), image_transfer=t)
    fewer = boot_times(model, [(0.0, n)])
    more = boot_times(model, [(0.0, n + extra)])
    # VMs launched together share the link: each moves its image in n x t, then boots.
    assert fewer == pytest.approx([base + t * (n - 1)] * n)
    assert min(more) >= max(fewer) - 1e-9
    # A boot started later, while these still move their images, slows them down too.
    late = boot_times(model, [(0.0, n), (base / 2, extra)])
    assert all(a >= b - 1e-9 for a, b in zip(late, fewer, strict=False))


def test_a_thousand_boots_at_once_all_end_within_the_bound_whatever_follows() -> None:
    # UChicago's link and ten places, grown to 2,000 VMs: 1,000 launched at once, then
    # one more every 10 s for as long. Ten boots move their images together (10 x 35 s),
    # then boot alone (at most 97 - 35 s); later boots queue behind. So 1,000 need at
    # most 100 rounds of 412 s, and none of those behind can push them back.
    uc = CloudModel.paper000("uchicago", vm_limit=2000)
    bound = 100 * (10 * 35.0 + 97.0 - 35.0)
    assert uc.boot_bound(1000) == bound
    times = boot_times(uc, [(0.0, 1000)] + [(10.0 * k, 1) for k in range(1, 1001)])
    first = times[:1000]
    assert max(first) <= bound
    # The link is work-conserving: the last of them cannot be done before 1,000 transfers.
    assert max(first) >= 1000 * 35.0
    # A boot alone on the idle cloud is pushed back by later ones at most by sharing the
    # link with nine others: 10 x 35 s + its rest.
    one = boot_times(uc, [(0.0, 1), (1.0, 100)])[0]
    assert one <= 10 * 35.0 + 97.0 - 35.0


def test_five_six_and_ten_at_once_are_the_calibration() -> None:
    # docs/boot-model.md: 59 s of boot past a 35 s transfer, n transfers together.
    uc, iu = PAPER000["uchicago"], PAPER000["iu"]
    assert [uc.mean_boot(n) for n in (1, 5, 6, 10)] == [94.0, 234.0, 269.0, 409.0]
    assert iu.mean_boot(1) == 60.0 and iu.mean_boot(5) == 252.0
    # Workload 1 (20 jobs of 60 s): bursts' 6 VMs need 4 rounds, on-demand's 10 two,
    # and 4 x 35 s > 2 x 60 s puts bursts first.
    assert uc.mean_boot(6) + 4 * 60 < uc.mean_boot(10) + 2 * 60


def test_contention_belongs_to_the_calibrated_cloud_as_calibrated() -> None:
    assert sim_cloud("uchicago").path == BootPath(35.0, 10)
    assert sim_cloud("iu").path == BootPath(48.0, 10)
    assert not sim_cloud("ec2").path.shared
    # A cloud described by its own boots or size shares nothing unless asked to.
    mine = sim_cloud("uchicago", "74:205", "4", vm_limit=1000)
    assert not mine.path.shared and mine.spec().boot_time == 139.5
    assert not sim_cloud("uchicago", vm_limit=20).path.shared
    asked = sim_cloud("uchicago", "74:205", vm_limit=1000, image_transfer=30.0)
    assert asked.path == BootPath(30.0, 0)
    with pytest.raises(ValueError, match="must not exceed the shortest boot alone"):
        sim_cloud("none", "20", image_transfer=30.0)


def test_calibrated_clouds_give_paper_000s_orderings() -> None:
    uc, iu, ec2 = (CloudModel.paper000(k) for k in ("uchicago", "iu", "ec2"))
    seeds = range(20)
    uc1 = [boot_times(uc, [(0.0, 1)], s)[0] for s in seeds]
    iu1 = [boot_times(iu, [(0.0, 1)], s)[0] for s in seeds]
    # IU boots one VM about 34 s faster than UChicago.
    assert sum(uc1) / 20 - sum(iu1) / 20 == pytest.approx(34.0, abs=5.0)
    assert max(iu1) < min(uc1)
    # Five at once slow down on both clouds, IU's by more (about 20 s past UChicago's).
    uc5 = boot_times(uc, [(0.0, 5)])
    iu5 = boot_times(iu, [(0.0, 5)])
    assert min(uc5) > max(uc1) and min(iu5) > max(iu1)
    assert sum(iu5) / 5 - sum(uc5) / 5 == pytest.approx(20.0, abs=12.0)
    # EC2 boots within the 74 to 205 s the paper saw; terminations 6 ± 1 s (EC2: 3-4 s).
    ec = [boot_times(ec2, [(0.0, 1)], s)[0] for s in seeds]
    assert min(ec) >= 74.0 and max(ec) <= 205.0 and max(ec) - min(ec) > 60.0
    assert (uc.shutdown.values, ec2.shutdown.values) == ((5.0, 7.0), (3.0, 4.0))
    assert PAPER000["uchicago"].boot - PAPER000["iu"].boot == 34.0


def snapshot_of(times: estimates.ObservedTimes | None, spec_model: CloudModel) -> SiteSnapshot:
    """20 queued jobs of paper 000's workload 1 (2,400 s of walltime) before a cloud
    seen as ``times``."""
    spec = spec_model.spec()
    from elasticsite.core import CoreState

    state = CoreState()
    if times is not None:
        state.times[spec.name] = times
    jobs = [Job(str(i), 1, 120.0, 0.0, runtime=60.0) for i in range(20)]
    return SiteSnapshot(0.0, jobs, [], [], estimates.apply(state, [spec]))


def observed(model: CloudModel, workers: int, seed: int = 0) -> ElasticRun:
    """A dedicated pool of ``workers`` booted at once, one short job, and the end."""
    run = ElasticRun(
        [(0.0, 1, 10.0, 60.0)], [model], policies.get("dedicated"),
        settings_for("dedicated", dedicated_workers=workers), 10.0, "easy", seed,
    )  # fmt: skip
    run.sim.run()
    return run


def test_the_running_estimate_converges_to_observed_boots_and_the_waste_time_follows() -> None:
    # Configured at 30 s, booting in 100 s (10 at once, no contention): after WINDOW
    # boots the estimate is what was seen, and so is the waste time policies weigh.
    model = CloudModel(
        "c", boot=Durations.constant(100.0), shutdown=Durations.constant(4.0), boot_estimate=30.0
    )
    assert model.spec().waste_time == 34.0
    run = observed(model, estimates.WINDOW)
    seen = run.state.times["c"]
    assert seen.boot == pytest.approx(100.0) and seen.shutdown == pytest.approx(4.0)
    assert snapshot_of(seen, model).clouds[0].waste_time == pytest.approx(104.0)
    # Halfway there after half the window: the configured time weighs the rest.
    half = observed(model, estimates.WINDOW // 2).state.times["c"]
    assert half.boot == pytest.approx((30.0 + 100.0) / 2)
    # A cloud that says fixed keeps its configured times whatever is seen.
    fixed = CloudModel("c", boot_estimate=30.0, shutdown=Durations.constant(4.0),
                       waste_estimate="fixed")  # fmt: skip
    assert snapshot_of(seen, fixed).clouds[0].waste_time == 34.0


def test_bursts_with_the_observed_estimate_boots_paper_000s_handful() -> None:
    # Paper 000's bursts booted 6 VMs for workload 1's 2,400 s of queued walltime, a
    # waste estimate near 200 s. Seen booting five at once (the calibration run of
    # Figure 5), the UChicago cloud gives that order.
    uc = CloudModel.paper000("uchicago", boot_estimate=0.0)  # nothing assumed
    seen = observed(uc, 5).state.times["uchicago"]
    assert len(seen.boots) == estimates.WINDOW
    five = list(seen.boots)[-5:]
    assert all(b > 200.0 for b in five)
    whole = CloudModel.paper000("uchicago")
    for times in (None, estimates.ObservedTimes(seen.boots.__class__(five * 2, 10),
                                                 seen.shutdowns)):  # fmt: skip
        snap = snapshot_of(times, whole)
        assert 180.0 <= snap.clouds[0].waste_time <= 260.0
        assert 4 <= wanted(snap, PolicySettings()) <= 7


ONE_CLOUD = {"clouds": [{"name": "a"}]}


def test_simulated_dedicated_pool_joins_before_the_first_job_and_is_fastest() -> None:
    work = [(a.at, a.cores, a.runtime, a.walltime) for a in get_workload("workload1", 0)]
    uc = CloudModel.paper000("uchicago")
    ded_settings = PolicySettings()
    pre = policies.preboot_workers("dedicated", ded_settings)
    assert pre == 10 and policies.preboot_workers("on_demand", ded_settings) == 0
    # the pool a site's [policy] sets, as its options model validated it
    four = parse_config({"policy": {"name": "dedicated", "dedicated_workers": 4}, **ONE_CLOUD})
    assert policies.preboot_workers("dedicated", four.policy_settings()) == 4
    assert (
        policies.preboot_workers("dedicated", settings_for("dedicated", dedicated_workers=3)) == 3
    )
    ded = simulate_elastic(work, [uc], "dedicated", ded_settings, preboot=pre)
    first = min(j.submitted_at for j in ded.jobs)
    assert len(ded.workers) == 10
    assert all(w.joined_at is not None and w.joined_at <= first for w in ded.workers)
    elapsed: dict[str, float] = {}
    for name in ("dedicated", "on_demand", "bursts"):
        run = ded if name == "dedicated" else simulate_elastic(work, [uc], name)
        took = run.metrics().elapsed
        assert took is not None
        elapsed[name] = took
    # Paper 000, Figure 7, workload 1: dedicated fastest, bursts ahead of on_demand.
    assert elapsed["dedicated"] < elapsed["bursts"] < elapsed["on_demand"]
    assert elapsed["dedicated"] == pytest.approx(120.0)


def test_a_pool_the_cloud_cannot_fill_still_starts_the_workload() -> None:
    small = CloudModel("c", vm_limit=3, boot=Durations.constant(50.0))
    r = simulate_elastic([(0.0, 1, 60.0, 120.0)] * 4, [small], "dedicated", preboot=10)
    assert all(j.finished_at is not None for j in r.jobs)
    assert min(j.submitted_at for j in r.jobs) >= 50.0
    assert sum(w.state is WorkerState.TERMINATED for w in r.workers) == 3


def test_local_cloud_contention_options_are_checked(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"

    def error(options: str) -> str:
        site.write_text(f'[[clouds]]\nname = "a"\noptions = {{ {options} }}\n')
        with pytest.raises(ConfigError) as err:
            load_config(site)
        return str(err.value)

    assert error("image_transfer = -1") == (
        f"{site}: clouds[0].options.image_transfer: must be a number of seconds in [0, 86400] "
        "(got -1)"
    )
    assert error("boot_delay = 30, boot_jitter = 5, image_transfer = 26") == (
        f"{site}: clouds[0].options.image_transfer: must not exceed the shortest boot alone, "
        "boot_delay - boot_jitter (25 s), which includes it (got 26)"
    )
    assert error("parallel_boots = -1") == (
        f"{site}: clouds[0].options.parallel_boots: must be an integer in [0, 10000] "
        "(0: no limit) (got -1)"
    )
    # The constant per boot in flight is gone; its name says what replaced it.
    assert error("boot_slowdown = 35") == (
        f"{site}: clouds[0].options.boot_slowdown: replaced by image_transfer (seconds a "
        "boot's image takes alone over the cloud's shared link) and parallel_boots (boots "
        "at once); see docs/boot-model.md (got 35)"
    )
    site.write_text(
        '[[clouds]]\nname = "a"\nwaste_estimate = "fixed"\n'
        "options = { image_transfer = 35, parallel_boots = 10 }\n"
    )
    config = load_config(site)
    dumped = config.clouds[0].options.model_dump()
    assert (dumped["image_transfer"], dumped["parallel_boots"]) == (35.0, 10)
    assert config.clouds[0].spec().waste_estimate == "fixed"
    site.write_text('[[clouds]]\nname = "a"\nwaste_estimate = "guess"\n')
    with pytest.raises(ConfigError, match=r"clouds\[0\]\.waste_estimate: "):
        load_config(site)
