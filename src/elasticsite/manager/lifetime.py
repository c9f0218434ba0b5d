"""A manager's life around its steps: run one every interval until stopped, then leave
its workers for the next start or wind the site down, and close.

:class:`Lifetime` is the base of :class:`~elasticsite.manager.loop.Manager`, which
gives it the step itself (:meth:`Lifetime.step`) and the closing of what the steps
use (:meth:`Lifetime._close`). A step that raises never ends the loop: the workers'
records are reloaded from the state store, the source of truth, and the next step
goes on from there.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING

from elasticsite.config import ManagerConfig
from elasticsite.core import CoreState
from elasticsite.manager.report import StepReport
from elasticsite.manager.store import StateStore

if TYPE_CHECKING:
    from elasticsite.manager.exporter import ManagerMetrics

__all__ = ["Lifetime", "OnStep"]

log = logging.getLogger("elasticsite.manager.loop")

OnStep = Callable[[StepReport], None] | None
"""Called with the report of each step that completed (the CLI's progress), or None."""


class Lifetime(ABC):
    """Runs a manager's steps until it is stopped, and winds its site down."""

    config: ManagerConfig
    store: StateStore
    state: CoreState
    metrics: ManagerMetrics | None
    observers: list[Callable[[StepReport], None]]
    _stop: threading.Event
    """Set by :meth:`stop`: the loop ends after the current step."""
    _abort: threading.Event
    """Set by a second :meth:`stop`: a wind-down ends after the current step."""
    _sensing: bool

    # -- what the manager gives ---------------------------------------------

    @abstractmethod
    def step(self) -> StepReport:
        """One full iteration."""

    @abstractmethod
    def _close(self) -> None:
        """Settle what the last commands did, persist it and close what the steps use."""

    @abstractmethod
    def _bump(self, name: str, by: int = 1) -> None:
        """Count ``by`` more of the manager's counter ``name``."""

    # -- the loop ------------------------------------------------------------

    def run(self, on_step: OnStep = None) -> None:
        """Iterate until :meth:`stop`, then shut down as configured."""
        while not self._stop.is_set():
            started = self._step_once(on_step)
            self._stop.wait(self._rest(started))
        self.shutdown(on_step)

    def stop(self) -> None:
        """Stop after the current iteration; called again, cut a draining shutdown short."""
        if self._stop.is_set():
            self._abort.set()
        self._stop.set()

    def _guarded_step(self) -> StepReport | None:
        """One iteration that cannot kill the loop: on an unexpected error the in-memory
        view is rebuilt from the state store, which is the source of truth."""
        try:
            report = self.step()
        except Exception:
            log.exception("iteration failed; reloading state from %s", self.store.path)
            self._bump("loop_errors")
            try:
                self.state.records = {r.worker.id: r for r in self.store.load()}
            except Exception:
                log.exception("cannot reload state; will retry next iteration")
            return None
        watching = [self.metrics.observe] if self.metrics is not None else []
        for observe in [*watching, *self.observers]:
            try:
                observe(report)
            except Exception:  # what watches the loop must never break it
                log.exception("step observer %r failed", observe)
        return report

    def shutdown(self, on_step: OnStep = None) -> None:
        """Leave workers for the next start to adopt, or drain and terminate them all."""
        if self.config.on_shutdown == "drain":
            left = self._wind_down(time.monotonic() + self.config.shutdown_timeout, on_step)
            if left:
                log.warning(
                    "stopped with %d workers still up (%s); the next start adopts them",
                    left,
                    "cut short" if self._abort.is_set() else "shutdown timed out",
                )
        self._close()

    def take_down(
        self,
        timeout: float,
        *,
        immediate: bool = False,
        on_step: OnStep = None,
    ) -> int:
        """Drain every worker the site owns and terminate it, or with ``immediate``
        terminate them at once (their jobs go back to the queue); wait until none is
        left, ``timeout`` seconds pass or :meth:`stop` is called; close. Returns how
        many workers are left."""
        self.state.shutdown_now = immediate
        left = self._wind_down(time.monotonic() + timeout, on_step)
        self._close()
        return left

    def _wind_down(self, deadline: float, on_step: OnStep) -> int:
        self.state.shutting_down = True
        self._sensing = False
        self._stop.set()  # a later stop() cuts the wind-down short
        while self.state.records and time.monotonic() < deadline and not self._abort.is_set():
            started = self._step_once(on_step)
            if not self.state.records:
                break
            self._abort.wait(self._rest(started))
        return len(self.state.records)

    def _step_once(self, on_step: OnStep) -> float:
        """One guarded step, its report handed to ``on_step``; when it started."""
        started = time.monotonic()
        report = self._guarded_step()
        if on_step is not None and report is not None:
            on_step(report)
        return started

    def _rest(self, started: float) -> float:
        """Seconds left of the interval of a step begun at ``started`` (monotonic)."""
        return max(0.0, self.config.interval - (time.monotonic() - started))
