"""BMBP: the order index against exact arithmetic, minimum histories, coverage on known
distributions within binomial slack, monotone bounds, and the refusals a user sees."""

from __future__ import annotations

import math
import pickle
import zlib
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from elasticsite.advisor import HistoryTooShort, bmbp_bound, min_history, order_index
from elasticsite.advisor.bmbp import index_table, order_indices

probabilities = st.decimals(min_value="0.01", max_value="0.99", places=2).map(float)


def exact_index(n: int, quantile: float, target: Fraction) -> int:
    """The definition in rational arithmetic on the decimal inputs (0 when no k <= n)."""
    q = Fraction(str(quantile))
    cdf = Fraction(0)
    for j in range(n):
        cdf += math.comb(n, j) * q**j * (1 - q) ** (n - j)
        if cdf >= target:
            return j + 1
    return 0


def test_paper_minimum_is_59_observations() -> None:
    assert min_history(0.95, 0.95) == 59
    assert min_history(0.99, 0.95) == 299
    assert order_index(59, 0.95, 0.95) == 59


def test_58_observations_are_refused_with_a_clear_message() -> None:
    samples = np.arange(58.0)
    with pytest.raises(HistoryTooShort) as caught:
        bmbp_bound(samples, 0.95, 0.95)
    error = caught.value
    assert str(error) == (
        "needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 58"
    )
    assert (error.needed, error.have, error.quantile, error.confidence) == (59, 58, 0.95, 0.95)
    assert isinstance(error, ValueError)
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and again.needed == 59


def test_59_observations_give_their_maximum() -> None:
    samples = np.random.default_rng(3).permutation(np.arange(59.0))
    assert bmbp_bound(samples, 0.95, 0.95) == 58.0


def test_the_bound_is_the_kth_smallest_sample() -> None:
    rng = np.random.default_rng(4)
    samples = rng.exponential(10.0, size=1000)
    for quantile in (0.5, 0.75, 0.9, 0.95, 0.99):
        k = order_index(1000, quantile, 0.95)
        assert bmbp_bound(samples, quantile) == np.sort(samples)[k - 1]
    # a generator and a list give the same bound as the array
    assert bmbp_bound(iter(samples.tolist()), 0.9) == bmbp_bound(samples, 0.9)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(0, 160), quantile=probabilities, confidence=probabilities)
def test_order_index_matches_exact_arithmetic(n: int, quantile: float, confidence: float) -> None:
    try:
        got = order_index(n, quantile, confidence)
    except HistoryTooShort:
        got = 0
    exact = exact_index(n, quantile, Fraction(str(confidence)))
    # Equal, or equal to the answer within the documented 1e-12 tolerance.
    tolerated = exact_index(n, quantile, Fraction(str(confidence)) - Fraction(1, 10**12))
    assert got in (exact, tolerated)


@settings(max_examples=100, deadline=None)
@given(quantile=probabilities, confidence=probabilities)
def test_min_history_is_where_the_maximum_first_qualifies(
    quantile: float, confidence: float
) -> None:
    n = min_history(quantile, confidence)
    assert order_index(n, quantile, confidence) == n
    assert 1 - quantile**n >= confidence - 1e-12
    if n > 1:
        with pytest.raises(HistoryTooShort):
            order_index(n - 1, quantile, confidence)
        assert 1 - quantile ** (n - 1) < confidence


def test_decimal_ties_do_not_move_the_answer() -> None:
    # 1 - 0.1**2 is exactly 0.99 in decimal but not in binary.
    assert min_history(0.1, 0.99) == 2
    assert min_history(0.5, 0.75) == 2


def test_vectorised_indices_agree_with_the_scalar_ones() -> None:
    lengths = np.arange(0, 3000)
    for quantile, confidence in ((0.95, 0.95), (0.5, 0.99), (0.99, 0.9), (0.05, 0.5)):
        many = order_indices(lengths, quantile, confidence)
        table = index_table(quantile, confidence, 3000)[:3000]
        assert (many == table).all()
        for n in (0, 1, 58, 59, 60, 299, 1000, 2999):
            try:
                expected = order_index(n, quantile, confidence)
            except HistoryTooShort:
                expected = 0
            assert many[n] == expected


def test_long_histories() -> None:
    # The normal approximation's guess is settled against the binomial itself.
    for n in (10_000, 1_000_000):
        k = order_index(n, 0.95, 0.95)
        assert stats.binom.cdf(k - 1, n, 0.95) >= 0.95 > stats.binom.cdf(k - 2, n, 0.95)


@pytest.mark.parametrize(
    ("samples", "quantile", "confidence", "message"),
    [
        ([1.0] * 100, 0.0, 0.95, "quantile must be strictly between 0 and 1, got 0.0"),
        ([1.0] * 100, 1.0, 0.95, "quantile must be strictly between 0 and 1, got 1.0"),
        ([1.0] * 100, float("nan"), 0.95, "quantile must be strictly between 0 and 1, got nan"),
        ([1.0] * 100, True, 0.95, "quantile must be a number between 0 and 1, got True"),
        ([1.0] * 100, 0.95, 1.5, "confidence must be strictly between 0 and 1, got 1.5"),
        ([1.0] * 80 + [math.inf], 0.95, 0.95, "samples must be finite; value 80 is inf"),
        ([[1.0, 2.0]] * 40, 0.95, 0.95, "samples must be one-dimensional, got shape (40, 2)"),
        ("1, 2, 3", 0.95, 0.95, "samples must be a sequence of numbers, got str"),
        (
            [1.0, "late"],
            0.95,
            0.95,
            "samples must be numbers: could not convert string to float: 'late'",
        ),
    ],
)
def test_bad_input_gets_one_clear_error(
    samples: object, quantile: float, confidence: float, message: str
) -> None:
    with pytest.raises(ValueError) as caught:
        bmbp_bound(samples, quantile, confidence)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_bad_history_lengths() -> None:
    with pytest.raises(ValueError, match="non-negative integer, got -1"):
        order_index(-1, 0.95, 0.95)
    with pytest.raises(ValueError, match="non-negative integers"):
        order_indices(np.array([1.5]), 0.95, 0.95)


# -- coverage on known distributions ------------------------------------------------

TRIALS = 4000
FALSE_ALARM = 1e-6  # the chance a correct implementation fails a coverage test


def lognormal(rng: np.random.Generator, shape: tuple[int, int]) -> npt.NDArray[np.float64]:
    return rng.lognormal(3.0, 1.2, size=shape)


def lognormal_quantile(q: float) -> float:
    return math.exp(3.0 + 1.2 * stats.norm.ppf(q))


def bimodal(rng: np.random.Generator, shape: tuple[int, int]) -> npt.NDArray[np.float64]:
    # Two clock speeds: 70 % of runs near 100 s, 30 % near 160 s.
    fast = rng.normal(100.0, 5.0, size=shape)
    slow = rng.normal(160.0, 8.0, size=shape)
    return np.where(rng.random(shape) < 0.7, fast, slow)


def bimodal_quantile(q: float) -> float:
    def cdf(x: float) -> float:
        return float(0.7 * stats.norm.cdf(x, 100, 5) + 0.3 * stats.norm.cdf(x, 160, 8)) - q

    return float(optimize.brentq(cdf, 0.0, 400.0, xtol=1e-12))


def pareto(rng: np.random.Generator, shape: tuple[int, int]) -> npt.NDArray[np.float64]:
    # Heavy tail: shape 1.5 (infinite variance), scale 10 s.
    return 10.0 * (1.0 + rng.pareto(1.5, size=shape))


def pareto_quantile(q: float) -> float:
    return 10.0 * (1.0 - q) ** (-1.0 / 1.5)


Draw = Callable[[np.random.Generator, tuple[int, int]], npt.NDArray[np.float64]]


@pytest.mark.parametrize(
    ("draw", "true_quantile"),
    [(lognormal, lognormal_quantile), (bimodal, bimodal_quantile), (pareto, pareto_quantile)],
    ids=["log-normal", "bimodal", "pareto"],
)
@pytest.mark.parametrize(
    ("n", "quantile", "confidence"),
    [(59, 0.95, 0.95), (100, 0.95, 0.95), (400, 0.99, 0.95), (60, 0.5, 0.9), (200, 0.75, 0.99)],
)
def test_coverage_meets_the_promised_rate(
    draw: Draw,
    true_quantile: Callable[[float], float],
    n: int,
    quantile: float,
    confidence: float,
) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{draw.__name__} {n} {quantile} {confidence}".encode()))
    samples = draw(rng, (TRIALS, n))
    k = order_index(n, quantile, confidence)
    bounds = np.partition(samples, k - 1, axis=1)[:, k - 1]
    assert bmbp_bound(samples[0], quantile, confidence) == bounds[0]
    covered = int(np.sum(bounds >= true_quantile(quantile)))
    # At the promised rate, fewer successes than this happen with probability <= 1e-6.
    floor = stats.binom.ppf(FALSE_ALARM, TRIALS, confidence)
    assert covered >= floor, f"{covered}/{TRIALS} covered, needed {floor:.0f}"
    # And not more than the exact rate of the k-th order statistic allows: a bound that
    # covers more often than that is looser than BMBP promises.
    exact = stats.binom.cdf(k - 1, n, quantile)
    ceiling = stats.binom.isf(FALSE_ALARM, TRIALS, exact)
    assert covered <= ceiling, f"{covered}/{TRIALS} covered, exact rate {exact:.4f}"


# -- monotone in the quantile and the confidence ----------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(300, 3000),
    quantiles=st.lists(probabilities, min_size=2, max_size=6, unique=True),
    confidence=st.sampled_from([0.5, 0.9, 0.95, 0.99]),
)
def test_bounds_are_monotone_in_the_quantile(
    seed: int, n: int, quantiles: list[float], confidence: float
) -> None:
    samples = np.random.default_rng(seed).lognormal(2.0, 1.0, size=n)
    bounded = []
    for q in sorted(quantiles):
        try:
            bounded.append(bmbp_bound(samples, q, confidence))
        except HistoryTooShort:
            assert q > 0.95  # only the highest quantiles may need more than 300
            break
    assert bounded == sorted(bounded)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 2000),
    quantiles=st.tuples(probabilities, probabilities),
    confidences=st.tuples(probabilities, probabilities),
)
def test_order_index_grows_with_quantile_and_confidence(
    n: int, quantiles: tuple[float, float], confidences: tuple[float, float]
) -> None:
    def index(q: float, c: float) -> int:
        return int(order_indices(np.array([n]), q, c)[0])  # 0: too short

    (q1, q2), (c1, c2) = sorted(quantiles), sorted(confidences)
    for low, high in ((index(q1, c1), index(q2, c1)), (index(q1, c1), index(q1, c2))):
        if high:
            assert 0 < low <= high
