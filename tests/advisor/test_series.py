"""Series: bounds over the window, change points that shorten the history used after a
regime shift up or down, the min_history floor, and autocorrelation-aware runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.advisor import HistoryTooShort, Series, bmbp_bound, min_history


def regimes(seed: int, *parts: tuple[int, float]) -> np.ndarray:
    """Log-normal values, ``count`` of them at each ``scale`` in turn."""
    rng = np.random.default_rng(seed)
    return np.concatenate([scale * rng.lognormal(0.0, 0.4, size=count) for count, scale in parts])


def test_without_detection_the_window_is_every_value() -> None:
    values = regimes(1, (300, 1.0), (300, 10.0))
    series = Series(values, detect_changes=False)
    assert len(series) == 600 and not series.change_points
    assert np.array_equal(series.window, values) and np.array_equal(series.values, values)
    for quantile in (0.5, 0.9, 0.95, 0.99):
        assert series.bound(quantile) == bmbp_bound(values, quantile, 0.95)
    assert series.bound(0.9, 0.99) == bmbp_bound(values, 0.9, 0.99)


@pytest.mark.parametrize("seed", range(5))
def test_a_shift_up_shortens_the_history_and_raises_the_bound(seed: int) -> None:
    values = regimes(seed, (500, 1.0), (200, 10.0))
    series = Series()
    detected = [i for i, value in enumerate(values) if series.add(float(value))]
    # Found within a few values of the shift, at the shift (a false alarm before it is
    # allowed: it only shortens the history further).
    assert any(500 <= i <= 505 for i in detected)
    assert 500 in series.change_points or 501 in series.change_points
    assert len(series) < len(values)
    assert np.array_equal(series.window, values[-len(series) :])
    assert series.window.min() > values[:500].max() / 10
    # The bound now speaks for the new regime alone: above every old value.
    assert series.bound(0.95) > values[:500].max()
    # Without detection the old regime would still be in it.
    assert len(Series(values, detect_changes=False)) == 700


@pytest.mark.parametrize("seed", range(5))
def test_a_shift_down_shortens_the_history_and_lowers_the_bound(seed: int) -> None:
    values = regimes(seed, (500, 10.0), (200, 1.0))
    series = Series(values)
    assert any(499 <= i <= 505 for i in series.change_points)
    assert len(series) <= 201
    # The bound fell below every value of the old regime ...
    assert series.bound(0.95) < values[:500].min()
    # ... which the whole history would not allow.
    assert bmbp_bound(values, 0.95) > values[:500].min()


def test_the_window_never_drops_below_min_history() -> None:
    values = regimes(7, (500, 10.0), (200, 1.0))
    series = Series()
    lengths = []
    for value in values:
        if series.add(float(value)):
            lengths.append(len(series))
    assert lengths and all(n == min_history(0.95, 0.95) for n in lengths)
    # Just after the change, the window is the most recent 59 values and slides
    # forward until it starts at the change; from then on it grows.
    series = Series(values[:502])
    change = series.change_points[-1]
    assert len(series) == 59 and change >= 499
    series.extend(values[502:600])
    assert len(series) == 600 - change
    assert np.array_equal(series.window, values[change:600])


def test_runs_under_autocorrelation_must_be_longer() -> None:
    rng = np.random.default_rng(11)
    calm = rng.uniform(0.0, 1.0, size=400)
    clustered = calm.copy()
    clustered[200:204] = 5.0  # the window's misses came in one burst
    spread = calm.copy()
    spread[[50, 150, 250, 350]] = 5.0  # the same misses, apart
    found = {}
    for name, history in (("spread", spread), ("clustered", clustered)):
        # Loaded as trusted history, then watched.
        series = Series(history, detect_changes=False)
        series.detect_changes = True
        run = 0
        while not series.add(6.0):
            run += 1
        found[name] = run + 1
    # Independent misses: two in a row are already rare (0.05**2 < 0.01).
    assert found["spread"] == 2
    assert found["clustered"] > 2


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    parts=st.lists(
        st.tuples(st.integers(1, 200), st.sampled_from([0.1, 1.0, 10.0, 100.0])),
        min_size=1,
        max_size=5,
    ),
)
def test_window_is_a_suffix_of_at_least_min_history(
    seed: int, parts: list[tuple[int, float]]
) -> None:
    values = regimes(seed, *parts)
    series = Series(values)
    floor = min_history(0.95, 0.95)
    assert len(series) >= min(len(values), floor)
    assert np.array_equal(series.window, values[len(values) - len(series) :])
    assert series.change_points == sorted(set(series.change_points))
    assert all(floor <= i < len(values) for i in series.change_points)
    # Adding one value at a time finds the same change points as extending at once.
    one_by_one = Series()
    for value in values:
        one_by_one.add(float(value))
    assert one_by_one.change_points == series.change_points
    if len(series) >= floor:
        bounds = [series.bound(q) for q in (0.5, 0.75, 0.9, 0.95)]
        assert bounds == sorted(bounds)


def test_too_short_a_window_is_refused() -> None:
    series = Series([1.0] * 30)
    with pytest.raises(HistoryTooShort, match=r"needs at least 59 observations for the 0\.95"):
        series.bound(0.95)
    assert series.bound(0.5) == 1.0


def test_values_are_read_only_and_bad_values_are_refused() -> None:
    series = Series([1.0, 2.0])
    with pytest.raises(ValueError):
        series.values[0] = 5.0
    with pytest.raises(ValueError, match="must be finite"):
        series.add(float("nan"))
    with pytest.raises(ValueError, match="values must be finite; value 1 is inf"):
        series.extend([1.0, float("inf")])
    with pytest.raises(ValueError, match="a value must be a number"):
        series.add("3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="significance must be strictly between 0 and 1"):
        Series(significance=0.0)
    assert list(series.values) == [1.0, 2.0]
    assert series.extend([]) == 0
