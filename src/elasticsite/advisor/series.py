"""One phase's history for one key, with QBETS-style change points found as values arrive.

A busier cluster, a new scheduler configuration or a new software version changes the
distribution a delay is drawn from, and bounds computed over the old regime stay wrong
for as long as the old values dominate. A :class:`Series` watches for that online and
bounds only from the values since the latest change (its *window*).

The rule, applied to every value added while the window holds at least
``min_history(quantile, confidence)`` values, all from the current regime:

* The value *misses high* when it is strictly above the window's BMBP upper bound on
  the series' ``quantile`` (at its ``confidence``), and *misses low* when it is strictly
  below the matching lower bound, the BMBP lower bound on the ``1 - quantile``
  quantile (the k-th largest value, with the same k). Under an unchanged distribution
  either miss has probability at most ``p = 1 - quantile`` whenever the bound holds,
  which it does with probability at least ``confidence``.
* Consecutive misses on the same side form a run. Under an unchanged distribution a
  run of r misses has probability ``p * p11**(r - 1)``, where ``p11 = p + rho * (1 - p)``
  is the chance that a miss follows a miss: a two-state Markov chain whose lag-1
  correlation ``rho`` is that of the window's own miss indicators before the run
  (against the current bound, clipped to [0, 0.99]). Independent observations give
  ``rho = 0`` and ``p11 = p``; queue waits are positively correlated (jobs wait behind
  the same long job), which makes runs likelier and so requires longer ones.
* When that probability falls below ``significance`` (default 0.01), the run is taken
  to be a change: its first value starts the new regime and its index is appended to
  :attr:`Series.change_points`. The window then starts there, except that it never
  holds fewer than ``min_history`` values: until the new regime has that many, the
  window is the most recent ``min_history`` values, and it slides forward with each
  new value until it starts at the change.

Why 0.01, the strict end of the usual 0.01-0.05: the test runs at every observation,
so its level is also the rate at which a stationary history is cut short; a false cut
costs accuracy (fewer values, a more conservative bound) rather than correctness. At the
default 0.95 quantile, two misses in a row (0.0025 when independent) already fall
below 0.01, as they would below 0.05, so the stricter level costs no reaction time
there, and it demands longer runs at low quantiles and under autocorrelation. Measured
on independent log-normal values at the defaults, a stationary history is cut about
once every 650 values, so windows hold a few hundred; ``significance=0.001`` asks for
three misses in a row at the 0.95 quantile and cuts about once every 5,500 values, at
the price of reacting one value later.

This follows QBETS (Nurmi, Brevik and Wolski): a run of bound misses that is rare under
stationarity, judged with the series' autocorrelation, marks a change point, and the
history is trimmed to its start, keeping the minimum needed for a bound.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
from sortedcontainers import SortedList

from elasticsite.advisor.bmbp import (
    HistoryTooShort,
    _min_history,
    _order_index,
    as_samples,
    check_probability,
    check_value,
    index_table,
)

__all__ = ["DEFAULT_SIGNIFICANCE", "Series"]

DEFAULT_SIGNIFICANCE = 0.01
"""The probability below which a run of misses is taken as a change (see the module)."""

_MAX_RHO = 0.99


class Series:
    """A time-ordered history of one delay, bounded by BMBP over its current window."""

    def __init__(
        self,
        values: Iterable[float] | npt.ArrayLike = (),
        *,
        quantile: float = 0.95,
        confidence: float = 0.95,
        detect_changes: bool = True,
        significance: float = DEFAULT_SIGNIFICANCE,
    ) -> None:
        self.quantile = check_probability("quantile", quantile)
        self.confidence = check_probability("confidence", confidence)
        self.significance = check_probability("significance", significance)
        self.detect_changes = bool(detect_changes)
        self.min_history = _min_history(self.quantile, self.confidence)
        self.change_points: list[int] = []
        self._values: list[float] = []
        self._sorted = SortedList()  # the window, ascending
        self._start = 0  # index in _values of the window's first value
        self._anchor = 0  # index where the current regime began
        self._miss = 1.0 - self.quantile
        # The shortest run that can be significant (rho = 0 gives the least likely runs).
        self._shortest_run = 1
        while self._miss**self._shortest_run >= self.significance:
            self._shortest_run += 1
        self._runs = {1: 0, -1: 0}  # side -> run length (1: above the upper bound)
        self._run_start = {1: 0, -1: 0}
        self._last_bound = {1: 0.0, -1: 0.0}
        self._cache: dict[str, npt.NDArray[np.float64]] = {}
        self._indices: list[int] = []  # order index per window length, grown as needed
        self.extend(values)

    def __len__(self) -> int:
        """The number of values in the window, the ones bounds are computed from."""
        return len(self._sorted)

    def __repr__(self) -> str:
        return (
            f"Series({len(self._values)} values, window {len(self._sorted)}, "
            f"change points {self.change_points}, quantile={self.quantile:g}, "
            f"confidence={self.confidence:g})"
        )

    @property
    def values(self) -> npt.NDArray[np.float64]:
        """Every value added, in order (a read-only array)."""
        return self._frozen("values", self._values)

    @property
    def window(self) -> npt.NDArray[np.float64]:
        """The values still used for bounds, in order (a read-only array)."""
        return self._frozen("window", self._values[self._start :])

    def _frozen(self, name: str, values: list[float]) -> npt.NDArray[np.float64]:
        array = self._cache.get(name)
        if array is None:
            array = np.array(values, dtype=np.float64)
            array.setflags(write=False)
            self._cache[name] = array
        return array

    def bound(self, quantile: float, confidence: float | None = None) -> float:
        """The BMBP upper bound on ``quantile`` over the window (the series' confidence
        unless given); :class:`HistoryTooShort` when the window is too short. The window
        is kept sorted, so this is one lookup."""
        q = check_probability("quantile", quantile)
        c = self.confidence if confidence is None else check_probability("confidence", confidence)
        n = len(self._sorted)
        k = self._index(n) if (q, c) == (self.quantile, self.confidence) else _order_index(n, q, c)
        if k == 0:
            raise HistoryTooShort(_min_history(q, c), n, q, c)
        return self._sorted[k - 1]

    def extend(self, values: Iterable[float] | npt.ArrayLike) -> int:
        """Add values in order; returns how many change points they revealed."""
        array = as_samples(values, "values")
        if not array.size:
            return 0
        self._cache.clear()
        if not self.detect_changes:
            self._values.extend(array.tolist())
            self._sorted.update(array.tolist())
            return 0
        found = 0
        for value in array.tolist():
            found += self._add(value)
        return found

    def add(self, value: float) -> bool:
        """Add one value; True when it completed a run that was taken as a change point."""
        value = check_value(value)
        self._cache.clear()
        if not self.detect_changes:
            self._values.append(value)
            self._sorted.add(value)
            return False
        return self._add(value)

    def _add(self, value: float) -> bool:
        window = self._sorted
        n = len(window)
        runs = self._runs
        settled = self._start == self._anchor and n >= self.min_history
        k = self._index(n) if settled else 0
        if k:
            upper, lower = window[k - 1], window[n - k]
            for side, missed, bound in ((1, value > upper, upper), (-1, value < lower, lower)):
                if missed:
                    if runs[side] == 0:
                        self._run_start[side] = len(self._values)
                    runs[side] += 1
                    self._last_bound[side] = bound
                else:
                    runs[side] = 0
        else:
            runs[1] = runs[-1] = 0
        self._values.append(value)
        window.add(value)
        self._slide()
        for side in (1, -1):
            if runs[side] >= self._shortest_run and self._significant(side):
                self._restart(self._run_start[side])
                return True
        return False

    def _index(self, n: int) -> int:
        """The series' own order index for a window of ``n`` values, from a table."""
        if n >= len(self._indices):
            self._indices = index_table(self.quantile, self.confidence, n + 1).tolist()
        return self._indices[n]

    def _slide(self) -> None:
        """Move the window's start towards the regime's start, keeping min_history values."""
        start = max(self._start, min(self._anchor, len(self._values) - self.min_history))
        window = self._sorted
        for old in self._values[self._start : start]:
            window.remove(old)
        self._start = start

    def _significant(self, side: int) -> bool:
        """Whether the current run on ``side`` is rarer than the significance level."""
        run = self._runs[side]
        before = np.asarray(self._values[self._start : self._run_start[side]], dtype=np.float64)
        bound = self._last_bound[side]
        misses = (before > bound) if side > 0 else (before < bound)
        rho = _lag1_correlation(misses)
        p = self._miss
        p11 = p + rho * (1.0 - p)
        return bool(p * p11 ** (run - 1) < self.significance)

    def _restart(self, at: int) -> None:
        self.change_points.append(at)
        self._anchor = at
        self._runs[1] = self._runs[-1] = 0
        start = max(self._start, min(at, len(self._values) - self.min_history))
        if start != self._start:
            self._start = start
            self._sorted = SortedList(self._values[start:])


def _lag1_correlation(indicators: npt.NDArray[np.bool_]) -> float:
    """The lag-1 autocorrelation of a 0/1 sequence, clipped to [0, 0.99]; 0 if constant."""
    if indicators.size < 3:
        return 0.0
    x = indicators.astype(np.float64)
    centred = x - x.mean()
    denominator = float(np.dot(centred, centred))
    if denominator == 0.0:
        return 0.0
    rho = float(np.dot(centred[:-1], centred[1:])) / denominator
    return min(max(rho, 0.0), _MAX_RHO)
