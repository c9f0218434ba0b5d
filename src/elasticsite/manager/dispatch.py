"""Running a step's commands on the manager's thread pool and handing their outcomes
back at a later step.

The loop hands over a step's commands once the step is persisted. They go to the
pool as the :class:`~elasticsite.core.runner.CommandRunner` groups them: every
command on its own, but a step's terminations on one cloud together, in calls of as
many ids as the driver takes (so ``elasticsite down`` of 1,000 EC2 workers is one
``terminate_instances`` call, not 1,000). Each command keeps its own outcome. What
an outcome means (a retry, a departure the broker has recorded) is the core's to say
when it settles it; here a command is only grouped, run, and counted against
its cloud.

It also says which clouds are busy (:meth:`Dispatch.busy`): a backlog of launches, or
terminations still running; the sensor does not list those for a while, since their
answers will tell what the listing would, and the listing would only slow them down.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from concurrent.futures import Executor, Future

from elasticsite.core import AddAndLaunch, Command, Outcome, TerminateInstance
from elasticsite.core.runner import CommandRunner

__all__ = ["Dispatch"]


class Dispatch:
    """The pool, the runner and the groups of commands still running."""

    def __init__(self, pool: Executor, runner: CommandRunner) -> None:
        self.pool = pool
        self.runner = runner
        self._futures: list[Future[list[Outcome]]] = []
        self._running: dict[str, list[int]] = {}
        """Per cloud: its groups on the pool, and how many of them are terminations."""
        self._lock = threading.Lock()

    def submit(self, commands: Sequence[Command]) -> None:
        """Start ``commands`` on the pool, grouped as the runner says."""
        for group in self.runner.batches(commands):
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

    def finished(self) -> list[Outcome]:
        """The outcomes of the groups that finished, in the order they were started."""
        done: list[Future[list[Outcome]]] = []
        running: list[Future[list[Outcome]]] = []
        for f in self._futures:  # one look each: a group finishing meanwhile waits
            (done if f.done() else running).append(f)
        self._futures = running
        return [out for f in done for out in f.result()]

    def close(self) -> None:
        """Wait for every command still running."""
        self.pool.shutdown(wait=True)
