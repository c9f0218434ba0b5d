"""The sections an experiment spec is made of: its workload, cloud, job categories and
sweep, each a strict model checked field by field (:mod:`.specs` puts them together)."""

from __future__ import annotations

from dataclasses import fields, replace
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from elasticsite.batch.selective import Categories
from elasticsite.sim.cloud import CloudModel, Durations
from elasticsite.traces.lublin import TYPELESS, LublinParams

__all__ = ["CloudSection", "LublinSource", "SWFSource", "SelectiveSection", "Strict", "Sweep"]

_LUBLIN_FIELDS = tuple(f.name for f in fields(LublinParams))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LublinSource(Strict):
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


class SWFSource(Strict):
    """A trace in the Standard Workload Format; round ``r`` replays its ``r``-th interval."""

    source: Literal["swf"]
    path: Path
    interval_days: float = Field(60.0, gt=0)
    procs_per_unit: int = Field(1, ge=1, description="CPUs per allocation unit (node/VM)")


class CloudSection(Strict):
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


class SelectiveSection(Strict):
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


class Sweep(Strict):
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
