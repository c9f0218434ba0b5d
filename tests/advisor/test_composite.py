"""Composite bounds: paper 004's worked numbers (four phases, overlap, the six-hour
deadline, speculative execution), the search against brute force, and phase building."""

from __future__ import annotations

import itertools
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.advisor import (
    AdaptiveForecast,
    Overlap,
    Phase,
    Series,
    bmbp_bound,
    composite,
    composite_many,
    speculative,
    transfer_bound,
)

MINUTE = 60.0
HOUR = 3600.0


def minutes(bounds: dict[float, float]) -> dict[float, float]:
    return {q: b * MINUTE for q, b in bounds.items()}


# -- the paper's worked numbers ----------------------------------------------------------


def test_four_phases_at_095_give_0815() -> None:
    phases = [
        Phase(name, {0.95: seconds})
        for name, seconds in (
            ("input", 600),
            ("allocation", 3600),
            ("execution", 7200),
            ("output", 600),
        )
    ]
    best = composite(phases, deadline=6 * HOUR)
    assert best is not None
    assert best.probability == pytest.approx(0.81450625, abs=1e-15)
    assert round(best.probability, 3) == 0.815
    assert best.bound == 12_000
    assert dict(best.quantiles) == {
        "input": 0.95,
        "allocation": 0.95,
        "execution": 0.95,
        "output": 0.95,
    }


STAGING = minutes({0.90: 10, 0.95: 20, 0.99: 30})
ALLOCATION = minutes({0.75: 10, 0.85: 20, 0.95: 30})


def test_serial_staging_and_allocation_give_09025_at_50_minutes() -> None:
    phases = [Phase("input", STAGING), Phase("allocation", ALLOCATION)]
    best = composite(phases, deadline=50 * MINUTE)
    assert best is not None
    assert best.probability == pytest.approx(0.9025)
    assert best.bound == 50 * MINUTE
    assert dict(best.quantiles) == {"input": 0.95, "allocation": 0.95}


def test_overlapped_staging_and_allocation_give_09405_at_30_minutes() -> None:
    overlap = Overlap((Phase("input", STAGING), Phase("allocation", ALLOCATION)))
    best = composite([overlap], deadline=30 * MINUTE)
    assert best is not None
    assert best.probability == pytest.approx(0.9405)
    assert best.bound == 30 * MINUTE
    assert dict(best.quantiles) == {"input": 0.99, "allocation": 0.95}
    assert dict(best.bounds) == {"input": 30 * MINUTE, "allocation": 30 * MINUTE}
    # Both at 0.95 overlapped: 0.9025 at 30 minutes, the conservative case the paper notes.
    same = composite([overlap], deadline=30 * MINUTE, quantiles=[0.95])
    assert same is not None
    assert same.probability == pytest.approx(0.9025) and same.bound == 30 * MINUTE


def test_six_hour_deadline_prefers_081_at_five_and_a_half_hours() -> None:
    phases = [
        Phase("allocation", minutes({0.75: 240, 0.90: 270, 0.95: 330})),
        Phase("execution", minutes({0.90: 60, 0.95: 120, 0.99: 150})),
    ]
    best = composite(phases, deadline=6 * HOUR)
    assert best is not None
    assert best.probability == pytest.approx(0.81)
    assert best.bound == 5.5 * HOUR
    assert dict(best.quantiles) == {"allocation": 0.90, "execution": 0.90}
    # The combination that exactly meets six hours is the worse one.
    exact = composite(phases, deadline=6 * HOUR, quantiles=[0.75, 0.95])
    assert exact is not None
    assert exact.probability == pytest.approx(0.7125) and exact.bound == 6 * HOUR


def test_two_independent_configurations_of_075_and_070_give_0925() -> None:
    assert speculative([0.75, 0.70]) == pytest.approx(0.925)
    assert speculative([]) == 0.0
    assert speculative([0.5]) == 0.5
    assert speculative(iter([0.5, 0.5, 0.5])) == 0.875
    with pytest.raises(ValueError, match=r"between 0 and 1, got 1\.2"):
        speculative([0.5, 1.2])


# -- search semantics ----------------------------------------------------------------------


def test_ties_in_probability_go_to_the_smaller_bound() -> None:
    phases = [Phase("a", {0.9: 10.0, 0.95: 50.0}), Phase("b", {0.9: 20.0, 0.95: 10.0})]
    best = composite(phases, deadline=100.0)
    # 0.95 * 0.95 fits at 60 s; at the same 0.855, a0.90+b0.95 (20 s) beats a0.95+b0.90 (70 s)
    assert best is not None and best.bound == 60.0
    tied = composite(phases, deadline=30.0)
    assert tied is not None
    assert tied.probability == pytest.approx(0.855) and tied.bound == 20.0


def test_nothing_fits_or_nothing_is_bounded() -> None:
    phases = [Phase("allocation", {0.5: 100.0}), Phase("execution", {0.5: 100.0})]
    assert composite(phases, deadline=199.0) is None
    assert composite(phases, deadline=200.0) is not None
    assert composite([Phase("allocation", {}, "too short"), Phase("x", {0.5: 1.0})], 1e9) is None
    # quantiles none of the phase's bounds are at
    assert composite(phases, deadline=1e9, quantiles=[0.9]) is None


def test_a_fixed_delay_counts_with_probability_one_at_any_quantile() -> None:
    phases = [Phase.fixed("setup", 60.0), Phase("execution", {0.9: 100.0, 0.99: 400.0})]
    best = composite(phases, deadline=200.0, quantiles=[0.5, 0.9])
    assert best is not None
    assert best.probability == 0.9 and best.bound == 160.0
    assert dict(best.quantiles) == {"setup": 1.0, "execution": 0.9}


def test_deadline_and_names_are_checked() -> None:
    phase = Phase("a", {0.5: 1.0})
    with pytest.raises(ValueError, match="deadline must be a finite number of seconds"):
        composite([phase], deadline=-1.0)
    with pytest.raises(ValueError, match="deadline must be a finite number of seconds"):
        composite([phase], deadline=math.nan)
    with pytest.raises(ValueError, match="phase names must be unique, got a, a"):
        composite([phase, Overlap((Phase("a", {0.5: 1.0}),))], deadline=10.0)
    with pytest.raises(ValueError, match="at least one phase"):
        composite([], deadline=10.0)


@st.composite
def phase_lists(draw: st.DrawFn) -> list[Phase | Overlap]:
    count = draw(st.integers(1, 4))
    quantiles = [0.5, 0.75, 0.9, 0.95, 0.99]
    phases: list[Phase] = []
    for i in range(count):
        chosen = draw(st.lists(st.sampled_from(quantiles), min_size=1, max_size=5, unique=True))
        seconds = draw(st.lists(st.integers(0, 100), min_size=len(chosen), max_size=len(chosen)))
        # bounds grow with the quantile, as every real bound does
        bounds = dict(zip(sorted(chosen), sorted(float(s) for s in seconds), strict=True))
        phases.append(Phase(f"p{i}", bounds))
    items: list[Phase | Overlap] = list(phases)
    if count >= 2 and draw(st.booleans()):
        items = [Overlap((phases[0], phases[1])), *phases[2:]]
    return items


def brute_force(items: list[Phase | Overlap], deadline: float) -> tuple[float, float] | None:
    options = []
    for item in items:
        members = item.phases if isinstance(item, Overlap) else (item,)
        combos = itertools.product(*(list(p.bounds.items()) for p in members))
        options.append([(math.prod(q for q, _ in c), max(b for _, b in c)) for c in combos])
    best: tuple[float, float] | None = None
    for combo in itertools.product(*options):
        p = math.prod(o[0] for o in combo)
        b = sum(o[1] for o in combo)
        if b <= deadline and (
            best is None
            or p > best[0] * (1 + 1e-12)
            or (p >= best[0] * (1 - 1e-12) and b < best[1])
        ):
            best = (p, b)
    return best


@settings(max_examples=150, deadline=None)
@given(items=phase_lists(), deadline=st.integers(0, 400))
def test_search_matches_brute_force(items: list[Phase | Overlap], deadline: int) -> None:
    got = composite(items, float(deadline))
    expected = brute_force(items, float(deadline))
    if expected is None:
        assert got is None
        return
    assert got is not None
    assert got.probability == pytest.approx(expected[0], rel=1e-12)
    assert got.bound == expected[1]
    # the reported quantiles and bounds are the combination's own
    assert math.prod(got.quantiles.values()) == pytest.approx(got.probability, rel=1e-12)
    assert got.bound <= deadline


@settings(max_examples=60, deadline=None)
@given(items=phase_lists(), deadlines=st.tuples(st.integers(0, 400), st.integers(0, 400)))
def test_more_time_never_lowers_the_probability(
    items: list[Phase | Overlap], deadlines: tuple[int, int]
) -> None:
    early, late = (composite(items, float(d)) for d in sorted(deadlines))
    if early is not None:
        assert late is not None and late.probability >= early.probability


def test_many_configurations_at_once_agree_with_one_at_a_time() -> None:
    rng = np.random.default_rng(8)
    configurations = []
    for _ in range(200):
        shape = rng.integers(1, 5)
        phases: list[Phase | Overlap] = [
            Phase(
                f"p{i}", dict(zip([0.5, 0.9, 0.99], np.sort(rng.uniform(0, 100, 3)), strict=True))
            )
            for i in range(shape)
        ]
        if shape >= 2 and rng.random() < 0.5:
            phases = [Overlap((phases[0], phases[1])), *phases[2:]]  # type: ignore[arg-type]
        configurations.append(phases)
    together = composite_many(configurations, 150.0)
    alone = [composite(c, 150.0) for c in configurations]
    assert together == alone
    assert sum(r is None for r in alone) not in (0, len(alone))


# -- building phases -----------------------------------------------------------------------


def test_phase_from_series_bounds_what_its_history_allows() -> None:
    values = np.random.default_rng(9).exponential(100.0, size=120)
    series = Series(values, detect_changes=False)
    phase = Phase.from_series("allocation", series, [0.5, 0.95, 0.99])
    assert set(phase.bounds) == {0.5, 0.95}
    assert phase.bounds[0.95] == bmbp_bound(values, 0.95)
    assert phase.reason == (
        "needs at least 299 observations for the 0.99 quantile at 0.95 confidence; has 120"
    )
    from_samples = Phase.from_samples("allocation", values, [0.5, 0.95, 0.99])
    assert from_samples == phase


def test_phase_from_forecast_bounds_a_transfer() -> None:
    forecast = AdaptiveForecast(1e-9 * np.random.default_rng(10).uniform(0.9, 1.1, 100))
    phase = Phase.from_forecast("input", forecast, 10**9, [0.5, 0.95])
    assert phase.bounds == {q: transfer_bound(forecast, 10**9, q) for q in (0.5, 0.95)}
    short = Phase.from_forecast("input", AdaptiveForecast([1e-9]), 10**9, [0.95])
    assert not short.bounds
    assert short.reason == "needs at least 2 observations to forecast; has 1"


def test_bad_phases_are_refused() -> None:
    with pytest.raises(ValueError, match="non-empty name"):
        Phase("", {0.5: 1.0})
    with pytest.raises(ValueError, match=r"quantile 0 is not in \(0, 1\]"):
        Phase("x", {0: 1.0})
    with pytest.raises(ValueError, match="must be finite and not negative, got -5"):
        Phase("x", {0.5: -5})
    with pytest.raises(ValueError, match="an overlap needs one or more phases"):
        Overlap(())
    with pytest.raises(ValueError, match="names a phase twice"):
        Overlap((Phase("x", {}), Phase("x", {})))


def test_phases_are_immutable_values() -> None:
    phase = Phase("x", {0.9: 2.0, 0.5: 1.0})
    assert list(phase.bounds) == [0.5, 0.9]
    with pytest.raises(TypeError):
        phase.bounds[0.99] = 3.0  # type: ignore[index]
    assert pickle.loads(pickle.dumps(phase)) == phase
    assert hash(phase) == hash(Phase("x", {0.5: 1.0}))
