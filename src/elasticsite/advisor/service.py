"""The advisor as a service: phases for every configured configuration, from the history.

An :class:`Advisor` reads the site's history
(:class:`~elasticsite.history.observations.HistoryStore`) and its ``[advisor]``
settings, and answers :meth:`Advisor.advise`: every configuration (resource x node count
x repository x policy) ranked by its probability of meeting a deadline, the suggestion
and the best speculative pair. It keeps one history per key in memory and reads only
the observations stored since its last answer, so asking again after the manager or a
probe added a few costs only those few.

The phases of a configuration, each bounded at the configured quantiles:

* ``input``: staging ``input_bytes`` from the repository, from the forecast of its
  probes' seconds per byte (to that resource when it has probes of its own, else from
  wherever they were taken);
* ``allocation``: BMBP over the waits of that resource and policy: batch queue waits of
  the job's size class, or, for a cloud, VM allocation delays of requests of exactly that
  many instances;
* ``execution``: BMBP over the run times of the resource's ``app`` in that size class;
* ``output``: staging ``output_bytes`` to ``output_repository`` (else back to the input
  repository), from that repository's probes.

With ``overlap_input`` (the default) input staging runs during allocation. A phase whose
history is too short for a quantile offers only the others; one with none says why.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from elasticsite.advisor.composite import Item, Overlap, Phase
from elasticsite.advisor.forecast import AdaptiveForecast
from elasticsite.advisor.rank import (
    Configuration,
    Ranked,
    Speculation,
    rank,
    speculative_choice,
    suggest,
)
from elasticsite.advisor.series import Series
from elasticsite.advisor.sizes import SizeClasses
from elasticsite.config.advisor import AdvisorConfig, AdvisorResource
from elasticsite.history.observations import PROBE, HistoryStore, Observation

__all__ = ["Advice", "Advisor", "NothingToRank"]

_ANY = "*"
"""The resource of a probe series that pools every resource's probes of a repository."""

Key = tuple[str, str, str, str]
"""(kind, a, b, c): ("allocation", resource, policy, class), ("execution", resource,
app, class), ("probe", repository, resource or ``*``, "")."""


class NothingToRank(ValueError):
    """The settings name no resource, so there is no configuration to rank."""


class _History:
    """One key's values in time order, with the Series or forecast built from them."""

    __slots__ = ("model", "times", "values")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.values: list[float] = []
        self.model: Series | AdaptiveForecast | None = None

    def add(self, at: float, value: float) -> None:
        if not self.times or at >= self.times[-1]:
            self.times.append(at)
            self.values.append(value)
            if self.model is not None:
                self.model.add(value)  # in order: the model follows incrementally
            return
        i = bisect.bisect_right(self.times, at)  # late arrival (an import): rebuild
        self.times.insert(i, at)
        self.values.insert(i, value)
        self.model = None


@dataclass(frozen=True)
class Advice:
    """What :meth:`Advisor.advise` found for one deadline.

    ``ranked`` holds every configuration likely enough (probability >= ``threshold``),
    best first; ``dropped`` the others, each with its probability or the reason it has
    none. ``speculative`` is the best pair of independent configurations to start
    together (any two that can meet the deadline, so two unlikely ones may together be
    likely enough), or None with ``speculative_reason``.
    """

    deadline: float
    threshold: float
    quantiles: tuple[float, ...]
    confidence: float
    ranked: tuple[Ranked, ...]
    dropped: tuple[Ranked, ...]
    suggestion: Ranked | None
    speculative: Speculation | None
    speculative_reason: str
    observations: int

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (what the REST endpoint answers)."""
        spec = None
        if self.speculative is not None:
            spec = {
                "configurations": [_ranked_json(r) for r in self.speculative.members],
                "probability": self.speculative.probability,
            }
        return {
            "deadline": self.deadline,
            "threshold": self.threshold,
            "quantiles": list(self.quantiles),
            "confidence": self.confidence,
            "observations": self.observations,
            "ranked": [_ranked_json(r) for r in self.ranked],
            "dropped": [_ranked_json(r) for r in self.dropped],
            "suggestion": None if self.suggestion is None else _ranked_json(self.suggestion),
            "speculative": spec,
            "speculative_reason": self.speculative_reason,
        }


def _ranked_json(r: Ranked) -> dict[str, Any]:
    c = r.configuration
    comp = r.composite
    return {
        "label": c.label,
        "resource": c.resource,
        "nodes": c.nodes,
        "repository": c.repository,
        "policy": c.policy,
        "probability": r.probability,
        "bound": None if comp is None else comp.bound,
        "phases": []
        if comp is None
        else [
            {"phase": name, "quantile": q, "bound": comp.bounds.get(name)}
            for name, q in comp.quantiles.items()
        ],
        "reason": r.reason,
    }


class Advisor:
    """Ranks a site's configurations against deadlines, from its history and settings.

    Safe to share between threads (one answer at a time).
    """

    def __init__(self, store: HistoryStore, settings: AdvisorConfig) -> None:
        self.store = store
        self.settings = settings
        self.sizes = SizeClasses.parse(settings.size_classes)
        self._kinds = {r.name: r.kind for r in settings.resources}
        self._histories: dict[Key, _History] = {}
        self._last_id = 0
        self._count = 0
        self._lock = threading.Lock()

    # -- history -------------------------------------------------------------

    def refresh(self) -> int:
        """Read the observations stored since the last call; how many there were."""
        new = self.store.observations(since_id=self._last_id)
        for o in new:
            for key in self._keys(o):
                history = self._histories.get(key)
                if history is None:
                    history = self._histories[key] = _History()
                history.add(o.at, o.value)
            self._last_id = max(self._last_id, o.id)
        self._count += len(new)
        return len(new)

    def _class(self, resource: str, nodes: int) -> str:
        """The size class a node count falls in; a cloud's requests by exact count."""
        if self._kinds.get(resource) == "cloud":
            return str(nodes)
        return self.sizes.label(nodes)

    def _keys(self, o: Observation) -> Iterable[Key]:
        if o.phase == "allocation":
            return (("allocation", o.resource, o.policy, self._class(o.resource, o.nodes)),)
        if o.phase == "execution":
            return (("execution", o.resource, o.app, self._class(o.resource, o.nodes)),)
        if o.phase == PROBE:
            return (("probe", o.repository, o.resource, ""), ("probe", o.repository, _ANY, ""))
        return ()  # staging phases measured whole are for `advise evaluate`, not forecasts

    def _series(self, key: Key) -> Series | None:
        history = self._histories.get(key)
        if history is None:
            return None
        if not isinstance(history.model, Series):
            history.model = Series(history.values, confidence=self.settings.confidence)
        return history.model

    def _forecast(self, repository: str, resource: str) -> AdaptiveForecast | None:
        history = self._histories.get(("probe", repository, resource, ""))
        if history is None or len(history.values) < 2:
            history = self._histories.get(("probe", repository, _ANY, ""))
        if history is None:
            return None
        if not isinstance(history.model, AdaptiveForecast):
            history.model = AdaptiveForecast(history.values)
        return history.model

    # -- phases --------------------------------------------------------------

    def _bounded(self, name: str, key: Key, what: str, quantiles: Sequence[float]) -> Phase:
        series = self._series(key)
        if series is None:
            return Phase(name, {}, f"no history of {what}")
        return Phase.from_series(name, series, quantiles, self.settings.confidence)

    def _staging(
        self, name: str, repository: str, resource: str, nbytes: int, quantiles: Sequence[float]
    ) -> Phase:
        forecast = self._forecast(repository, resource)
        if forecast is None:
            return Phase(name, {}, f"no probes of repository {repository}")
        return Phase.from_forecast(name, forecast, nbytes, quantiles)

    def phases(
        self,
        resource: AdvisorResource,
        nodes: int,
        repository: str | None,
        policy: str,
        quantiles: Sequence[float],
    ) -> list[Item]:
        """The phases of one configuration, in the order they run."""
        s = self.settings
        size = self._class(resource.name, nodes)
        unit = "instances" if resource.kind == "cloud" else "nodes"
        allocation = self._bounded(
            "allocation",
            ("allocation", resource.name, policy, size),
            f"{resource.name} under policy {policy} for {size} {unit}",
            quantiles,
        )
        execution = self._bounded(
            "execution",
            ("execution", resource.name, resource.app, size),
            f"{resource.app or 'runs'} on {resource.name} for {size} {unit}",
            quantiles,
        )
        items: list[Item] = []
        if s.input_bytes and repository is not None:
            staged = self._staging("input", repository, resource.name, s.input_bytes, quantiles)
            items.append(Overlap((staged, allocation)) if s.overlap_input else staged)
            if not s.overlap_input:
                items.append(allocation)
        else:
            items.append(allocation)
        items.append(execution)
        out = s.output_repository or repository
        if s.output_bytes and out is not None:
            items.append(self._staging("output", out, resource.name, s.output_bytes, quantiles))
        return items

    def candidates(self, quantiles: Sequence[float]) -> list[tuple[Configuration, list[Item]]]:
        """Every configured configuration with its phases."""
        s = self.settings
        staged = s.input_bytes > 0 or (s.output_bytes > 0 and s.output_repository is None)
        repositories: list[str | None] = (
            [r.name for r in s.repositories] if staged and s.repositories else [None]
        )
        out: list[tuple[Configuration, list[Item]]] = []
        for resource in s.resources:
            for nodes in resource.nodes:
                for repository in repositories:
                    for policy in resource.policies:
                        config = Configuration(resource.name, nodes, repository, policy)
                        items = self.phases(resource, nodes, repository, policy, quantiles)
                        out.append((config, items))
        return out

    # -- answers -------------------------------------------------------------

    def advise(
        self,
        deadline: float,
        threshold: float | None = None,
        quantiles: Sequence[float] | None = None,
    ) -> Advice:
        """Rank every configuration against ``deadline`` (seconds).

        ``threshold`` and ``quantiles`` default to the settings'. Raises
        :class:`NothingToRank` when no resource is configured.
        """
        if not self.settings.resources:
            raise NothingToRank(
                "no resources to rank: add [[advisor.resources]] to the site file "
                "(name, kind, nodes, policies, app)"
            )
        t = self.settings.threshold if threshold is None else threshold
        qs = tuple(sorted(self.settings.quantiles if quantiles is None else quantiles))
        with self._lock:
            self.refresh()
            candidates = self.candidates(qs)
            every = rank(candidates, deadline, qs, t, keep_below=True)
            count = self._count
        likely = tuple(r for r in every if r.composite is not None and r.probability >= t)
        dropped = tuple(r for r in every if r.composite is None or r.probability < t)
        spec, reason = _speculative(every)
        return Advice(
            deadline=deadline,
            threshold=t,
            quantiles=qs,
            confidence=self.settings.confidence,
            ranked=likely,
            dropped=dropped,
            suggestion=suggest(list(likely), t),
            speculative=spec,
            speculative_reason=reason,
            observations=count,
        )


def _speculative(ranked: Sequence[Ranked]) -> tuple[Speculation | None, str]:
    """The best pair to start together, or why there is none."""
    choice = speculative_choice(ranked, k=2)
    if len(choice.members) >= 2:
        return choice, choice.reason
    if choice.reason:
        return None, choice.reason
    return None, "fewer than two configurations can meet the deadline"
