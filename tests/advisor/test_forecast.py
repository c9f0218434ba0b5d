"""Adaptive forecasting: exact errors and upper bounds on a hand-worked series, the
forecaster family chosen on crafted series, bulk and one-by-one agreement."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.advisor import AdaptiveForecast, HistoryTooShort, transfer_bound, z_for
from elasticsite.advisor.forecast import FORECASTERS


def test_hand_worked_series() -> None:
    forecast = AdaptiveForecast([1.0, 3.0, 2.0])
    errors = forecast.errors
    # last value predicts 1 then 3: squared errors 4 and 1.
    assert errors["last"] == 2.5
    # the running mean (and every window, still short) predicts 1 then 2: 4 and 0.
    assert errors["mean"] == errors["median"] == errors["mean(5)"] == 2.0
    # smoothing at 0.75 predicts 1, then 1 + 0.75 * (3 - 1) = 2.5: 4 and 0.25.
    assert errors["smoothing(0.75)"] == 2.125
    # the first forecaster in order among the lowest MSE is chosen
    assert forecast.chosen == "mean" and forecast.mse == 2.0
    assert forecast.forecast() == 2.0


def test_upper_is_forecast_plus_z_root_mse() -> None:
    rng = np.random.default_rng(5)
    forecast = AdaptiveForecast(rng.lognormal(-18.0, 0.3, size=500))
    for quantile in (0.5, 0.9, 0.95, 0.99):
        expected = forecast.forecast() + z_for(quantile) * math.sqrt(forecast.mse)
        assert forecast.upper(quantile) == expected
    assert z_for(0.95) == pytest.approx(1.6449, abs=1e-4)  # the paper's 1.64
    assert z_for(0.5) == 0.0
    assert forecast.upper(0.5) == forecast.forecast()


def test_transfer_bound_is_size_times_upper_seconds_per_byte() -> None:
    # probes of 1 GB/s give about 1e-9 seconds per byte
    rng = np.random.default_rng(6)
    forecast = AdaptiveForecast(1e-9 * rng.uniform(0.9, 1.1, size=200))
    size = 4 * 10**9
    assert transfer_bound(forecast, size, 0.95) == size * forecast.upper(0.95)
    assert 3.5 < transfer_bound(forecast, size, 0.95) < 5.0
    assert transfer_bound(forecast, 0, 0.95) == 0.0
    with pytest.raises(ValueError, match="size_bytes must not be negative"):
        transfer_bound(forecast, -1, 0.95)
    with pytest.raises(ValueError, match="whole number of bytes"):
        transfer_bound(forecast, 1.5, 0.95)  # type: ignore[arg-type]


def test_fewer_than_two_values_cannot_forecast() -> None:
    for values in ([], [1e-9]):
        forecast = AdaptiveForecast(values)
        with pytest.raises(HistoryTooShort) as caught:
            forecast.upper(0.95)
        assert str(caught.value) == (
            f"needs at least 2 observations to forecast; has {len(values)}"
        )
        with pytest.raises(HistoryTooShort):
            transfer_bound(forecast, 10, 0.95)


# -- the family chosen on crafted series ------------------------------------------


def test_constant_series_is_forecast_by_its_last_value() -> None:
    forecast = AdaptiveForecast(np.full(100, 3.0))
    assert forecast.chosen == "last" and forecast.mse == 0.0 and forecast.forecast() == 3.0


def test_noise_around_a_constant_is_forecast_by_a_running_average() -> None:
    for seed in range(3):
        values = np.random.default_rng(seed).normal(10.0, 1.0, size=2000)
        assert AdaptiveForecast(values).chosen in ("mean", "median")


def test_a_wandering_level_is_forecast_by_smoothing() -> None:
    # A random walk seen through noise: exponential smoothing is its best predictor.
    for seed in range(3):
        rng = np.random.default_rng(seed)
        level = np.cumsum(rng.normal(0.0, 0.5, size=3000))
        forecast = AdaptiveForecast(level + rng.normal(0.0, 1.0, size=3000))
        assert forecast.chosen.startswith("smoothing")


def test_level_steps_are_forecast_by_smoothing() -> None:
    for seed in range(3):
        rng = np.random.default_rng(seed)
        steps = np.repeat(rng.normal(0.0, 5.0, size=30), 100)
        forecast = AdaptiveForecast(steps + rng.normal(0.0, 1.0, size=3000))
        assert forecast.chosen.startswith("smoothing")


def test_a_noisy_trend_is_tracked_by_a_recent_average() -> None:
    for seed in range(3):
        rng = np.random.default_rng(seed)
        trend = 0.05 * np.arange(3000) + rng.normal(0.0, 1.0, size=3000)
        chosen = AdaptiveForecast(trend).chosen
        assert chosen.startswith("smoothing") or chosen.startswith("mean(")
    # Without noise nothing beats the last value: every average lags the trend.
    assert AdaptiveForecast(np.arange(500.0)).chosen == "last"


# -- bulk and incremental agree -------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.floats(0.1, 1000.0), min_size=2, max_size=150),
    cut=st.integers(0, 150),
)
def test_extend_and_add_agree(values: list[float], cut: int) -> None:
    whole = AdaptiveForecast(values)
    parts = AdaptiveForecast(values[:cut])
    for value in values[cut : cut + 3]:
        parts.add(value)
    parts.extend(values[cut + 3 :])
    assert len(parts) == len(whole) == len(values)
    got, want = parts.errors, whole.errors
    for name in FORECASTERS:
        assert got[name] == pytest.approx(want[name], rel=1e-9, abs=1e-9)
    assert parts.forecast() == pytest.approx(whole.forecast(), rel=1e-12)


def test_bad_values_are_refused() -> None:
    forecast = AdaptiveForecast()
    with pytest.raises(ValueError, match="a value must be finite"):
        forecast.add(float("inf"))
    with pytest.raises(ValueError, match="values must be finite; value 2 is nan"):
        forecast.extend([1.0, 2.0, float("nan")])
    with pytest.raises(ValueError, match="quantile must be strictly between 0 and 1"):
        z_for(1.0)
