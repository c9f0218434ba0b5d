"""Replaying a history to measure how good the advisor's bounds would have been.

Every observation is predicted from what was known when its run started, then added:

- **When.** A run's phase that took ``value`` seconds and was observed at ``at`` started
  at ``at - value``; every phase of a trial (observations sharing a ``trial``) is
  predicted when the trial started, its earliest phase start, as an urgent user asks
  before submitting. A prediction sees exactly the observations completed by then;
  one completed at that very instant is not yet known. Observations completed at the
  same time are added in an order set by their content, never by the input's order.
- **How.** Phases are bounded like the advisor bounds them. Allocation and execution:
  BMBP over a :class:`~elasticsite.advisor.series.Series` (with change points) of the
  same resource, policy, size class (and application, for execution). Input and
  output staging of ``nbytes`` from a repository that has probes in the history: the
  forecast of that repository's probes to that resource, as
  :func:`~elasticsite.advisor.forecast.transfer_bound`; without probes or a size, a
  Series of the phase's own earlier durations.
- **Seeding.** With ``seed`` N the first N observations of each key are only added (as
  paper 004 seeded 100 of 200 trials); they are not counted.
- **Too short.** An observation whose key's history is too short for a bound is counted
  as *not predicted*, with the reason, never dropped silently.

Two figures are reported per phase, and per trial overall:

- **correctness**: the share of predicted observations at or under their bound;
- **accuracy** (over-prediction, in percent): ``100 * (sum of bounds - sum of observed)
  / sum of observed`` over the predicted observations: how much larger the mean bound
  was than the mean delay (negative when bounds fell short). This is the reading under
  which paper 004's Table 3.4 overall figures follow from its Table 3.5 averages
  (``(17,869 - 10,833) / 10,833`` is its 64.95 %); it stays finite when some delays
  are zero, which a mean of per-observation ratios would not.

Overall, a trial counts when every phase of it was predicted: its bound is the sum of
the phases' bounds and its quantile the product of theirs (0.95 ** 4 = 0.815).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elasticsite.advisor.bmbp import HistoryTooShort
from elasticsite.advisor.forecast import AdaptiveForecast, transfer_bound
from elasticsite.advisor.series import Series
from elasticsite.advisor.sizes import SizeClasses
from elasticsite.history.observations import PROBE, Observation

__all__ = ["COLUMNS", "Cell", "Evaluation", "Row", "Unpredicted", "evaluate"]

COLUMNS: tuple[str, ...] = ("input", "allocation", "execution", "output")
"""The phases of a run, in the order the tables show them."""
OVERALL = "overall"
_PHASES = (*COLUMNS, PROBE)
_STAGING = ("input", "output")


@dataclass
class Cell:
    """How the bounds of one phase (or of whole trials) of one row fared."""

    predicted: int = 0
    correct: int = 0
    observed: float = 0.0
    bounded: float = 0.0
    not_predicted: int = 0

    def count(self, value: float, bound: float | None) -> None:
        if bound is None:
            self.not_predicted += 1
            return
        self.predicted += 1
        self.correct += value <= bound
        self.observed += value
        self.bounded += bound

    @property
    def correctness(self) -> float | None:
        """The share of predicted observations at or under their bound (None: none)."""
        return self.correct / self.predicted if self.predicted else None

    @property
    def accuracy(self) -> float | None:
        """Over-prediction in percent (module docstring); None when nothing was observed."""
        if not self.predicted or self.observed <= 0:
            return None
        return 100.0 * (self.bounded - self.observed) / self.observed

    def to_dict(self) -> dict[str, Any]:
        return {
            "predicted": self.predicted,
            "not_predicted": self.not_predicted,
            "correctness": self.correctness,
            "accuracy": self.accuracy,
            "mean_observed": self.observed / self.predicted if self.predicted else None,
            "mean_bound": self.bounded / self.predicted if self.predicted else None,
        }


@dataclass
class Row:
    """One resource and policy: its trials and a :class:`Cell` per phase and overall,
    and per size class (Table 4.25's columns) per phase."""

    resource: str
    policy: str
    trials: int = 0
    cells: dict[str, Cell] = field(default_factory=lambda: defaultdict(Cell))
    sizes: dict[str, dict[str, Cell]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(Cell))
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "policy": self.policy,
            "trials": self.trials,
            "phases": {name: cell.to_dict() for name, cell in sorted(self.cells.items())},
            "sizes": {
                phase: {label: cell.to_dict() for label, cell in cells.items()}
                for phase, cells in sorted(self.sizes.items())
            },
        }


@dataclass(frozen=True)
class Unpredicted:
    """Observations of one key that were not predicted, and the last reason why."""

    phase: str
    resource: str
    policy: str
    size: str
    detail: str
    """The application (execution) or repository (staging), if any."""
    count: int
    of: int
    """How many observations of that key were counted, predicted or not."""
    reason: str


@dataclass(frozen=True)
class Evaluation:
    """What a replay found: rows (resource, policy) and what could not be predicted."""

    quantile: float
    confidence: float
    seed: int
    observations: int
    seeded: int
    rows: list[Row]
    unpredicted: list[Unpredicted]
    sizes: list[str]
    """The size classes that appear, in order: the columns of the by-size table."""

    @property
    def predicted(self) -> int:
        return sum(c.predicted for r in self.rows for p, c in r.cells.items() if p != OVERALL)

    @property
    def not_predicted(self) -> int:
        return sum(u.count for u in self.unpredicted)

    def to_dict(self) -> dict[str, Any]:
        return {
            "quantile": self.quantile,
            "confidence": self.confidence,
            "seed": self.seed,
            "observations": self.observations,
            "seeded": self.seeded,
            "predicted": self.predicted,
            "not_predicted": self.not_predicted,
            "rows": [row.to_dict() for row in self.rows],
            "unpredicted": [u.__dict__ for u in self.unpredicted],
        }


_ANY = "*"


class _Predictor:
    """The state of the replay, kept the way the advisor keeps it (:mod:`.service`): a
    Series per allocation key (resource, policy, size class) and per execution key
    (resource, application, size class), a forecast per repository's probes to each
    resource and pooled over resources."""

    def __init__(
        self,
        quantile: float,
        confidence: float,
        sizes: SizeClasses,
        exact: Collection[str],
        detect_changes: bool,
    ) -> None:
        self.quantile, self.confidence, self.sizes = quantile, confidence, sizes
        self.exact, self.detect_changes = frozenset(exact), detect_changes
        self.series: dict[tuple[str, ...], Series] = {}
        self.forecasts: dict[tuple[str, str], AdaptiveForecast] = {}
        self.probed: set[str] = set()

    def size(self, o: Observation) -> str:
        """The size class, or the exact count for a resource sized exactly (a cloud)."""
        return str(o.nodes) if o.resource in self.exact else self.sizes.label(o.nodes)

    def key(self, o: Observation) -> tuple[str, ...]:
        if o.phase == "allocation":
            return (o.phase, o.resource, o.policy, self.size(o))
        if o.phase == "execution":
            return (o.phase, o.resource, o.app, self.size(o))
        return (o.phase, o.resource, o.repository)  # staging measured whole

    def staged(self, o: Observation) -> bool:
        return o.phase in _STAGING and bool(o.nbytes) and o.repository in self.probed

    def add(self, o: Observation) -> None:
        if o.phase == PROBE:
            for where in (o.resource, _ANY):
                forecast = self.forecasts.get((o.repository, where))
                if forecast is None:
                    forecast = self.forecasts[(o.repository, where)] = AdaptiveForecast()
                forecast.add(o.value)
            return
        key = self.key(o)
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = Series(
                confidence=self.confidence, detect_changes=self.detect_changes
            )
        series.add(o.value)

    def predict(self, o: Observation) -> tuple[float | None, str]:
        """The bound for ``o`` from what was added so far, or None and why not."""
        try:
            if self.staged(o):
                forecast = self.forecasts.get((o.repository, o.resource))
                if forecast is None or len(forecast) < 2:
                    forecast = self.forecasts.get((o.repository, _ANY))
                if forecast is None:
                    return None, f"no probe of {o.repository} yet"
                return transfer_bound(forecast, o.nbytes or 0, self.quantile), ""
            series = self.series.get(self.key(o)) or Series(confidence=self.confidence)
            return series.bound(self.quantile), ""
        except HistoryTooShort as exc:
            return None, str(exc)


def evaluate(
    observations: Iterable[Observation],
    *,
    quantile: float = 0.95,
    confidence: float = 0.95,
    seed: int = 0,
    size_classes: SizeClasses | None = None,
    exact_sizes: Collection[str] = (),
    detect_changes: bool = True,
) -> Evaluation:
    """Replay ``observations`` (any order) as the module describes and report.

    ``exact_sizes`` names resources (clouds) whose allocation delays are kept per exact
    node count rather than per size class, as the advisor keeps a cloud's."""
    if seed < 0:
        raise ValueError(f"seed must be >= 0 (got {seed})")
    sizes = size_classes or SizeClasses()
    predictor = _Predictor(quantile, confidence, sizes, exact_sizes, detect_changes)
    history = sorted(observations, key=_order)
    predictor.probed = {o.repository for o in history if o.phase == PROBE}
    starts: dict[str, float] = {}
    for o in history:
        if o.trial and o.phase != PROBE:
            starts[o.trial] = min(starts.get(o.trial, o.at - o.value), o.at - o.value)
    seen: dict[tuple[str, ...], int] = defaultdict(int)
    seeded: set[int] = set()
    events: list[tuple[float, int, int]] = []  # (time, 0 predict | 1 add, index)
    for i, o in enumerate(history):
        events.append((o.at, 1, i))
        if o.phase == PROBE:
            continue
        key = predictor.key(o)
        seen[key] += 1
        if seen[key] <= seed:
            seeded.add(i)
        else:
            events.append(
                (starts.get(o.trial, o.at - o.value) if o.trial else o.at - o.value, 0, i)
            )
    heapq.heapify(events)
    bounds: dict[int, float | None] = {}
    reasons: dict[tuple[str, ...], tuple[int, str, Observation]] = {}
    totals: dict[tuple[str, ...], int] = defaultdict(int)
    least: dict[tuple[str, ...], int] = {}
    while events:
        _, kind, i = heapq.heappop(events)
        o = history[i]
        if kind:
            predictor.add(o)
            continue
        bound, why = predictor.predict(o)
        bounds[i] = bound
        key = predictor.key(o)
        totals[key] += 1
        least[key] = min(least.get(key, o.nodes), o.nodes)
        if bound is None:
            count = reasons.get(key, (0,))[0]
            reasons[key] = (count + 1, why, o)
    rows = _tabulate(history, bounds, seeded, predictor.size)
    unpredicted = [
        Unpredicted(
            phase=o.phase,
            resource=o.resource,
            policy=o.policy if o.phase == "allocation" else "",
            size=predictor.size(o) if o.phase in ("allocation", "execution") else "",
            detail=o.app if o.phase == "execution" else o.repository,
            count=count,
            of=totals[key],
            reason=why,
        )
        for key, (count, why, o) in sorted(
            reasons.items(),
            key=lambda item: (
                item[1][2].resource,
                item[1][2].policy,
                _PHASES.index(item[1][2].phase),
                least[item[0]],
                item[0],
            ),
        )  # resource, policy, phase, then size classes from the smallest
    ]
    smallest: dict[str, int] = {}
    for i in bounds:
        label = predictor.size(history[i])
        smallest[label] = min(smallest.get(label, history[i].nodes), history[i].nodes)
    return Evaluation(
        quantile=quantile,
        confidence=confidence,
        seed=seed,
        observations=sum(o.phase != PROBE for o in history),
        seeded=len(seeded),
        rows=rows,
        unpredicted=unpredicted,
        sizes=sorted(smallest, key=smallest.__getitem__),
    )


def _order(o: Observation) -> tuple[Any, ...]:
    """Time order; ties broken by content, so the order observations come in never
    changes the replay."""
    return (o.at, o.phase, o.resource, o.policy, o.nodes, o.repository, o.app, o.value, o.ref,
            o.trial)  # fmt: skip


def _tabulate(
    history: Sequence[Observation],
    bounds: Mapping[int, float | None],
    seeded: set[int],
    size: Callable[[Observation], str],
) -> list[Row]:
    rows: dict[tuple[str, str], Row] = {}
    trials: dict[str, list[int]] = defaultdict(list)
    for i, o in enumerate(history):
        if o.phase == PROBE:
            continue
        if o.trial:
            trials[o.trial].append(i)
        if i in seeded:
            continue
        row = rows.setdefault((o.resource, o.policy), Row(o.resource, o.policy))
        row.cells[o.phase].count(o.value, bounds[i])
        row.sizes[o.phase][size(o)].count(o.value, bounds[i])
    for members in trials.values():
        if any(i in seeded for i in members):
            continue
        lead = next((history[i] for i in members if history[i].phase == "allocation"), None)
        lead = lead or history[members[0]]
        row = rows.setdefault((lead.resource, lead.policy), Row(lead.resource, lead.policy))
        row.trials += 1
        phase_bounds = [bounds[i] for i in members]
        total = sum(history[i].value for i in members)
        known = None if any(b is None for b in phase_bounds) else sum(phase_bounds)  # type: ignore[arg-type]
        row.cells[OVERALL].count(total, known)
    return [rows[key] for key in sorted(rows)]
