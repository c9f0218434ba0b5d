"""What a finite cloud's urgent policies are, and the actions their plans are made of.

:class:`CloudPolicy` lists the policies of paper 004's Table 2.2 for clouds, least
disruptive first; a :class:`Plan` says where an urgent VM goes and what happens to
other VMs first (:class:`Preempt`, :class:`Suspend`, :class:`Migrate`,
:class:`Shrink`); :class:`Resume` and :class:`Restore` are what giving room back does.
:mod:`.capacity` makes the plans.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from elasticsite.model import VMType

__all__ = [
    "BREADBOARD_TYPES",
    "Action",
    "CloudPolicy",
    "Migrate",
    "Plan",
    "Preempt",
    "Restore",
    "Resume",
    "Shrink",
    "Suspend",
]


class CloudPolicy(enum.StrEnum):
    """An elevated-priority policy of a finite cloud, least disruptive first."""

    DEFAULT = "default"
    URGENT_ONLY = "urgent_only"
    QOS = "qos"
    MIGRATION = "migration"
    SUSPENSION = "suspension"
    PREEMPTION = "preemption"


BREADBOARD_TYPES: dict[str, VMType] = {
    t.name: t
    for t in (
        VMType("m1.small", 1, 128),
        VMType("c1.medium", 1, 256),
        VMType("m1.large", 2, 512),
        VMType("m1.xlarge", 2, 1024),
        VMType("c1.xlarge", 4, 2048),
    )
}
"""The VM types of paper 004's Breadboard clouds (Table 4.4): cores and memory in MiB.
Their hosts have 8 cores and 16 GB."""


@dataclass(frozen=True, slots=True)
class Preempt:
    vm: str


@dataclass(frozen=True, slots=True)
class Suspend:
    vm: str


@dataclass(frozen=True, slots=True)
class Migrate:
    vm: str
    source: str
    target: str


@dataclass(frozen=True, slots=True)
class Shrink:
    vm: str
    cores: int
    memory_mb: int


@dataclass(frozen=True, slots=True)
class Resume:
    """A suspended VM that fits on its host again."""

    vm: str


@dataclass(frozen=True, slots=True)
class Restore:
    """A VM shrunk for an urgent one gets its full size back."""

    vm: str


Action = Preempt | Suspend | Migrate | Shrink


@dataclass(frozen=True, slots=True)
class Plan:
    """Where an urgent VM goes and what happens to others first (no actions: it fits)."""

    host: str
    policy: CloudPolicy
    actions: tuple[Action, ...] = ()

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(a.vm for a in self.actions)
