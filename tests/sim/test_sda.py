"""Selective-Differential-Adaptive: a threshold per job category, against one global one.

The hand-worked stream (a site of 10 processors; times in seconds; every job runs
exactly its requested time; categories: requested <= / > 3600 s x width <= / > 8):

    job  submit procs requested  category
    X      0     10      100     short wide
    Y      0      1       10     short narrow
    R    110      5     1000     short narrow
    L    110     10     7200     long wide
    B    120      5     3000     short narrow

t=0: X starts; Y (waited 0, expansion factor 1, not > 1) waits. t=100: X ends,
slowdown 100/100 = 1; Y has waited 100 s, passes every threshold (all 1), is
reserved at 100 and starts. t=110: Y ends, slowdown (110 - 0) / 10 = 11. Now the
one global threshold is (1 + 11) / 2 = 6, while per category it is 11 for short
narrow, 1 for short wide and 1 (no history) for both long categories. R starts in
5 free processors; L (waited 0) cannot start and is not reserved.

t=120: B arrives. L has waited 10 s: expansion factor (10 + 7200) / 7200 ~ 1.0014.
* Per category: 1.0014 > 1, so L is reserved at 1110 (when R ends); B, short narrow
  with threshold 11, is not reserved and cannot backfill (it would run past 1110
  into L's slot): B waits for L to end, and starts at 1110 + 7200 = 8310.
* Global: 1.0014 <= 6, so L is not reserved (it would need to wait 5 x 7200 s), B
  backfills at 120 into the 5 free processors, and L starts only when B ends:
  3120. The long wide job is starved by the narrow one the global mean favours.

With a 10-VM cloud, the same instant decides the redirection: per category, L is
past its threshold, the ratios differ (site 15/10, cloud 0/10) and the cloud starts
it at 120 < its site reservation 1110, so L goes to the cloud and B then starts on
the site at 120; with the global threshold L stays and starts at 3120 on the site.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from elasticsite.batch.selective import DEFAULT_CATEGORIES, Categories, SelectiveBackfill
from elasticsite.policies.strategies import STRATEGIES, Selective, SelectiveGlobal, _same_ratio
from elasticsite.sim.cloud import CloudModel
from elasticsite.sim.metrics import CLOUD, SITE
from elasticsite.sim.replay import replay
from elasticsite.sim.replay_jobs import lublin_jobs
from elasticsite.sim.runner import round_seed
from elasticsite.sim.specs import LublinSource, ReplaySpec, SpecError, load_spec, parse_spec

STREAM = ([0, 0, 110, 110, 120], [10, 1, 5, 10, 5], [100, 10, 1000, 7200, 3000])


def run(strategy: str, cloud: CloudModel | None = None) -> tuple[list[float], list[int]]:
    sub, procs, runtime = STREAM
    r = replay(sub, procs, runtime, runtime, site_procs=10, strategy=strategy, cloud=cloud)
    return r.jobs.start.tolist(), r.jobs.where.tolist()


def test_default_categories_are_one_hour_by_eight_wide() -> None:
    c = DEFAULT_CATEGORIES
    assert len(c) == 4
    assert c.labels() == ["run<=3600s w<=8", "run<=3600s w>8", "run>3600s w<=8", "run>3600s w>8"]
    assert [c.of(8, 3600), c.of(9, 3600), c.of(8, 3601), c.of(9, 3601)] == [0, 1, 2, 3]
    assert len(Categories.single()) == 1 and Categories.single().of(144, 1e9) == 0


def test_categories_refuse_bad_cuts() -> None:
    with pytest.raises(ValueError, match="runtime_cuts: cuts must be strictly ascending"):
        Categories((3600.0, 3600.0), (8,))
    with pytest.raises(ValueError, match="width_cuts: every cut must be > 0"):
        Categories((3600.0,), (0,))


def test_scheduler_thresholds_per_category_on_the_hand_worked_stream() -> None:
    s = SelectiveBackfill[str](10, categories=DEFAULT_CATEGORIES)
    g = SelectiveBackfill[str](10)
    for sched in (s, g):
        sched.submit("X", 10, 100, now=0)
        sched.submit("Y", 1, 10, now=0)
        assert sched.start_now(0) == ["X"]
        sched.finish("X", now=100)
        assert sched.start_now(100) == ["Y"]
        sched.finish("Y", now=110)
    assert s.thresholds == [11.0, 1.0, 1.0, 1.0]
    assert g.thresholds == [6.0]
    assert s.threshold_of(10, 7200) == 1.0 and g.threshold_of(10, 7200) == 6.0


def test_per_category_thresholds_protect_the_long_wide_job() -> None:
    assert run("selective") == ([0, 100, 110, 1110, 8310], [SITE] * 5)
    assert run("selective_global") == ([0, 100, 110, 3120, 120], [SITE] * 5)


def test_per_category_thresholds_redirect_the_long_wide_job() -> None:
    cloud = CloudModel(vm_limit=10)
    assert run("selective", cloud) == ([0, 100, 110, 120, 120], [SITE] * 3 + [CLOUD, SITE])
    assert run("selective_global", cloud) == ([0, 100, 110, 3120, 120], [SITE] * 5)


def test_one_category_is_the_global_strategy() -> None:
    sub, procs, runtime = STREAM
    one = replay(
        sub, procs, runtime, runtime, site_procs=10,
        strategy=Selective(Categories.single()), cloud=CloudModel(vm_limit=10),
    )  # fmt: skip
    assert one.jobs.start.tolist() == run("selective_global", CloudModel(vm_limit=10))[0]
    assert STRATEGIES["selective"]().categories == DEFAULT_CATEGORIES  # type: ignore[attr-defined]
    assert SelectiveGlobal().name == "selective_global"


@dataclass
class Queue:
    """What the ratio test reads of a pool."""

    demand: int
    capacity: int


def test_queue_ratios_are_compared_exactly() -> None:
    """Demands and capacities are whole processors, so the ratios are compared by cross
    products: equal ratios are equal however they are written, and two different
    ratios that round to the same float (1/3 and (1e17 + 1) / 3e17) still differ."""
    same = [(Queue(9, 9), Queue(3, 3)), (Queue(7, 9), Queue(7 * 10**15, 9 * 10**15))]
    assert all(_same_ratio(a, b) for a, b in same)  # type: ignore[arg-type]
    third, close = Queue(1, 3), Queue(10**17 + 1, 3 * 10**17)
    assert close.demand / close.capacity == third.demand / third.capacity  # floats say equal
    assert not _same_ratio(third, close)  # type: ignore[arg-type]
    assert not _same_ratio(Queue(0, 144), Queue(1, 144))  # type: ignore[arg-type]


def test_quick_umed_sweep_selective_is_no_longer_the_most_expensive() -> None:
    """Paper 002, Figure 3 (umed) at a quick scale: 20-day Lublin99 workloads on the
    144-VM site and cloud, 2 rounds, seeded as ``experiments/fig3-umed.toml``.

    With one global threshold Selective costs more than with per-category ones at
    every load; per category it is never the most expensive of the paper's four sets,
    and Naive is the most expensive at the heaviest load (umed 1.5), as the paper says.
    """
    names = ["naive", "shortest_queue", "weighted_queue", "selective", "selective_global"]
    values = [1.5, 2.5, 3.5]
    spec = parse_spec({
        "seed": 2009, "rounds": 2, "site_procs": 144, "strategies": names,
        "workload": {"duration_days": 20, "machine_size": 144},
        "sweep": {"parameter": "umed", "values": values},
        "cloud": {"vm_limit": 144, "price_per_hour": 0.10, "billing_increment": 3600},
    })  # fmt: skip
    assert isinstance(spec, ReplaySpec) and isinstance(spec.workload, LublinSource)
    cloud = spec.cloud.model()
    cost: dict[tuple[float, str], float] = {}
    for v in values:
        for r in range(spec.rounds):
            seed = round_seed(spec.seed, r)
            jobs = lublin_jobs(spec.workload, spec.workload.lublin({"umed": v}), seed)
            args = (jobs.submit, jobs.procs, jobs.runtime, jobs.requested)
            base = replay(*args, site_procs=144, strategy="base", seed=seed).metrics()
            for name in names:
                m = replay(
                    *args, site_procs=144, strategy=spec.strategy(name), cloud=cloud, seed=seed
                ).metrics(base_awrt=base.awrt)
                cost[v, name] = cost.get((v, name), 0.0) + m.performance_cost / spec.rounds
    paper_sets = names[:4]
    for v in values:
        assert max(paper_sets, key=lambda n: cost[v, n]) != "selective", v
        assert cost[v, "selective"] < cost[v, "selective_global"], v
    assert max(paper_sets, key=lambda n: cost[1.5, n]) == "naive"


def test_specs_set_the_categories_and_keep_naming_strategies(tmp_path: Path) -> None:
    spec = parse_spec({"strategies": ["selective", "selective_global"],
                       "selective": {"runtime_cuts": [600, 7200], "width_cuts": [4]}})  # fmt: skip
    assert isinstance(spec, ReplaySpec)
    sda = spec.strategy("selective")
    assert isinstance(sda, Selective) and sda.categories == Categories((600.0, 7200.0), (4,))
    assert spec.strategy("selective_global").categories == Categories.single()  # type: ignore[attr-defined]
    default = parse_spec({"strategies": ["selective"]})
    assert default.strategy("selective").categories == DEFAULT_CATEGORIES  # type: ignore[union-attr]
    for toml in sorted(Path(__file__).parents[2].glob("experiments/*.toml")):
        loaded = load_spec(toml)  # every shipped spec still loads
        if isinstance(loaded, ReplaySpec) and "selective" in loaded.strategies:
            assert loaded.strategy("selective").categories == DEFAULT_CATEGORIES  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"runtime_cuts": [7200, 3600]}, r"<spec>: selective.runtime_cuts: .*strictly ascending"),
        ({"width_cuts": [0, 8]}, r"<spec>: selective.width_cuts: .*every cut must be > 0"),
        ({"width_cuts": [2.5]}, r"<spec>: selective.width_cuts"),
        ({"runtime": [3600]}, r"<spec>: selective.runtime"),
    ],
)
def test_specs_refuse_bad_categories_one_error_per_field(
    section: dict[str, object], message: str
) -> None:
    with pytest.raises(SpecError, match=message) as info:
        parse_spec({"strategies": ["selective"], "selective": section})
    assert str(info.value).count("\n") == 0
