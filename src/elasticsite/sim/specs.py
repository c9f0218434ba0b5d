"""Experiment specs: TOML validated into models, or one error line per bad field.

A spec is either a paper-002 replay sweep (:class:`ReplaySpec`) or a paper-000
comparison of provisioning policies (:class:`ElasticSpec`); :mod:`.experiment` runs
them. See ``experiments/*.toml`` for annotated examples.
"""

from __future__ import annotations

import tomllib
from dataclasses import fields, replace
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from elasticsite.batch.selective import Categories
from elasticsite.config import explain
from elasticsite.sim.cloud import CloudModel, Durations
from elasticsite.sim.lublin import TYPELESS, LublinParams
from elasticsite.sim.strategies import STRATEGIES, Selective, Strategy, get_strategy

__all__ = [
    "CloudSection",
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

_LUBLIN_FIELDS = tuple(f.name for f in fields(LublinParams))


class SpecError(ValueError):
    """The experiment spec is unusable; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LublinSource(_Strict):
    """The Lublin99 type-less model, generated per round and cut at ``duration_days``."""

    source: Literal["lublin"] = "lublin"
    duration_days: float = Field(60.0, gt=0)
    machine_size: int = Field(144, ge=1)
    walltime_f: float = Field(0.0, ge=0, description="0: requests the run time exactly")
    params: dict[str, float] = Field(default_factory=dict)

    @field_validator("params")
    @classmethod
    def _known(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(_LUBLIN_FIELDS))
        if unknown:
            raise ValueError(
                f"unknown Lublin parameter(s) {', '.join(unknown)}; "
                f"valid: {', '.join(_LUBLIN_FIELDS)}"
            )
        return value

    def lublin(self, extra: dict[str, float] | None = None) -> LublinParams:
        """The type-less defaults with ``params`` (and ``extra``) applied."""
        return replace(TYPELESS, **{**self.params, **(extra or {})})


class SWFSource(_Strict):
    """A trace in the Standard Workload Format; round ``r`` replays its ``r``-th interval."""

    source: Literal["swf"]
    path: Path
    interval_days: float = Field(60.0, gt=0)
    procs_per_unit: int = Field(1, ge=1, description="CPUs per allocation unit (node/VM)")


class CloudSection(_Strict):
    """The IaaS cloud: how many VMs at once, what they cost, how long they boot."""

    vm_limit: int = Field(144, ge=0)
    price_per_hour: float = Field(0.10, ge=0)
    billing_increment: float = Field(3600.0, gt=0, description="seconds; 3600 = whole hours")
    boot: str = "0"
    shutdown: str = "0"
    cores_per_vm: int = Field(1, ge=1)
    spot: bool = False
    interruptions_per_hour: float = Field(
        0.0, ge=0, description="spot capacity: rate at which the cloud takes a VM back"
    )
    spot_notice: float = Field(120.0, ge=0, description="seconds of notice before it does")

    @field_validator("boot", "shutdown")
    @classmethod
    def _duration(cls, value: str) -> str:
        Durations.parse(value)
        return value

    def model(self, name: str = "cloud") -> CloudModel:
        """The simulator's cloud."""
        return CloudModel(
            name,
            vm_limit=self.vm_limit,
            boot=Durations.parse(self.boot),
            shutdown=Durations.parse(self.shutdown),
            price_per_hour=self.price_per_hour,
            billing_increment=self.billing_increment,
            cores_per_vm=self.cores_per_vm,
            spot=self.spot,
            interruptions_per_hour=self.interruptions_per_hour,
            spot_notice=self.spot_notice,
        )


class SelectiveSection(_Strict):
    """The job categories of the ``selective`` strategy set (Selective-Differential-
    Adaptive: one adaptive threshold per category). ``selective_global`` ignores them."""

    runtime_cuts: list[float] = Field(
        default_factory=lambda: [3600.0], description="seconds of requested time, ascending"
    )
    width_cuts: list[int] = Field(
        default_factory=lambda: [8], description="VMs (processors), ascending"
    )

    @field_validator("runtime_cuts", "width_cuts")
    @classmethod
    def _cuts(cls, value: list[Any]) -> list[Any]:
        if any(not c > 0 for c in value):
            raise ValueError(f"every cut must be > 0, got {value}")
        if any(b <= a for a, b in pairwise(value)):
            raise ValueError(f"cuts must be strictly ascending, got {value}")
        return value

    def categories(self) -> Categories:
        """The categories these cuts make."""
        return Categories(tuple(self.runtime_cuts), tuple(self.width_cuts))


class Sweep(_Strict):
    """One Lublin parameter and the values it takes, one at a time."""

    parameter: str
    values: list[float] = Field(min_length=1)

    @field_validator("parameter")
    @classmethod
    def _lublin(cls, value: str) -> str:
        if value not in _LUBLIN_FIELDS:
            raise ValueError(f"not a Lublin parameter; valid: {', '.join(_LUBLIN_FIELDS)}")
        return value

    @field_validator("values")
    @classmethod
    def _distinct(cls, value: list[float]) -> list[float]:
        if len(set(value)) != len(value):
            raise ValueError("values must be distinct")
        return value


class ReplaySpec(_Strict):
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


class ElasticRun(_Strict):
    """One workload under one policy, with its own cloud when given."""

    workload: str
    policy: str
    cloud: CloudSection | None = None


class ElasticSpec(_Strict):
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
        names = {f.name for f in fields(policies.PolicySettings)}
        bad = sorted(set(self.policy_settings) - names)
        if bad:
            raise ValueError(f"policy_settings: unknown setting(s) {', '.join(bad)}")
        return self

    def all_runs(self) -> list[ElasticRun]:
        """The cross product of ``workloads`` and ``policies``, then the explicit ``runs``."""
        crossed = [ElasticRun(workload=w, policy=p) for w in self.workloads for p in self.policies]
        return crossed + list(self.runs)


Spec = ReplaySpec | ElasticSpec


def parse_spec(data: dict[str, Any], source: str = "<spec>") -> Spec:
    """Validate parsed TOML; :class:`SpecError` names ``source`` and each bad field."""
    model: type[ReplaySpec] | type[ElasticSpec] = (
        ElasticSpec if data.get("kind") == "elastic" else ReplaySpec
    )
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
