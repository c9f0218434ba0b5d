"""Forecasting a measurement series the Network Weather Service way, for staging bounds.

A family of simple forecasters each predicts the next value of a series before seeing
it: the last value; the mean and the median of everything so far; the mean and the
median of the last 5, 10, 20 and 50 values; and exponential smoothing at gains 0.05,
0.1, 0.2, 0.3, 0.5 and 0.75 (``s <- s + gain * (x - s)``, starting from the first
value). :class:`AdaptiveForecast` runs them all, keeps each one's accumulated squared
error of its one-step predictions, and forecasts with the one whose mean squared error
(MSE) is lowest so far (the earliest in that order on a tie, errors within a relative
1e-9 counting as equal). Its upper bound at a quantile treats the MSE as the variance
of a normal error: ``forecast + z * sqrt(MSE)`` with ``z`` the standard normal quantile
(1.645 at 0.95).

For staging, the series is the seconds per byte each probe took (the inverse of its
bandwidth), so a transfer of ``size_bytes`` is bounded by ``size_bytes`` times that
upper bound, and by nothing else: connection set-up and per-file costs are in the
probes only as far as the probes resemble the real transfer, which is why probes
should move data of the size and by the tool the real staging uses.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view
from scipy.signal import lfilter
from scipy.stats import norm

from elasticsite.advisor.bmbp import HistoryTooShort, as_samples, check_probability, check_value

__all__ = ["FORECASTERS", "GAINS", "WINDOWS", "AdaptiveForecast", "transfer_bound", "z_for"]

WINDOWS: tuple[int, ...] = (5, 10, 20, 50)
"""Sliding-window lengths of the window mean and median forecasters."""

GAINS: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75)
"""Gains of the exponential smoothing forecasters."""

FORECASTERS: tuple[str, ...] = (
    "last",
    "mean",
    "median",
    *(f"mean({w})" for w in WINDOWS),
    *(f"median({w})" for w in WINDOWS),
    *(f"smoothing({g:g})" for g in GAINS),
)
"""Every forecaster's name, in the order that breaks ties in MSE."""

MIN_OBSERVATIONS = 2
"""A forecast needs one value to predict from and one prediction scored."""

TIE = 1e-9
"""Accumulated squared errors within this relative distance of the lowest count as
equal to it."""

_LONGEST = max(WINDOWS)
_W = len(WINDOWS)
_GAIN = np.array(GAINS)


def z_for(quantile: float) -> float:
    """The standard normal quantile: 1.645 for 0.95 (the paper's 1.64), 0 for 0.5."""
    return _z(check_probability("quantile", quantile))


@lru_cache(maxsize=256)
def _z(quantile: float) -> float:
    return float(norm.ppf(quantile))


class AdaptiveForecast:
    """Every forecaster run over one series; forecasts with the lowest-MSE one."""

    def __init__(self, values: Iterable[float] | npt.ArrayLike = ()) -> None:
        self._count = 0
        self._total = 0.0
        self._recent: deque[float] = deque(maxlen=_LONGEST)
        self._low: list[float] = []  # the smaller half, negated (a max-heap)
        self._high: list[float] = []  # the larger half
        self._smooth = np.zeros(len(GAINS))
        self._next = np.zeros(len(FORECASTERS))
        self._sse = np.zeros(len(FORECASTERS))
        self._best = 0
        self.extend(values)

    def __len__(self) -> int:
        """How many values the forecasters have seen."""
        return self._count

    def __repr__(self) -> str:
        if self._count < MIN_OBSERVATIONS:
            return f"AdaptiveForecast({self._count} values)"
        return (
            f"AdaptiveForecast({self._count} values, {self.chosen} forecasts "
            f"{self.forecast():.6g}, MSE {self.mse:.6g})"
        )

    # -- reading --------------------------------------------------------------------

    def _check(self) -> None:
        if self._count < MIN_OBSERVATIONS:
            raise HistoryTooShort(MIN_OBSERVATIONS, self._count, purpose="to forecast")

    @property
    def errors(self) -> dict[str, float]:
        """Each forecaster's mean squared error of its one-step predictions so far."""
        self._check()
        return dict(zip(FORECASTERS, (self._sse / (self._count - 1)).tolist(), strict=True))

    def _choose(self) -> None:
        # Errors within TIE of the lowest are a tie (bulk and one-by-one updates round
        # differently), which goes to the earliest forecaster.
        lowest = float(self._sse.min())
        self._best = int(np.flatnonzero(self._sse <= lowest * (1.0 + TIE))[0])

    @property
    def chosen(self) -> str:
        """The forecaster with the lowest MSE so far."""
        self._check()
        return FORECASTERS[self._best]

    @property
    def mse(self) -> float:
        """The chosen forecaster's mean squared error."""
        self._check()
        return float(self._sse[self._best]) / (self._count - 1)

    def forecast(self) -> float:
        """The chosen forecaster's prediction of the next value."""
        self._check()
        return float(self._next[self._best])

    def upper(self, quantile: float) -> float:
        """``forecast() + z_for(quantile) * sqrt(mse)``."""
        z = z_for(quantile)
        return self.forecast() + z * math.sqrt(self.mse)

    # -- adding ---------------------------------------------------------------------

    def add(self, value: float) -> None:
        """Score every forecaster on ``value``, then let them all see it."""
        x = check_value(value)
        if self._count:
            self._sse += (x - self._next) ** 2
            self._smooth += _GAIN * (x - self._smooth)
        else:
            self._smooth[:] = x
        self._count += 1
        self._total += x
        self._recent.append(x)
        self._push(x)
        self._predict()

    def extend(self, values: Iterable[float] | npt.ArrayLike) -> None:
        """:meth:`add` for many values, computed a whole column at a time."""
        xs = as_samples(values, "values")
        m = xs.size
        if not m:
            return
        before = self._count
        tail = np.array(self._recent, dtype=np.float64)
        z = np.concatenate([tail, xs])
        h = tail.size
        # predictions[f, j]: forecaster f's prediction of xs[j] from everything before it.
        predictions = np.empty((len(FORECASTERS), m))
        predictions[0] = z[h - 1 : h - 1 + m] if h else np.r_[np.nan, xs[:-1]]
        counts = before + np.arange(m)  # values seen before xs[j]
        with np.errstate(invalid="ignore", divide="ignore"):
            predictions[1] = (self._total + np.r_[0.0, np.cumsum(xs)[:-1]]) / counts
        predictions[2] = self._running_medians(xs)
        sums = np.r_[0.0, np.cumsum(z)]
        positions = h + np.arange(m)
        for i, w in enumerate(WINDOWS):
            seen = np.minimum(w, counts)
            with np.errstate(invalid="ignore", divide="ignore"):
                predictions[3 + i] = (sums[positions] - sums[positions - seen]) / seen
            predictions[3 + _W + i] = _window_medians(z, h, counts, w)
        start = self._smooth if before else np.full(len(GAINS), xs[0])
        for i, gain in enumerate(GAINS):
            smoothed, _ = lfilter([gain], [1.0, gain - 1.0], xs, zi=[(1.0 - gain) * start[i]])
            predictions[3 + 2 * _W + i, 0] = start[i]
            predictions[3 + 2 * _W + i, 1:] = smoothed[:-1]
            self._smooth[i] = smoothed[-1]
        scored = counts >= 1
        self._sse += np.sum((xs[scored] - predictions[:, scored]) ** 2, axis=1)
        self._count += m
        self._total += float(np.sum(xs))
        self._recent.extend(xs[-_LONGEST:].tolist())
        self._predict()

    # -- state ----------------------------------------------------------------------

    def _push(self, x: float) -> None:
        """Add ``x`` to the two heaps that hold the running median."""
        if self._low and x > -self._low[0]:
            heapq.heappush(self._high, x)
        else:
            heapq.heappush(self._low, -x)
        if len(self._low) > len(self._high) + 1:
            heapq.heappush(self._high, -heapq.heappop(self._low))
        elif len(self._high) > len(self._low):
            heapq.heappush(self._low, -heapq.heappop(self._high))

    def _median(self) -> float:
        if len(self._low) > len(self._high):
            return -self._low[0]
        return (self._high[0] - self._low[0]) / 2.0

    def _running_medians(self, xs: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """The median of everything before each of ``xs``, adding them to the heaps."""
        out = np.empty(xs.size)
        for j, x in enumerate(xs.tolist()):
            out[j] = self._median() if self._low else np.nan
            self._push(x)
        return out

    def _predict(self) -> None:
        """Every forecaster's prediction of the next value, from the current state."""
        recent = list(self._recent)
        means, medians = [], []
        for w in WINDOWS:
            window = sorted(recent[-w:])
            half = len(window) // 2
            means.append(math.fsum(window) / len(window))
            medians.append(
                window[half] if len(window) % 2 else (window[half - 1] + window[half]) / 2
            )
        head = [recent[-1], self._total / self._count, self._median(), *means, *medians]
        self._next[: len(head)] = head
        self._next[len(head) :] = self._smooth
        self._choose()


def _window_medians(
    z: npt.NDArray[np.float64], h: int, counts: npt.NDArray[np.int64], w: int
) -> npt.NDArray[np.float64]:
    """Median of the last ``min(w, count)`` values before each new value in ``z[h:]``."""
    m = counts.size
    out = np.empty(m)
    full = counts >= w
    if full.any():
        views = sliding_window_view(z, w)  # views[i] = z[i : i + w]
        rows = h + np.flatnonzero(full) - w
        out[full] = np.median(views[rows], axis=1)
    for j in np.flatnonzero(~full).tolist():
        seen = int(counts[j])
        out[j] = float(np.median(z[h + j - seen : h + j])) if seen else np.nan
    return out


def transfer_bound(forecast: AdaptiveForecast, size_bytes: int, quantile: float) -> float:
    """Seconds to move ``size_bytes`` at the forecast's upper bound on seconds per byte.

    Exactly ``size_bytes * forecast.upper(quantile)``, except that a negative upper
    bound (possible below the median, where z < 0) counts as zero.
    """
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int | np.integer):
        raise ValueError(f"size_bytes must be a whole number of bytes, got {size_bytes!r}")
    if size_bytes < 0:
        raise ValueError(f"size_bytes must not be negative, got {size_bytes}")
    return int(size_bytes) * max(forecast.upper(quantile), 0.0)
