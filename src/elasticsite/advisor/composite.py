"""Composite bounds: the phases of an urgent run combined into one probability and bound.

Each :class:`Phase` carries upper bounds on its duration at a few quantiles. Phases that
run one after another add up: choosing quantile q_i for phase i, the run ends within
``sum(b_i)`` with probability at least ``prod(q_i)`` (all the phases meeting their
bounds at once, counting independent phases; it is conservative, since one phase
finishing early may make up for another finishing late). Phases that start together,
such as input staging during the queue wait, form an :class:`Overlap`: its probability
is the product of its members' and its bound the largest of theirs.

:func:`composite` searches every combination of the per-phase quantiles for the highest
probability whose bound still fits the deadline, so that a 0.90 + 0.90 pair meeting the
deadline with room to spare beats a 0.75 + 0.95 pair that only just fits.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from elasticsite.advisor.bmbp import HistoryTooShort, as_samples, check_probability, order_index

if TYPE_CHECKING:
    from elasticsite.advisor.forecast import AdaptiveForecast
    from elasticsite.advisor.series import Series

__all__ = ["Composite", "Overlap", "Phase", "composite", "composite_many", "speculative"]

CERTAIN = 1.0
"""The quantile of a bound that always holds (a known, fixed delay)."""

TIE = 1e-12
"""Products of probabilities within this relative distance count as equal (they differ
only by the order of rounding), and then the smaller bound wins."""

FIT = 1e-9
"""A bound fits a deadline when it exceeds it by at most this fraction of it (rounding
in the sum of the phases' bounds, nothing more)."""

_MAX_CELLS = 4_000_000  # combinations evaluated at once, to bound memory


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a phase needs a non-empty name, got {name!r}")
    return name


def _check_quantiles(quantiles: Iterable[float]) -> tuple[float, ...]:
    checked = tuple(sorted({check_probability("quantile", q) for q in quantiles}))
    if not checked:
        raise ValueError("at least one quantile is needed")
    return checked


@dataclass(frozen=True)
class Phase:
    """Upper bounds on one phase's duration in seconds, keyed by quantile.

    Only the quantiles that could be bounded are present; ``reason`` says why others
    (or all) could not be, e.g. a history too short for the highest quantiles.
    """

    name: str
    bounds: Mapping[float, float] = field(hash=False)
    reason: str = ""

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not isinstance(self.bounds, Mapping):
            raise ValueError(f"{self.name}: bounds must map quantiles to seconds")
        checked: dict[float, float] = {}
        for quantile, seconds in sorted(self.bounds.items()):
            q = float(quantile)
            if not 0.0 < q <= CERTAIN:
                raise ValueError(f"{self.name}: quantile {quantile!r} is not in (0, 1]")
            s = float(seconds)
            if not math.isfinite(s) or s < 0:
                raise ValueError(
                    f"{self.name}: the bound at quantile {q:g} must be finite and not "
                    f"negative, got {seconds!r}"
                )
            checked[q] = s
        object.__setattr__(self, "bounds", MappingProxyType(checked))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Phase, (self.name, dict(self.bounds), self.reason))

    @classmethod
    def from_series(
        cls, name: str, series: Series, quantiles: Iterable[float], confidence: float = 0.95
    ) -> Phase:
        """BMBP bounds over a series' window at each quantile its length allows."""
        bounds: dict[float, float] = {}
        reason = ""
        for q in _check_quantiles(quantiles):
            try:
                bounds[q] = series.bound(q, confidence)
            except HistoryTooShort as error:
                reason = reason or str(error)
        return cls(name, bounds, reason)

    @classmethod
    def from_samples(
        cls,
        name: str,
        samples: Iterable[float] | npt.ArrayLike,
        quantiles: Iterable[float],
        confidence: float = 0.95,
    ) -> Phase:
        """BMBP bounds over independent samples at each quantile their number allows."""
        array = as_samples(samples)
        ks: dict[float, int] = {}
        reason = ""
        for q in _check_quantiles(quantiles):
            try:
                ks[q] = order_index(array.size, q, confidence)
            except HistoryTooShort as error:
                reason = reason or str(error)
        if not ks:
            return cls(name, {}, reason)
        kth = sorted({k - 1 for k in ks.values()})
        ordered = np.partition(array, kth)
        return cls(name, {q: float(ordered[k - 1]) for q, k in ks.items()}, reason)

    @classmethod
    def from_forecast(
        cls, name: str, forecast: AdaptiveForecast, size_bytes: int, quantiles: Iterable[float]
    ) -> Phase:
        """Transfer-time bounds for ``size_bytes`` from a forecast of seconds per byte."""
        from elasticsite.advisor.forecast import transfer_bound

        bounds: dict[float, float] = {}
        try:
            for q in _check_quantiles(quantiles):
                bounds[q] = transfer_bound(forecast, size_bytes, q)
        except HistoryTooShort as error:
            return cls(name, {}, str(error))
        return cls(name, bounds)

    @classmethod
    def fixed(cls, name: str, seconds: float) -> Phase:
        """A known delay: bounded by ``seconds`` at every quantile, with probability 1."""
        return cls(name, {CERTAIN: seconds})

    def choices(self, quantiles: Sequence[float] | None = None) -> list[tuple[float, float]]:
        """(quantile, bound) pairs usable in a search: those at ``quantiles`` (all when
        None), plus a certain bound, which serves at any quantile."""
        if quantiles is None:
            return list(self.bounds.items())
        wanted = set(quantiles)
        return [(q, b) for q, b in self.bounds.items() if q in wanted or q == CERTAIN]


@dataclass(frozen=True)
class Overlap:
    """Phases that start together; they end when the slowest does."""

    phases: tuple[Phase, ...]

    def __post_init__(self) -> None:
        phases = tuple(self.phases)
        if not phases or not all(isinstance(p, Phase) for p in phases):
            raise ValueError("an overlap needs one or more phases")
        names = [p.name for p in phases]
        if len(set(names)) != len(names):
            raise ValueError(f"an overlap names a phase twice: {', '.join(names)}")
        object.__setattr__(self, "phases", phases)

    @property
    def name(self) -> str:
        """The member phases' names, joined."""
        return " + ".join(p.name for p in self.phases)


@dataclass(frozen=True)
class Composite:
    """The best combination found: probability of meeting ``bound`` (seconds), and each
    phase's chosen quantile and bound."""

    probability: float
    bound: float
    quantiles: Mapping[str, float] = field(hash=False)
    bounds: Mapping[str, float] = field(hash=False, default_factory=dict)


Item = Phase | Overlap


def speculative(probabilities: Iterable[float]) -> float:
    """The probability that at least one of several independent attempts succeeds."""
    miss = 1.0
    for p in probabilities:
        value = float(p)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"a probability must be between 0 and 1, got {p!r}")
        miss *= 1.0 - value
    return 1.0 - miss


def composite(
    phases: Sequence[Item], deadline: float, quantiles: Sequence[float] | None = None
) -> Composite | None:
    """The highest-probability combination of per-phase quantiles whose bound fits.

    ``phases`` run one after another (an :class:`Overlap`'s members together); each
    phase offers the quantiles in ``quantiles`` it has bounds for (all of its own when
    None) plus any certain bound. The composite probability is the product of the
    chosen quantiles, the bound the sum over serial items of each item's bound (the
    largest member's inside an overlap). Ties in probability go to the smaller bound.
    None when no combination fits the deadline or a phase has no usable bound.
    """
    return composite_many([phases], deadline, quantiles)[0]


def composite_many(
    configurations: Sequence[Sequence[Item]],
    deadline: float,
    quantiles: Sequence[float] | None = None,
) -> list[Composite | None]:
    """:func:`composite` for many configurations, evaluated together in numpy."""
    deadline = float(deadline)
    if not math.isfinite(deadline) or deadline < 0:
        raise ValueError(f"the deadline must be a finite number of seconds >= 0, got {deadline!r}")
    wanted = None if quantiles is None else _check_quantiles(quantiles)
    results: list[Composite | None] = [None] * len(configurations)
    groups: dict[tuple[int, ...], list[tuple[int, list[_Candidates]]]] = {}
    limit = deadline + FIT * max(deadline, 1.0)
    for index, items in enumerate(configurations):
        candidates = [_candidates(item, wanted, limit) for item in _check_items(items)]
        if all(c.probability.size for c in candidates):
            shape = tuple(c.probability.size for c in candidates)
            groups.setdefault(shape, []).append((index, candidates))
    for shape, members in groups.items():
        cells = math.prod(shape)
        step = max(1, _MAX_CELLS // max(cells, 1))
        for start in range(0, len(members), step):
            chunk = members[start : start + step]
            for (index, candidates), best in zip(chunk, _search(chunk, shape, limit), strict=True):
                if best is not None:
                    results[index] = _decode(candidates, shape, best)
    return results


@dataclass
class _Candidates:
    """One serial item's options: probability, bound and, per option, each member
    phase's (name, quantile, bound)."""

    probability: npt.NDArray[np.float64]
    bound: npt.NDArray[np.float64]
    picks: list[tuple[tuple[str, float, float], ...]]


def _check_items(items: Sequence[Item]) -> Sequence[Item]:
    names: list[str] = []
    for item in items:
        if isinstance(item, Phase):
            names.append(item.name)
        elif isinstance(item, Overlap):
            names.extend(p.name for p in item.phases)
        else:
            raise ValueError(f"a phase or an overlap of phases is needed, got {item!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"phase names must be unique, got {', '.join(names)}")
    if not names:
        raise ValueError("at least one phase is needed")
    return items


def _candidates(item: Item, wanted: Sequence[float] | None, limit: float) -> _Candidates:
    """The item's options that could be part of the best fit: those within the deadline
    on their own and not beaten by another option both likelier and no longer."""
    members = item.phases if isinstance(item, Overlap) else (item,)
    options = [[(p.name, q, b) for q, b in p.choices(wanted)] for p in members]
    picks = list(itertools.product(*options))
    scored = []
    for index, pick in enumerate(picks):
        bound = max(b for _, _, b in pick)
        if bound <= limit:
            scored.append((bound, -math.prod(q for _, q, _ in pick), index))
    scored.sort()  # shortest first, then likeliest
    kept = []
    likeliest = -1.0
    for bound, negative, index in scored:  # keep each likelier than every shorter one
        if -negative > likeliest:
            kept.append((bound, -negative, index))
            likeliest = -negative
    return _Candidates(
        np.array([p for _, p, _ in kept], dtype=np.float64),
        np.array([b for b, _, _ in kept], dtype=np.float64),
        [picks[i] for _, _, i in kept],
    )


def _search(
    chunk: list[tuple[int, list[_Candidates]]], shape: tuple[int, ...], limit: float
) -> list[int | None]:
    """Per configuration, the flat index (over ``shape``) of the best combination."""
    count = len(chunk)
    probability = np.ones((count, 1))
    bound = np.zeros((count, 1))
    for item in range(len(shape)):
        p = np.stack([candidates[item].probability for _, candidates in chunk])
        b = np.stack([candidates[item].bound for _, candidates in chunk])
        probability = (probability[:, :, None] * p[:, None, :]).reshape(count, -1)
        bound = (bound[:, :, None] + b[:, None, :]).reshape(count, -1)
    fits = bound <= limit
    feasible = np.where(fits, probability, -1.0)
    top = feasible.max(axis=1)
    near = fits & (probability >= (top * (1.0 - TIE))[:, None])
    best = np.where(near, bound, np.inf).argmin(axis=1)
    return [int(i) if top[row] >= 0.0 else None for row, i in enumerate(best)]


def _decode(candidates: list[_Candidates], shape: tuple[int, ...], flat: int) -> Composite:
    chosen = np.unravel_index(flat, shape)
    probability = 1.0
    total = 0.0
    quantiles: dict[str, float] = {}
    bounds: dict[str, float] = {}
    for item, index in zip(candidates, chosen, strict=True):
        probability *= float(item.probability[index])
        total += float(item.bound[index])
        for name, q, b in item.picks[int(index)]:
            quantiles[name] = q
            bounds[name] = b
    return Composite(probability, total, quantiles, bounds)
