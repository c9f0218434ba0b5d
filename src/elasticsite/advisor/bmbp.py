"""The Binomial Method Batch Predictor: an upper bound on a quantile from n observations.

Among n independent observations of a delay, the k-th smallest exceeds the true
q-quantile unless at least k of them fall below it, and the number that fall below it
is Binomial(n, q). So the k-th smallest is an upper bound on the q-quantile that holds
with probability ``P(Bin(n, q) <= k - 1)``; BMBP takes the smallest k for which that
probability reaches the confidence c. Nothing is assumed about the distribution beyond
independence, which is why the same bound serves queue waits, VM allocation delays and
run times. With fewer than :func:`min_history` observations even the largest one is not
a bound at that confidence, and :class:`HistoryTooShort` says so instead of guessing.

Probabilities are compared with a tolerance of ``1e-12``: a confidence written as a
decimal (0.95) and the binomial sum it is compared with are both rounded in binary,
and a tie in exact arithmetic must not move the answer to the next order statistic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import ndtri
from scipy.stats import binom

__all__ = [
    "HistoryTooShort",
    "bmbp_bound",
    "check_probability",
    "check_value",
    "min_history",
    "order_index",
    "order_indices",
]

TOLERANCE = 1e-12
"""How far below the confidence a binomial probability may fall and still count as
reaching it (binary rounding of both sides, nothing more)."""


class HistoryTooShort(ValueError):
    """Too few observations for the bound asked for; says how many are needed."""

    def __init__(
        self,
        needed: int,
        have: int,
        quantile: float | None = None,
        confidence: float | None = None,
        *,
        purpose: str | None = None,
    ) -> None:
        self.needed = needed
        self.have = have
        self.quantile = quantile
        self.confidence = confidence
        self.purpose = purpose
        if purpose is None:
            purpose = (
                f"for the {quantile:g} quantile at {confidence:g} confidence"
                if quantile is not None and confidence is not None
                else "for a bound"
            )
        super().__init__(f"needs at least {needed} observations {purpose}; has {have}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.needed, self.have, self.quantile, self.confidence, self.purpose))


def _rebuild(
    needed: int,
    have: int,
    quantile: float | None,
    confidence: float | None,
    purpose: str | None,
) -> HistoryTooShort:
    return HistoryTooShort(needed, have, quantile, confidence, purpose=purpose)


def check_value(value: float) -> float:
    """``value``, one observation, as a finite float, or a ValueError saying why not."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise ValueError(f"a value must be a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"a value must be finite, got {x!r}")
    return x


def check_probability(name: str, value: float) -> float:
    """``value`` as a float strictly between 0 and 1, or a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
        raise ValueError(f"{name} must be a number between 0 and 1, got {value!r}")
    value = float(value)
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {value!r}")
    return value


def _check_count(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"the number of observations must be a non-negative integer, got {n!r}")
    return int(n)


def _indices(n: npt.NDArray[np.int64], quantile: float, confidence: float) -> npt.NDArray[np.int64]:
    """For each history length, the 1-based order index of the bound, or 0 when none is."""
    n = np.asarray(n, dtype=np.int64)
    target = confidence - TOLERANCE
    # A first guess from the normal approximation with a skewness correction
    # (Cornish-Fisher), checked against the binomial cdf itself (k - 1 must reach the
    # target and k - 2 must not); the few lengths where it is off are bisected.
    z = float(ndtri(confidence))
    mean = n * quantile
    sd = np.sqrt(n * quantile * (1.0 - quantile))
    guess = mean + sd * z + (1.0 - 2.0 * quantile) * (z * z - 1.0) / 6.0 - 0.5
    k = np.clip(np.ceil(guess), 0, n).astype(np.int64) + 1
    reached = (k > n) | (binom.cdf(k - 1, n, quantile) >= target)
    settled = reached & ((k <= 1) | (binom.cdf(k - 2, n, quantile) < target))
    if not settled.all():
        rest = ~settled
        k[rest] = _exact(n[rest], quantile, target)
    return np.where(k <= n, k, 0).astype(np.int64)


def _exact(n: npt.NDArray[np.int64], quantile: float, target: float) -> npt.NDArray[np.int64]:
    """Order indices by bisection on the cdf (n + 1 where none reaches the target)."""
    low = np.zeros_like(n)  # cdf(low - 1) < target (cdf(-1) = 0)
    high = n + 1  # the answer is at most n + 1 (meaning none)
    while (high - low > 1).any():
        mid = (low + high) // 2
        reached = binom.cdf(mid - 1, n, quantile) >= target
        high = np.where(reached, mid, high)
        low = np.where(reached, low, mid)
    return high


_tables: dict[tuple[float, float], npt.NDArray[np.int64]] = {}
_SMALL = 8192


def index_table(quantile: float, confidence: float, size: int) -> npt.NDArray[np.int64]:
    """Order indices for history lengths 0, 1, ... (0 where too short), at least ``size``
    of them, for callers that walk through lengths one at a time as a growing series
    does. One table per (quantile, confidence), extended by doubling."""
    table = _tables.get((quantile, confidence))
    if table is None or table.size < size:
        have = 0 if table is None else table.size
        new = max(1024, 1 << max(size - 1, 1).bit_length())
        more = _indices(np.arange(have, new, dtype=np.int64), quantile, confidence)
        table = more if table is None else np.concatenate([table, more])
        table.setflags(write=False)
        _tables[(quantile, confidence)] = table
    return table


@lru_cache(maxsize=1 << 16)
def _order_index(n: int, quantile: float, confidence: float) -> int:
    if n < _SMALL:  # a whole table costs little more than one scipy call per length
        return int(index_table(quantile, confidence, n + 1)[n])
    return int(_indices(np.array([n], dtype=np.int64), quantile, confidence)[0])


@lru_cache(maxsize=1024)
def _min_history(quantile: float, confidence: float) -> int:
    # 1 - q**n >= c  <=>  n >= log(1 - c) / log(q); start just below and settle with
    # the same binomial test order_index uses, so the two always agree.
    n = max(1, math.floor(math.log1p(-confidence) / math.log(quantile)) - 2)
    while _order_index(n, quantile, confidence) == 0:
        n += 1
    while n > 1 and _order_index(n - 1, quantile, confidence) != 0:
        n -= 1
    return n


def min_history(quantile: float, confidence: float) -> int:
    """The fewest observations with which the largest bounds ``quantile`` at ``confidence``.

    That is the smallest n with ``1 - quantile**n >= confidence``: 59 for 0.95 at 0.95,
    299 for 0.99 at 0.95.
    """
    q = check_probability("quantile", quantile)
    c = check_probability("confidence", confidence)
    return _min_history(q, c)


def order_index(n: int, quantile: float, confidence: float) -> int:
    """The 1-based k whose k-th smallest of ``n`` observations bounds ``quantile``.

    k is the smallest integer with ``P(Bin(n, quantile) <= k - 1) >= confidence``;
    raises :class:`HistoryTooShort` when even ``k = n`` falls short. Cached per
    ``(n, quantile, confidence)``.
    """
    n = _check_count(n)
    q = check_probability("quantile", quantile)
    c = check_probability("confidence", confidence)
    k = _order_index(n, q, c)
    if k == 0:
        raise HistoryTooShort(_min_history(q, c), n, q, c)
    return k


def order_indices(n: npt.ArrayLike, quantile: float, confidence: float) -> npt.NDArray[np.int64]:
    """:func:`order_index` for many history lengths at once; 0 where a length is too short."""
    q = check_probability("quantile", quantile)
    c = check_probability("confidence", confidence)
    lengths = np.asarray(n)
    if lengths.size and (not np.issubdtype(lengths.dtype, np.integer) or int(lengths.min()) < 0):
        raise ValueError("history lengths must be non-negative integers")
    return _indices(lengths.astype(np.int64), q, c)


def as_samples(
    samples: Iterable[float] | npt.ArrayLike, what: str = "samples"
) -> npt.NDArray[np.float64]:
    """``samples`` as a one-dimensional float array of finite values, or a ValueError."""
    if isinstance(samples, str | bytes) or not isinstance(samples, Iterable | np.ndarray):
        raise ValueError(f"{what} must be a sequence of numbers, got {type(samples).__name__}")
    try:
        if isinstance(samples, np.ndarray):
            array = samples.astype(np.float64, copy=False)
        elif isinstance(samples, list | tuple):
            array = np.asarray(samples, dtype=np.float64)
        else:
            array = np.fromiter(samples, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{what} must be numbers: {error}") from error
    if array.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {array.shape}")
    bad = ~np.isfinite(array)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{what} must be finite; value {first} is {float(array[first])!r}")
    return array


def bmbp_bound(
    samples: Iterable[float] | npt.ArrayLike, quantile: float, confidence: float = 0.95
) -> float:
    """An upper bound on the ``quantile`` of the distribution ``samples`` were drawn from.

    Returns the k-th smallest sample, k from :func:`order_index`: if the samples are
    independent draws from one distribution, the returned value is at least the true
    ``quantile`` with probability at least ``confidence``. Raises
    :class:`HistoryTooShort` (a ValueError) below :func:`min_history` samples, and a
    ValueError for a quantile or confidence outside (0, 1) or a non-finite sample.
    """
    q = check_probability("quantile", quantile)
    c = check_probability("confidence", confidence)
    array = as_samples(samples)
    k = order_index(array.size, q, c)
    return float(np.partition(array, k - 1)[k - 1])
