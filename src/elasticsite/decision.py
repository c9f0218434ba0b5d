"""What a policy evaluation asks the manager or the simulator to do: a :class:`Decision`.

Launches, drains, terminations, redirections, holds and hand-overs, each with its
:class:`~elasticsite.worker.Cause`; plain data, carried out by :mod:`elasticsite.core`.
Re-exported by :mod:`elasticsite.model`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from elasticsite.jobs import Job
from elasticsite.worker import Cause

__all__ = [
    "URGENCIES",
    "Assign",
    "Decision",
    "Drain",
    "Launch",
    "Redirect",
    "Refusal",
    "Terminate",
    "Undrain",
    "WorkerAction",
]

URGENCIES = ("red", "orange", "yellow")
"""SPRUCE's urgencies, most urgent first: what an urgent job, its launch and a
resource's policy map name."""


@dataclass(frozen=True, slots=True)
class Launch:
    """Start ``count`` workers of ``vm_type`` on ``cloud``.

    ``nodes``, when given (one per worker), are the batch-system names the workers
    must take, for batch systems that name their cloud nodes themselves (Slurm's
    power saving); otherwise each worker's node is named after the worker.
    """

    cloud: str
    vm_type: str
    count: int
    cause: Cause
    nodes: tuple[str, ...] = ()
    urgency: str = ""
    """One of :data:`URGENCIES` when launched for an urgent job: a finite cloud
    gives the launch that urgency's policy."""
    user: str = ""
    """The user whose share the workers are for: their nodes run that user's jobs only
    (:attr:`Worker.owner`); ``""``: anyone's."""


@dataclass(frozen=True, slots=True)
class Assign:
    """Make a worker's node run ``user``'s jobs only from now on (``""``: anyone's). A
    job already running there goes on."""

    worker_id: str
    user: str
    cause: Cause


@dataclass(frozen=True, slots=True)
class WorkerAction:
    """Something to do to one worker, and why; each kind its own class below (an action
    equals only one of its own kind)."""

    worker_id: str
    cause: Cause


@dataclass(frozen=True, slots=True)
class Drain(WorkerAction):
    """Stop giving jobs to a worker; it is terminated once its jobs are done."""


@dataclass(frozen=True, slots=True)
class Undrain(WorkerAction):
    """Put a draining worker back into service."""


@dataclass(frozen=True, slots=True)
class Terminate(WorkerAction):
    """Give a worker's instance back to its cloud now."""


@dataclass(frozen=True, slots=True)
class Redirect:
    """Send a queued job to ``target``: the partition (or queue) the cloud's workers
    serve, where the batch system starts it on a cloud worker instead of the site."""

    job_id: str
    target: str
    cause: Cause | str = Cause.REDIRECTED


@dataclass(frozen=True, slots=True)
class Refusal:
    """Launches a limit held back, and why: the budget (``limit``), which the period's
    ``forecast`` spend would have passed with them (``allowed``: the budget, plus the
    urgent extra for urgent launches), to the period's end ``until``."""

    launch: Launch
    limit: Literal["budget"]
    forecast: float
    allowed: float
    until: float


@dataclass(slots=True)
class Decision:
    """What one policy evaluation asks the driver (manager or simulator) to do."""

    launch: list[Launch] = field(default_factory=list)
    drain: list[Drain] = field(default_factory=list)
    undrain: list[Undrain] = field(default_factory=list)
    terminate: list[Terminate] = field(default_factory=list)
    redirect: list[Redirect] = field(default_factory=list)
    hold: list[Job] = field(default_factory=list)
    """Queued jobs to keep from starting (fair share: their user has more than theirs)."""
    release: list[str] = field(default_factory=list)
    """Ids of jobs held before that may start again."""
    assign: list[Assign] = field(default_factory=list)
    """Workers handed to another user (fair share: lent, or given back)."""
    refused: list[Refusal] = field(default_factory=list)
    """Launches the budget held back (nothing to carry out: for reports and logs)."""
    unservable: dict[str, str] = field(default_factory=dict)
    """Queued jobs no cloud could run, and why (job id -> reason): nothing is launched
    for them (:mod:`elasticsite.feasibility`). Not an action: the manager shows them."""

    def launched(self, cloud: str | None = None) -> int:
        return sum(x.count for x in self.launch if cloud is None or x.cloud == cloud)

    def __bool__(self) -> bool:
        return bool(
            self.launch or self.drain or self.undrain or self.terminate or self.redirect
            or self.hold or self.release or self.assign
        )  # fmt: skip

    def extend(self, other: Decision) -> None:
        self.launch.extend(other.launch)
        self.drain.extend(other.drain)
        self.undrain.extend(other.undrain)
        self.terminate.extend(other.terminate)
        self.redirect.extend(other.redirect)
        self.hold.extend(other.hold)
        self.release.extend(other.release)
        self.assign.extend(other.assign)
        self.refused.extend(other.refused)
        self.unservable.update(other.unservable)

    def summary(self) -> str:
        parts = []
        if self.launch:
            parts.append(
                "launch " + ", ".join(f"{x.count}x{x.vm_type}@{x.cloud}" for x in self.launch)
            )
        for label, items in (
            ("drain", self.drain),
            ("undrain", self.undrain),
            ("terminate", self.terminate),
            ("redirect", self.redirect),
            ("hold", self.hold),
            ("release", self.release),
            ("assign", self.assign),
        ):
            if items:
                parts.append(f"{label} {len(items)}")
        if self.refused:
            parts.append(f"refused {sum(r.launch.count for r in self.refused)} (budget)")
        return "; ".join(parts) or "nothing"
