"""Experiment specs: TOML validated into models, or one error line per bad field.

A spec is a paper-002 replay sweep (:class:`ReplaySpec`, ``kind = "replay"``), a
paper-002 deadline experiment (:class:`DeadlineSpec`, ``kind = "deadline"``) or a
paper-000 comparison of provisioning policies (:class:`ElasticSpec`, ``kind =
"elastic"``); :mod:`.experiment` runs them. See ``experiments/*.toml`` for annotated
examples.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from elasticsite.config import explain
from elasticsite.policies.base import SHARED_SETTINGS, PolicySettings, options_model, settings_for
from elasticsite.policies.strategies import (
    STRATEGIES,
    Aggressive,
    Conservative,
    Selective,
    Strategy,
    get_strategy,
)
from elasticsite.sim.spec_sections import (
    CloudSection,
    LublinSource,
    SelectiveSection,
    Strict,
    Sweep,
    SWFSource,
)

__all__ = [
    "CloudSection",
    "DeadlineSpec",
    "ElasticRun",
    "ElasticSpec",
    "LublinSource",
    "ReplaySpec",
    "SWFSource",
    "SelectiveSection",
    "Spec",
    "SpecError",
    "Sweep",
    "load_spec",
    "parse_spec",
]


class SpecError(ValueError):
    """The experiment spec is unusable; the message names the file and the field."""


class ReplaySpec(Strict):
    """A paper-002 experiment: site plus cloud under strategy sets, against the base."""

    kind: Literal["replay"] = "replay"
    name: str = "experiment"
    rounds: int = Field(5, ge=1)
    seed: int = Field(0, ge=0)
    site_procs: int = Field(144, ge=1, description="allocation units: one node = one VM")
    strategies: list[str] = Field(min_length=1)
    workload: Annotated[LublinSource | SWFSource, Field(discriminator="source")] = Field(
        default_factory=LublinSource
    )
    sweep: Sweep | None = None
    cloud: CloudSection = Field(default_factory=CloudSection)
    selective: SelectiveSection = Field(default_factory=SelectiveSection)

    @model_validator(mode="before")
    @classmethod
    def _lublin_by_default(cls, data: Any) -> Any:
        workload = data.get("workload") if isinstance(data, dict) else None
        if isinstance(workload, dict) and "source" not in workload:
            return {**data, "workload": {"source": "lublin", **workload}}
        return data

    @field_validator("strategies")
    @classmethod
    def _strategies(cls, value: list[str]) -> list[str]:
        for s in value:
            if s not in STRATEGIES or s == "base":
                valid = ", ".join(n for n in STRATEGIES if n != "base")
                raise ValueError(f"unknown strategy {s!r} (base always runs); valid: {valid}")
        if len(set(value)) != len(value):
            raise ValueError("strategies must be distinct")
        return value

    def strategy(self, name: str) -> Strategy:
        """A fresh strategy set by name, ``selective`` with this spec's categories."""
        if name == "selective":
            return Selective(self.selective.categories())
        return get_strategy(name)

    @field_validator("cloud")
    @classmethod
    def _single_core(cls, value: CloudSection) -> CloudSection:
        if value.cores_per_vm != 1:
            raise ValueError("a replay runs one single-core VM per processor: cores_per_vm = 1")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ReplaySpec:
        if self.sweep is not None and not isinstance(self.workload, LublinSource):
            raise ValueError("sweep: only a Lublin workload can sweep a model parameter")
        if isinstance(self.workload, LublinSource):
            values = self.sweep.values if self.sweep else [None]
            for v in values:
                extra = {} if v is None or self.sweep is None else {self.sweep.parameter: v}
                where = "workload.params" if v is None else f"sweep.values ({v:g})"
                try:
                    self.workload.lublin(extra).size_bounds(self.workload.machine_size)
                except ValueError as exc:
                    raise ValueError(f"{where}: {exc}") from None
            if self.workload.machine_size > self.site_procs:
                raise ValueError(
                    f"workload.machine_size: {self.workload.machine_size} exceeds site_procs "
                    f"{self.site_procs}; the largest jobs could never run on the site"
                )
        return self


def _distinct_within(value: list[float], high: float, one: str, many: str) -> list[float]:
    """``value`` if each of its numbers is in (0, ``high``] and none repeats."""
    if any(not 0 < f <= high for f in value):
        raise ValueError(f"every {one} must be in (0, {high:g}], got {value}")
    if len(set(value)) != len(value):
        raise ValueError(f"{many} must be distinct")
    return value


class DeadlineSpec(ReplaySpec):
    """A paper-002 deadline experiment (Figures 4 and 5): a share of the jobs gets a
    deadline, and each strategy set is judged by the violations and rejections it
    avoids against a site-only, earliest-deadline-first base run, and at what price.

    For every (stringency, fraction, round): the workload runs once on the site alone
    under EASY to give each job its turnaround; a Bernoulli draw with probability
    ``fraction`` picks the deadline jobs (the same draw for every fraction of a round,
    so the chosen sets nest) and eq. 5 gives their deadlines; the base run schedules
    the site alone in EDF order with EASY backfilling (rejecting a deadline it would
    break when ``reject`` is set); then each strategy set runs with the cloud.
    """

    kind: Literal["deadline"] = "deadline"  # type: ignore[assignment]
    fractions: list[float] = Field(
        default_factory=lambda: [0.1, 0.3, 0.5, 0.7],
        min_length=1,
        description="shares of deadline-constrained jobs (Bernoulli), the x axis",
    )
    stringency: list[float] = Field(
        default_factory=lambda: [0.9, 1.3, 1.7],
        min_length=1,
        description="stringency factors sf of eq. 5, one panel each (tight, normal, relaxed)",
    )
    reject: bool = Field(
        False, description="deadline strategies reject a job whose deadline they cannot meet"
    )
    eq5: Literal["later", "printed"] = Field(
        "later",
        description="'later': a deadline is the later of st + sf x ta and the base "
        "completion; 'printed': the earlier, as eq. 5 is printed (every sf >= 1 then "
        "gives the base completion)",
    )

    @field_validator("fractions")
    @classmethod
    def _fractions(cls, value: list[float]) -> list[float]:
        return _distinct_within(value, 1, "fraction", "fractions")

    @field_validator("stringency")
    @classmethod
    def _stringency(cls, value: list[float]) -> list[float]:
        return _distinct_within(value, 100, "stringency factor", "stringency factors")

    @model_validator(mode="after")
    def _no_sweep(self) -> DeadlineSpec:
        if self.sweep is not None:
            raise ValueError("sweep: a deadline experiment sweeps `fractions`; drop [sweep]")
        return self

    def strategy(self, name: str) -> Strategy:
        """A fresh strategy set; the deadline ones reject when ``reject`` is set."""
        if name == "deadline_aggressive":
            return Aggressive(reject=self.reject)
        if name == "deadline_conservative":
            return Conservative(reject=self.reject)
        return super().strategy(name)

    def base(self) -> Strategy:
        """The site-only base: EDF with EASY backfilling (rejecting, with ``reject``)."""
        return Aggressive(reject=self.reject)


class ElasticRun(Strict):
    """One workload under one policy, with its own cloud when given."""

    workload: str
    policy: str
    cloud: CloudSection | None = None


class ElasticSpec(Strict):
    """A paper-000 experiment: built-in workloads under provisioning policies."""

    kind: Literal["elastic"]
    name: str = "experiment"
    rounds: int = Field(1, ge=1)
    seed: int = Field(0, ge=0)
    workloads: list[str] = Field(default_factory=list)
    policies: list[str] = Field(default_factory=list)
    runs: list[ElasticRun] = Field(default_factory=list)
    interval: float = Field(10.0, gt=0)
    scheduler: Literal["fcfs", "easy"] = "easy"
    timelines: bool = False
    cloud: CloudSection = Field(default_factory=lambda: CloudSection(vm_limit=10, boot="60"))
    policy_settings: dict[str, int | float | str] = Field(default_factory=dict)
    prewarm: list[str] = Field(
        default_factory=lambda: ["dedicated"],
        description="policies whose workers are booted before the first job (the papers' "
        "dedicated baseline): decisions start the longest boot plus two intervals early",
    )

    @model_validator(mode="after")
    def _names(self) -> ElasticSpec:
        from elasticsite import policies
        from elasticsite.workloads import workload_names

        for w in [*self.workloads, *(r.workload for r in self.runs)]:
            if w not in workload_names():
                raise ValueError(f"workloads: unknown workload {w!r}; valid: {workload_names()}")
        for p in [*self.policies, *(r.policy for r in self.runs), *self.prewarm]:
            if p not in policies.available():
                raise ValueError(f"policies: unknown policy {p!r}; valid: {policies.available()}")
        if not self.all_runs():
            raise ValueError("give workloads and policies, or [[runs]]: nothing to run")
        keys = [(r.workload, r.policy) for r in self.all_runs()]
        if len(set(keys)) != len(keys):
            raise ValueError("runs: a (workload, policy) pair appears twice")
        chosen = {r.policy for r in self.all_runs()}
        names = SHARED_SETTINGS.union(*(options_model(p).model_fields for p in chosen))
        bad = sorted(set(self.policy_settings) - names)
        if bad:
            raise ValueError(f"policy_settings: unknown setting(s) {', '.join(bad)}")
        for p in sorted(chosen):
            try:
                self.settings(p)
            except ValidationError as exc:
                raise ValueError(explain(exc, "policy_settings")) from None
        return self

    def settings(self, policy: str) -> PolicySettings:
        """What ``policy`` decides with: the ``policy_settings`` it knows (the limits
        every policy obeys and its options), validated by its options model."""
        known = SHARED_SETTINGS | options_model(policy).model_fields.keys()
        given = {k: v for k, v in self.policy_settings.items() if k in known}
        return settings_for(policy, **given)

    def all_runs(self) -> list[ElasticRun]:
        """The cross product of ``workloads`` and ``policies``, then the explicit ``runs``."""
        crossed = [ElasticRun(workload=w, policy=p) for w in self.workloads for p in self.policies]
        return crossed + list(self.runs)


Spec = ReplaySpec | ElasticSpec
"""Every kind of spec (a :class:`DeadlineSpec` is a :class:`ReplaySpec`)."""

_KINDS: dict[str, type[ReplaySpec] | type[ElasticSpec]] = {
    "replay": ReplaySpec,
    "deadline": DeadlineSpec,
    "elastic": ElasticSpec,
}


def parse_spec(data: dict[str, Any], source: str = "<spec>") -> Spec:
    """Validate parsed TOML; :class:`SpecError` names ``source`` and each bad field."""
    kind = data.get("kind", "replay")
    model = _KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise SpecError(f"{source}: kind: {kind!r} is not one of {', '.join(_KINDS)}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        # union members add their tag ("lublin", "swf") to the location: drop it
        msg = explain(exc, source, drop=("lublin", "swf", "CloudSection"))
        raise SpecError(msg) from None


def load_spec(path: str | Path) -> Spec:
    """Read and validate a TOML experiment spec; an SWF path is taken relative to it."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    spec = parse_spec(data, str(path))
    if isinstance(spec, ReplaySpec) and isinstance(spec.workload, SWFSource):
        swf = spec.workload.path
        if not swf.is_absolute():
            swf = path.parent / swf
        if not swf.exists():
            raise SpecError(f"{path}: workload.path: no such file {str(swf)!r}")
        spec = spec.model_copy(update={"workload": spec.workload.model_copy(update={"path": swf})})
    return spec
