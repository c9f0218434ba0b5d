"""The ``[advisor]`` section: what the deadline advisor ranks, and where history comes from.

It names the resources an urgent user may pick from (batch clusters or partitions and
clouds, each with node counts and policies), the repositories input is staged from (each
probed periodically), the sizes staged, the quantiles searched and the threshold below
which a configuration is not worth starting. See ``docs/advisor.md``.
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from elasticsite.config.common import DAY, Strict

__all__ = [
    "BATCH_POLICIES",
    "CLOUD_POLICIES",
    "AdvisorConfig",
    "AdvisorRepository",
    "AdvisorResource",
]

BATCH_POLICIES: tuple[str, ...] = ("default", "next_to_run", "preemption")
"""How an urgent job may enter a batch queue: wait its turn, jump to its head, or evict."""

CLOUD_POLICIES: tuple[str, ...] = ("default", "qos", "suspension", "migration", "preemption")
"""How an urgent VM request may be served by a cloud, least disruptive first."""

_RESOURCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
_DEFAULT_QUANTILES = [0.5, 0.75, 0.9, 0.95, 0.99]
GIB = 1024**3


def _resource_name(v: str) -> str:
    if not _RESOURCE.match(v):
        raise ValueError("must be 1-64 letters, digits, '.', '_', ':' or '-'")
    return v


ResourceName = Annotated[str, AfterValidator(_resource_name)]
"""A resource's or repository's name, as the history records it."""


class AdvisorResource(Strict):
    """A place an urgent job can run: a batch cluster (or partition) or a cloud."""

    name: ResourceName = Field(
        description="cluster, partition or cloud name, as history records it"
    )
    kind: Literal["batch", "cloud"] = "batch"
    nodes: list[int] = Field(
        default_factory=lambda: [1],
        min_length=1,
        description="node counts to consider (for a cloud: instances asked at once)",
    )
    policies: list[str] = Field(default_factory=lambda: ["default"], min_length=1)
    app: str = Field("", description="application whose run times bound execution here")

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, v: list[int]) -> list[int]:
        if any(n < 1 for n in v):
            raise ValueError(f"node counts must be >= 1 (got {v})")
        if len(set(v)) != len(v):
            raise ValueError(f"node counts must not repeat (got {v})")
        return v

    @model_validator(mode="after")
    def _policies(self) -> AdvisorResource:
        known = BATCH_POLICIES if self.kind == "batch" else CLOUD_POLICIES
        bad = [p for p in self.policies if p not in known]
        if bad:
            raise ValueError(
                f"resource {self.name}: policies: {', '.join(map(repr, bad))} unknown for a "
                f"{self.kind} resource; choose from {', '.join(known)}"
            )
        if len(set(self.policies)) != len(self.policies):
            raise ValueError(f"resource {self.name}: policies must not repeat")
        return self


class AdvisorRepository(Strict):
    """Where input is staged from: probed by fetching ``bytes`` over HTTP or by a command.

    ``url`` is fetched with a Range request; ``command`` is an argument list (never a
    shell) run with the repository's URL and size in its environment.
    """

    name: ResourceName
    url: str | None = Field(None, description="http(s) URL of a file at least `bytes` long")
    command: list[str] | None = Field(None, description="argv of a command that transfers")
    bytes: int = Field(
        16 * 1024 * 1024, ge=1, le=64 * GIB, description="size of each probe transfer"
    )
    period: float = Field(600.0, gt=0, le=DAY, description="seconds between probes")
    timeout: float = Field(300.0, gt=0, le=DAY, description="seconds before a probe fails")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+(/\S*)?$", v):
            raise ValueError("must be an http:// or https:// URL")
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or not v[0]):
            raise ValueError("must be a non-empty argument list, the program first")
        return v

    @model_validator(mode="after")
    def _one_way(self) -> AdvisorRepository:
        if (self.url is None) == (self.command is None):
            raise ValueError(f"repository {self.name}: give exactly one of url and command")
        return self


class AdvisorConfig(Strict):
    """The deadline advisor: candidates, staging sizes, and how bounds are searched."""

    record: bool = Field(
        True, description="the manager records queue waits and VM allocation delays"
    )
    quantiles: list[float] = Field(
        default_factory=lambda: list(_DEFAULT_QUANTILES),
        min_length=1,
        description="per-phase quantiles the composite search combines",
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="confidence of each BMBP bound")
    threshold: float = Field(0.5, ge=0, le=1, description="least probability worth advising")
    size_classes: list[int] | None = Field(
        None,
        description="upper node-count edges of the size classes; default powers of two",
    )
    resources: list[AdvisorResource] = Field(default_factory=list)
    repositories: list[AdvisorRepository] = Field(default_factory=list)
    input_bytes: int = Field(0, ge=0, le=1024 * GIB, description="bytes staged in per run")
    output_bytes: int = Field(0, ge=0, le=1024 * GIB, description="bytes staged out per run")
    output_repository: str | None = Field(
        None, description="repository output goes to; default: the one input came from"
    )
    overlap_input: bool = Field(True, description="input staging runs during allocation")

    @field_validator("quantiles")
    @classmethod
    def _quantiles(cls, v: list[float]) -> list[float]:
        bad = [q for q in v if not 0 < q < 1]
        if bad:
            raise ValueError(f"each quantile must be strictly between 0 and 1 (got {bad})")
        if len(set(v)) != len(v):
            raise ValueError(f"quantiles must not repeat (got {v})")
        return sorted(v)

    @field_validator("size_classes")
    @classmethod
    def _sizes(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        if not v or v[0] < 1 or any(b <= a for a, b in pairwise(v)):
            raise ValueError(
                f"must be increasing node counts >= 1, the upper edge of each class (got {v})"
            )
        return v

    @model_validator(mode="after")
    def _names(self) -> AdvisorConfig:
        for what, names in (
            ("resources", [r.name for r in self.resources]),
            ("repositories", [r.name for r in self.repositories]),
        ):
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"{what}: {', '.join(twice)} named twice; names must be unique")
        known = {r.name for r in self.repositories}
        if self.output_repository is not None and self.output_repository not in known:
            raise ValueError(
                f"output_repository: {self.output_repository!r} is not one of the "
                f"repositories ({', '.join(sorted(known)) or 'none configured'})"
            )
        if (self.input_bytes or self.output_bytes) and not self.repositories:
            raise ValueError(
                "input_bytes/output_bytes need at least one [[advisor.repositories]] "
                "whose probes bound the staging time"
            )
        return self

    def repository(self, name: str) -> AdvisorRepository:
        """The repository called ``name`` (KeyError if there is none)."""
        for r in self.repositories:
            if r.name == name:
                return r
        raise KeyError(name)
