"""A distribution of durations in seconds (boots, shutdowns): a constant, a uniform range,
or an empirical list sampled with replacement, drawn from a caller's seeded RNG."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Durations"]


@dataclass(frozen=True, slots=True)
class Durations:
    """A distribution of durations in seconds, sampled from a caller's seeded RNG."""

    kind: str = "constant"
    values: tuple[float, ...] = (0.0,)

    def __post_init__(self) -> None:
        if self.kind not in ("constant", "uniform", "empirical"):
            raise ValueError(
                f"unknown duration kind {self.kind!r}; use constant, uniform or empirical"
            )
        need = {"constant": 1, "uniform": 2}.get(self.kind)
        if need is not None and len(self.values) != need:
            raise ValueError(f"a {self.kind} duration takes {need} value(s), got {self.values}")
        if not self.values or not all(0 <= v < math.inf for v in self.values):  # nan too
            raise ValueError(f"durations must be finite, non-negative seconds, got {self.values}")
        if self.kind == "uniform" and self.values[0] > self.values[1]:
            raise ValueError(f"uniform range must be low <= high, got {self.values}")

    @classmethod
    def constant(cls, seconds: float) -> Durations:
        return cls("constant", (float(seconds),))

    @classmethod
    def uniform(cls, low: float, high: float) -> Durations:
        return cls("uniform", (float(low), float(high)))

    @classmethod
    def empirical(cls, samples: Sequence[float]) -> Durations:
        return cls("empirical", tuple(float(s) for s in samples))

    @classmethod
    def parse(cls, text: str) -> Durations:
        """``"60"`` is constant, ``"74:205"`` uniform, ``"60,62,90"`` an empirical list."""
        try:
            if ":" in text:
                low, high = text.split(":")
                return cls.uniform(float(low), float(high))
            if "," in text:
                return cls.empirical([float(v) for v in text.split(",")])
            return cls.constant(float(text))
        except ValueError as exc:
            raise ValueError(
                f"bad duration {text!r}: give seconds (60), a range (74:205) or a list "
                f"(60,62,90); {exc}"
            ) from None

    @property
    def high(self) -> float:
        """The longest duration this law can give."""
        return max(self.values)

    @property
    def mean(self) -> float:
        if self.kind == "uniform":
            return (self.values[0] + self.values[1]) / 2
        return sum(self.values) / len(self.values)

    def sample(self, rng: random.Random) -> float:
        if self.kind == "constant":
            return self.values[0]
        if self.kind == "uniform":
            return rng.uniform(self.values[0], self.values[1])
        return rng.choice(self.values)
