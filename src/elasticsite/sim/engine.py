"""The simulator's clock: a binary heap of ``(time, seq, handler, arg)`` tuples.

Time moves only in :meth:`Simulation.run`, from one event to the next. Events at
the same instant run in the order they were scheduled (``seq`` breaks ties), so
a run is deterministic: the same inputs and seed give byte-identical results.
Events are plain tuples and handlers plain callables, inlined for speed; there is
no per-event object and no generator.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

__all__ = ["Handler", "Simulation"]

Handler = Callable[[Any], None]
"""Called with the event's argument when its time comes; reads the clock from the
simulation it was scheduled on."""


class Simulation:
    """A virtual clock and its event queue."""

    __slots__ = ("_heap", "_seq", "events", "now")

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self.events = 0
        self._heap: list[tuple[float, int, Handler, Any]] = []
        self._seq = 0

    def at(self, time: float, handler: Handler, arg: Any = None) -> None:
        """Run ``handler(arg)`` at ``time`` (never in the past)."""
        if time < self.now:
            raise ValueError(f"cannot schedule at {time}: the clock is already at {self.now}")
        self._seq += 1
        heapq.heappush(self._heap, (time, self._seq, handler, arg))

    def after(self, delay: float, handler: Handler, arg: Any = None) -> None:
        """Run ``handler(arg)`` ``delay`` seconds from now."""
        self.at(self.now + delay, handler, arg)

    def peek(self) -> float:
        """Time of the next event (infinity when none is left)."""
        return self._heap[0][0] if self._heap else math.inf

    def __len__(self) -> int:
        return len(self._heap)

    def run(
        self,
        until: float = math.inf,
        progress: Callable[[float], None] | None = None,
        every: int = 65536,
    ) -> None:
        """Process events in time order until none is left or the next is after ``until``.

        ``progress(now)`` is called every ``every`` events, for progress bars.
        """
        heap = self._heap
        pop = heapq.heappop
        n = 0
        while heap and heap[0][0] <= until:
            time, _, handler, arg = pop(heap)
            self.now = time
            handler(arg)
            n += 1
            if progress is not None and n % every == 0:
                progress(time)
        self.events += n
        if until != math.inf and until > self.now:
            self.now = until
