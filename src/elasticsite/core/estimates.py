"""Running estimates of each cloud's boot and shutdown times, from what the workers did.

A boot is seen when a worker joins (requested -> joined), a shutdown when its
instance is gone (terminating -> terminated). Each cloud keeps a window of the last
:data:`WINDOW` of each, filled at first with the configured ``boot_time`` and
``shutdown_time``, so one fast first boot of a burst moves the estimate a tenth of
the way, and :data:`WINDOW` observations replace the configuration entirely. The
window's means replace the configured times in the snapshot the policy decides on
(so the waste time paper 000's policies weigh is the one the cloud shows now),
unless the cloud's ``waste_estimate`` is ``fixed``.

Part of the core, so the live manager and the simulator estimate alike. Pure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from elasticsite.core.plan import CoreConfig, CoreState
from elasticsite.model import Cause, CloudSpec, Transition, WorkerState

__all__ = ["WINDOW", "ObservedTimes", "apply", "track"]

WINDOW = 10
"""Boots (and shutdowns) per cloud the running means are taken over."""

_UP = WorkerState.UP_STATES


@dataclass
class ObservedTimes:
    """One cloud's latest boot and shutdown durations, in seconds."""

    boots: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    shutdowns: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))

    @classmethod
    def starting_from(cls, spec: CloudSpec) -> ObservedTimes:
        """A window full of the configured times."""
        return cls(
            deque([spec.boot_time] * WINDOW, maxlen=WINDOW),
            deque([spec.shutdown_time] * WINDOW, maxlen=WINDOW),
        )

    @property
    def boot(self) -> float:
        return sum(self.boots) / len(self.boots) if self.boots else 0.0

    @property
    def shutdown(self) -> float:
        return sum(self.shutdowns) / len(self.shutdowns) if self.shutdowns else 0.0


def track(state: CoreState, config: CoreConfig, transitions: Iterable[Transition]) -> None:
    """Take the boots and shutdowns among ``transitions`` (each given once, just after
    it happened: a shutdown is timed from the worker's move before it)."""
    for t in transitions:
        rec = state.records.get(t.worker_id)
        if rec is None:
            continue
        w = rec.worker
        if t.cause == Cause.JOINED and t.to_state in _UP:
            _seen(state, config, w.cloud).boots.append(max(0.0, t.at - w.requested_at))
        elif t.to_state is WorkerState.TERMINATED and len(w.history) >= 2:
            before = w.history[-2]
            if before.to_state is WorkerState.TERMINATING:
                _seen(state, config, w.cloud).shutdowns.append(max(0.0, t.at - before.at))


def _seen(state: CoreState, config: CoreConfig, cloud: str) -> ObservedTimes:
    seen = state.times.get(cloud)
    if seen is None:
        spec = next((c for c in config.clouds if c.name == cloud), None)
        seen = ObservedTimes() if spec is None else ObservedTimes.starting_from(spec)
        state.times[cloud] = seen
    return seen


def apply(state: CoreState, clouds: Sequence[CloudSpec]) -> Sequence[CloudSpec]:
    """``clouds`` with the observed times in place of the configured ones, where the
    cloud asks for it and something was observed."""
    if not state.times:
        return clouds
    shown: list[CloudSpec] = []
    for spec in clouds:
        seen = state.times.get(spec.name)
        if seen is not None and spec.waste_estimate == "observed":
            spec = replace(spec, boot_time=seen.boot, shutdown_time=seen.shutdown)
        shown.append(spec)
    return shown
