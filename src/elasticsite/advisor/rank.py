"""Ranking configurations by their chance of meeting a deadline, and what to suggest.

A configuration is one way to run the urgent job: a resource, a node count, an input
repository and an urgency policy. :func:`rank` gives each its best composite bound
(:mod:`.composite`) and orders them by probability; :func:`suggest` picks, among those
likely enough, the one that disturbs other users least; :func:`speculative_choice`
finds the set of mutually independent configurations most likely to have at least one
of them meet the deadline when all are started at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from elasticsite.advisor.composite import (
    Composite,
    Item,
    Overlap,
    Phase,
    composite_many,
    speculative,
)

__all__ = [
    "BATCH_POLICIES",
    "CLOUD_POLICIES",
    "LEAST_DISRUPTIVE",
    "Configuration",
    "Ranked",
    "Speculation",
    "independent",
    "rank",
    "speculative_choice",
    "suggest",
]

LEAST_DISRUPTIVE: tuple[str, ...] = (
    "default",
    "next_to_run",
    "qos",
    "suspension",
    "migration",
    "preemption",
)
"""Urgency policies from the least to the most disruptive to other users: running at
normal priority takes nothing from anyone; next-to-run only jumps the queue; a QoS
share takes capacity others would have had; suspension pauses their work, migration
moves it (and may fail), and preemption kills it."""

BATCH_POLICIES: tuple[str, ...] = ("default", "next_to_run", "preemption")
"""The urgency policies of a batch resource."""

CLOUD_POLICIES: tuple[str, ...] = ("default", "preemption", "suspension", "migration", "qos")
"""The urgency policies of a cloud."""


@dataclass(frozen=True)
class Configuration:
    """One way to run the urgent job."""

    resource: str
    nodes: int
    repository: str | None
    policy: str

    def __post_init__(self) -> None:
        if not isinstance(self.resource, str) or not self.resource.strip():
            raise ValueError(f"a configuration needs a resource name, got {self.resource!r}")
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or self.nodes < 1:
            raise ValueError(f"nodes must be a whole number >= 1, got {self.nodes!r}")
        if self.repository is not None and (
            not isinstance(self.repository, str) or not self.repository.strip()
        ):
            raise ValueError(f"repository must be a name or None, got {self.repository!r}")
        if self.policy not in LEAST_DISRUPTIVE:
            raise ValueError(f"policy {self.policy!r} is not one of {', '.join(LEAST_DISRUPTIVE)}")

    @property
    def label(self) -> str:
        """E.g. "hpc1, 4 nodes, next_to_run, input from ucar"."""
        nodes = "1 node" if self.nodes == 1 else f"{self.nodes} nodes"
        text = f"{self.resource}, {nodes}, {self.policy}"
        return f"{text}, input from {self.repository}" if self.repository else text

    @property
    def disruption(self) -> int:
        """The policy's place in :data:`LEAST_DISRUPTIVE` (0 disturbs least)."""
        return LEAST_DISRUPTIVE.index(self.policy)


@dataclass(frozen=True)
class Ranked:
    """A configuration with its best composite, or the reason it has none (or was
    dropped below the threshold)."""

    configuration: Configuration
    composite: Composite | None
    reason: str = ""

    @property
    def probability(self) -> float:
        """The chance of meeting the deadline (0.0 when nothing fits)."""
        return 0.0 if self.composite is None else self.composite.probability

    @property
    def bound(self) -> float | None:
        """The composite bound in seconds, None when nothing fits."""
        return None if self.composite is None else self.composite.bound


def rank(
    candidates: Iterable[tuple[Configuration, Sequence[Phase | Overlap]]],
    deadline: float,
    quantiles: Sequence[float] | None,
    threshold: float = 0.0,
    *,
    keep_below: bool = False,
) -> list[Ranked]:
    """Every configuration with its best composite for ``deadline`` (seconds), most
    likely first, then by the smaller bound, the less disruptive policy and the label.

    Those whose probability is below ``threshold`` are left out, unless ``keep_below``,
    which keeps them with the reason (for showing what was dropped and why).
    """
    threshold = float(threshold)
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"the threshold must be between 0 and 1, got {threshold!r}")
    pairs = list(candidates)
    found = composite_many([phases for _, phases in pairs], deadline, quantiles)
    ranked = []
    for (configuration, phases), best in zip(pairs, found, strict=True):
        if best is None:
            reason = why_none(phases, deadline, quantiles)
        elif best.probability < threshold:
            reason = f"probability {best.probability:.3f} is below the threshold {threshold:g}"
        else:
            reason = ""
        if keep_below or (best is not None and best.probability >= threshold) or not threshold:
            ranked.append(Ranked(configuration, best, reason))
    ranked.sort(key=_order)
    return ranked


def _order(r: Ranked) -> tuple[float, float, int, str]:
    bound = math.inf if r.composite is None else r.composite.bound
    return (-r.probability, bound, r.configuration.disruption, r.configuration.label)


def why_none(
    phases: Sequence[Item], deadline: float, quantiles: Sequence[float] | None = None
) -> str:
    """Why no combination of the phases' bounds meets the deadline, in one line."""
    wanted = None if quantiles is None else sorted(quantiles)
    shortest = 0.0
    for item in phases:
        members = item.phases if isinstance(item, Overlap) else (item,)
        longest = 0.0
        for phase in members:
            choices = phase.choices(wanted)
            if not choices:
                if phase.reason:
                    return f"{phase.name}: {phase.reason}"
                asked = ", ".join(f"{q:g}" for q in wanted or ())
                return f"{phase.name}: no bound at the quantiles {asked}"
            longest = max(longest, min(b for _, b in choices))
        shortest += longest
    return (
        f"even the shortest bound, {duration(shortest)}, is past the deadline of "
        f"{duration(deadline)}"
    )


def duration(seconds: float) -> str:
    """Seconds as people read them: "45s", "12m30s", "5h30m"."""
    total = round(float(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def suggest(ranked: Iterable[Ranked], threshold: float) -> Ranked | None:
    """Among configurations at least ``threshold`` likely, the least disruptive policy
    (next-to-run before preemption), then the most likely, then the smaller bound."""
    likely = [r for r in ranked if r.composite is not None and r.probability >= threshold]
    if not likely:
        return None
    return min(likely, key=lambda r: (r.configuration.disruption, *_order(r)))


def independent(a: Configuration, b: Configuration) -> bool:
    """Whether two configurations share neither the resource nor the input repository,
    so their chances of meeting the deadline may be treated as independent."""
    if a.resource == b.resource:
        return False
    return a.repository is None or a.repository != b.repository


def _conflict(a: Configuration, b: Configuration) -> str:
    if a.resource == b.resource:
        return f"{a.label} and {b.label} share the resource {a.resource}"
    return f"{a.label} and {b.label} share the repository {a.repository}"


@dataclass(frozen=True)
class Speculation:
    """Configurations to start at once, the chance that at least one meets the
    deadline, and what kept a more likely set from being chosen (empty if nothing)."""

    members: tuple[Ranked, ...]
    probability: float
    reason: str = ""


def speculative_choice(ranked: Iterable[Ranked], k: int = 2) -> Speculation:
    """The set of up to ``k`` mutually independent configurations with the highest
    chance that at least one meets the deadline (:func:`~.composite.speculative`).

    When the most likely configurations are not independent of each other, the reason
    names the first pair that shares a resource or a repository.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a whole number >= 1, got {k!r}")
    pool = sorted((r for r in ranked if r.probability > 0.0), key=_order)
    if not pool:
        return Speculation((), 0.0, "no configuration can meet the deadline")
    configurations = [r.configuration for r in pool]
    conflicts = _conflicts(configurations)
    miss = np.array([1.0 - r.probability for r in pool])
    best = _best_set(conflicts, miss, k)
    members = tuple(pool[i] for i in best)
    reasons = []
    top = list(range(min(k, len(pool))))
    for i in top:
        for j in top:
            if i < j and conflicts[i, j]:
                reasons.append(_conflict(configurations[i], configurations[j]))
    if len(members) < k and len(pool) > len(members):
        reasons.append(
            f"no other configuration that can meet the deadline is independent of "
            f"{' and '.join(m.configuration.label for m in members)}"
        )
    return Speculation(members, speculative(m.probability for m in members), "; ".join(reasons))


def _conflicts(configurations: Sequence[Configuration]) -> npt.NDArray[np.bool_]:
    """conflicts[i, j]: configurations i and j share a resource or a repository."""
    resources = {name: i for i, name in enumerate({c.resource for c in configurations})}
    repositories = {name: i + 1 for i, name in enumerate({c.repository for c in configurations})}
    res = np.array([resources[c.resource] for c in configurations])
    repo = np.array(
        [0 if c.repository is None else repositories[c.repository] for c in configurations]
    )
    return (res[:, None] == res[None, :]) | ((repo[:, None] == repo[None, :]) & (repo[:, None] > 0))


def _best_set(conflicts: npt.NDArray[np.bool_], miss: npt.NDArray[np.float64], k: int) -> list[int]:
    """Branch and bound over candidates sorted by falling probability: the set of at
    most ``k`` pairwise non-conflicting ones with the smallest product of misses."""
    count = miss.size
    best: list[int] = [0]
    best_miss = float(miss[0])

    def search(
        chosen: list[int], product: float, allowed: npt.NDArray[np.bool_], start: int
    ) -> None:
        nonlocal best, best_miss
        if product < best_miss:
            best, best_miss = list(chosen), product
        room = k - len(chosen)
        if not room:
            return
        for j in (np.flatnonzero(allowed[start:]) + start).tolist():
            # No set through j can beat the best: the rest are no likelier than j.
            if product * float(miss[j]) ** room >= best_miss:
                return
            search([*chosen, j], product * float(miss[j]), allowed & ~conflicts[j], j + 1)
            if room == 1:
                return  # the likeliest allowed candidate was the best last member

    everything = np.ones(count, dtype=bool)
    search([], 1.0, everything, 0)
    return best
