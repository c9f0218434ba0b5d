"""Running a step's commands on the manager's thread pool and handing their outcomes
back at a later step.

The loop hands over a step's commands once the step is persisted. They go to the
pool as the :class:`~elasticsite.core.runner.CommandRunner` groups them: every
command on its own, but a step's terminations on one cloud together, in calls of as
many ids as the driver takes (so ``elasticsite down`` of 1,000 EC2 workers is one
``terminate_instances`` call, not 1,000). Each command keeps its own outcome.

A node's departure for the broker (``ForgetNode``) is kept in the state store by the
broker link before it is sent, and sent again at later steps until the broker has it.

It also says which clouds are busy (:meth:`Dispatch.busy`): a backlog of launches, or
terminations still running; the sensor does not list those for a while, since their
answers will tell what the listing would, and the listing would only slow them down.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING

from elasticsite.core import (
    AddAndLaunch,
    Command,
    CoreState,
    ForgetNode,
    Outcome,
    Plan,
    TerminateInstance,
    command_key,
)
from elasticsite.core.runner import CommandRunner

if TYPE_CHECKING:
    from elasticsite.manager.context_link import ContextLink

__all__ = ["Dispatch"]

log = logging.getLogger("elasticsite.manager.loop")


class Dispatch:
    """The pool, the runner and the groups of commands still running."""

    def __init__(
        self, pool: Executor, runner: CommandRunner, context: ContextLink | None = None
    ) -> None:
        self.pool = pool
        self.runner = runner
        self.context = context
        self._futures: list[Future[list[Outcome]]] = []
        self._running: dict[str, list[int]] = {}
        """Per cloud: its groups on the pool, and how many of them are terminations."""
        self._lock = threading.Lock()

    def submit(self, commands: Sequence[Command], state: CoreState) -> None:
        """Start ``commands`` on the pool, grouped as the runner says."""
        ready = [c for c in (self._prepare(c, state) for c in commands) if c is not None]
        for group in self.runner.batches(ready):
            first = group[0]
            cloud = first.cloud if isinstance(first, AddAndLaunch | TerminateInstance) else ""
            ending = int(isinstance(first, TerminateInstance))
            if cloud:
                with self._lock:
                    counts = self._running.setdefault(cloud, [0, 0])
                    counts[0] += 1
                    counts[1] += ending
            future = self.pool.submit(self.runner.run_all, group)
            if cloud:
                future.add_done_callback(functools.partial(self._ran, cloud, ending))
            self._futures.append(future)

    def _ran(self, cloud: str, ending: int, _: object = None) -> None:
        with self._lock:
            counts = self._running[cloud]
            counts[0] -= 1
            counts[1] -= ending

    def busy(self, threads: int) -> set[str]:
        """Clouds with more launches waiting than the pool has ``threads``, or with
        terminations still running."""
        with self._lock:
            return {
                c for c, (groups, ending) in self._running.items() if groups > threads or ending
            }

    def _prepare(self, command: Command, state: CoreState) -> Command | None:
        """``command`` as the pool runs it (a departure once the broker link keeps it)."""
        if not isinstance(command, ForgetNode):
            return command
        state.inflight.discard(command_key(command))
        if self.context is None:
            return None
        # Kept in the store until the broker has it: a restart sends it again.
        command = ForgetNode(self.context.remember(command.node))
        state.inflight.add(command_key(command))
        return command

    def resend_departures(self, plan: Plan, state: CoreState) -> None:
        """Departures the broker could not take earlier, sent again (one at a time each)."""
        if self.context is not None:
            for host in self.context.pending():
                plan.run(ForgetNode(host), state)

    def finished(self) -> list[Outcome]:
        """The outcomes of the groups that finished, in the order they were started."""
        done: list[Future[list[Outcome]]] = []
        running: list[Future[list[Outcome]]] = []
        for f in self._futures:  # one look each: a group finishing meanwhile waits
            (done if f.done() else running).append(f)
        self._futures = running
        outcomes = [out for f in done for out in f.result()]
        for out in outcomes:
            if isinstance(out.command, ForgetNode) and self.context is not None:
                if out.error is None:
                    self.context.done(out.command.node)
                else:
                    log.warning("broker: removing %s failed (will retry): %s",
                                out.command.node, out.error)  # fmt: skip
        return outcomes

    def close(self) -> None:
        """Wait for every command still running."""
        self.pool.shutdown(wait=True)
