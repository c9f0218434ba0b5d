"""How long a cloud takes to boot an instance when others boot with it, and paper 000's clouds.

Paper 000 (section IV-A) saw boots slow each other down on its Nimbus clouds: every
VM image was copied from one repository (a GridFTP service) to the nodes over one
network, so five at once took longer than one. Its manager launched through a pool of
threads (10; 6 on EC2), each held by a launch until the VM was up. A cloud's *boot
path* here is those two finite things (:class:`BootPipeline`):

* at most ``parallel`` boots are in progress at once; later ones wait their turn,
  first come first served (``parallel = 0``: no limit);
* a boot in progress first moves its image over the cloud's shared link, whose
  bandwidth the transfers in progress divide equally: alone a transfer takes
  ``transfer`` seconds, with ``m`` of them each goes at ``1/m`` of the speed;
* then it boots on its own for the rest of what a boot alone takes
  (``alone - transfer``, jittered), and frees its place.

So ``n <= parallel`` VMs launched together on an idle cloud all join after
``rest + n x transfer``, and the effect is bounded: a boot in progress has at least
``1/parallel`` of the link, so it ends within ``parallel x transfer + rest`` of taking
its place, and boots launched after it queue behind it. ``n`` boots launched at once
all end within :meth:`BootPath.bound` (``ceil(n / parallel)`` rounds of that).
Nothing here is a constant per boot in flight. How paper 000's figures fix the
numbers is in ``docs/boot-model.md``.

Pure: no clock, no I/O. The simulator's cloud drives a :class:`BootPipeline` on its
virtual clock; the embedded local cloud's workers :func:`replay` the registry's boots.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "CALIBRATION_BOOTS",
    "PAPER000",
    "PAPER000_EC2_LAUNCH_THREADS",
    "BootPath",
    "BootPipeline",
    "CloudTimes",
    "replay",
]

CALIBRATION_BOOTS = 5
"""VMs booted together in paper 000's calibration runs (Figures 5 and 6): the mean
boot of that many is a cloud's boot estimate until its own boots are observed."""

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class BootPath:
    """A cloud's shared boot path: ``transfer`` seconds of image transfer alone over a
    shared link (0: none), at most ``parallel`` boots in progress (0: no limit)."""

    transfer: float = 0.0
    parallel: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.transfer) and self.transfer >= 0):
            raise ValueError(f"image transfer must be >= 0 seconds, got {self.transfer}")
        if self.parallel < 0:
            raise ValueError(f"parallel boots must be >= 0 (0: no limit), got {self.parallel}")

    @property
    def shared(self) -> bool:
        """Whether boots on this path affect each other at all."""
        return self.transfer > 0 or self.parallel > 0

    def bound(self, n: int, longest_alone: float) -> float:
        """The longest ``n`` boots launched together on an idle path can take, each
        taking at most ``longest_alone`` seconds alone: ``ceil(n / parallel)`` rounds of
        ``min(n, parallel) x transfer + (longest_alone - transfer)``."""
        if n <= 0:
            return 0.0
        rest = max(0.0, longest_alone - self.transfer)
        at_once = n if self.parallel == 0 else min(n, self.parallel)
        rounds = -(-n // at_once)
        return rounds * (at_once * self.transfer + rest)

    def describe(self) -> str:
        """``images over a shared link (35 s each alone), 10 boots at once``."""
        parts = []
        if self.transfer:
            parts.append(f"images over a shared link ({self.transfer:g} s each alone)")
        if self.parallel:
            parts.append(f"{self.parallel} boot{'s' if self.parallel > 1 else ''} at once")
        return ", ".join(parts) if parts else "no boot contention"


class BootPipeline(Generic[K]):
    """The boots of one cloud on its :class:`BootPath`, on a clock the caller moves.

    :meth:`add` a boot when it is requested (with what it takes after its image
    transfer), :meth:`remove` one that is cancelled; :meth:`due` says when the next
    change happens and :meth:`advance` moves the clock, returning each boot that ended
    with the time it did, in order. Times never go backwards.
    """

    __slots__ = ("_clock", "_moving", "_queue", "_rest", "_resting", "path")

    def __init__(self, path: BootPath) -> None:
        self.path = path
        self._clock = -math.inf
        self._queue: deque[tuple[K, float]] = deque()
        """Boots waiting for a place, with their rest, in request order."""
        self._moving: dict[K, float] = {}
        """Boots moving their image: link work left, in seconds at the full speed."""
        self._rest: dict[K, float] = {}
        """The rest of each moving boot, to start when its transfer ends."""
        self._resting: dict[K, float] = {}
        """Boots past their transfer: when each ends."""

    def __len__(self) -> int:
        return len(self._queue) + len(self._moving) + len(self._resting)

    def __contains__(self, key: object) -> bool:
        return key in self._moving or key in self._resting or any(k == key for k, _ in self._queue)

    @property
    def waiting(self) -> int:
        """Boots waiting for a place."""
        return len(self._queue)

    def add(self, key: K, now: float, rest: float) -> list[tuple[K, float]]:
        """A boot requested at ``now`` that takes ``rest`` seconds after its transfer;
        returns the boots that ended up to ``now`` (as :meth:`advance`)."""
        ended = self.advance(now)
        self._queue.append((key, max(0.0, rest)))
        self._admit(now)
        return ended

    def remove(self, key: K, now: float) -> list[tuple[K, float]]:
        """A boot cancelled at ``now`` (unknown or ended: nothing happens); returns the
        boots that ended up to ``now``."""
        ended = self.advance(now)
        if self._moving.pop(key, None) is not None:
            del self._rest[key]
        elif self._resting.pop(key, None) is None:
            for i, (k, _) in enumerate(self._queue):
                if k == key:
                    del self._queue[i]
                    break
        self._admit(now)
        return ended

    def due(self) -> float:
        """When the next transfer or boot ends (infinity when none is in progress)."""
        t = math.inf
        if self._moving:
            t = self._clock + min(self._moving.values()) * len(self._moving)
        if self._resting:
            t = min(t, min(self._resting.values()))
        return t

    def advance(self, now: float) -> list[tuple[K, float]]:
        """Move the clock to ``now``: every boot that ended by then, with its end, in order."""
        ended: list[tuple[K, float]] = []
        while True:
            least = min(self._moving.values()) if self._moving else math.inf
            moved = self._clock + least * len(self._moving) if self._moving else math.inf
            rested = min(self._resting.values()) if self._resting else math.inf
            t = min(moved, rested)
            if t > now or t == math.inf:
                break
            done = [k for k, w in self._moving.items() if w <= least] if moved <= t else []
            self._flow(t)
            for k in done:  # the transfers closest to done end together (equal shares)
                del self._moving[k]
                self._resting[k] = t + self._rest.pop(k)
            over = sorted((e, i, k) for i, (k, e) in enumerate(self._resting.items()) if e <= t)
            for e, _, k in over:
                del self._resting[k]
                ended.append((k, e))
            self._admit(t)
        if now < math.inf:
            self._flow(now)
        return ended

    def _flow(self, t: float) -> None:
        """The link carries the moving transfers, equally, up to ``t``."""
        if self._moving and t > self._clock:
            share = (t - self._clock) / len(self._moving)
            for k in self._moving:
                self._moving[k] = max(0.0, self._moving[k] - share)
        self._clock = max(self._clock, t)

    def _admit(self, t: float) -> None:
        """Waiting boots take the free places, first come first served."""
        limit = self.path.parallel
        while self._queue and (not limit or len(self._moving) + len(self._resting) < limit):
            key, rest = self._queue.popleft()
            if self.path.transfer > 0:
                self._flow(t)
                self._moving[key] = self.path.transfer
                self._rest[key] = rest
            else:
                self._resting[key] = t + rest


def replay(boots: Iterable[tuple[K, float, float, float | None]], path: BootPath) -> dict[K, float]:
    """When each boot ends on ``path``, from ``(key, requested_at, rest, cancelled_at)``
    in request order (``cancelled_at`` None: never cancelled). A cancelled boot that
    had not ended is left out."""
    pipeline: BootPipeline[K] = BootPipeline(path)
    events: list[tuple[float, int, int, K, float]] = []
    for i, (key, at, rest, cancelled) in enumerate(boots):
        events.append((at, i, 0, key, rest))
        if cancelled is not None:
            events.append((max(at, cancelled), i, 1, key, 0.0))
    events.sort(key=lambda e: (e[0], e[2], e[1]))
    ends: dict[K, float] = {}
    for at, _, kind, key, rest in events:
        step = pipeline.add(key, at, rest) if kind == 0 else pipeline.remove(key, at)
        ends.update(step)
    ends.update(pipeline.advance(math.inf))
    return ends


@dataclass(frozen=True, slots=True)
class CloudTimes:
    """One cloud's boot and termination times, in seconds: a boot alone takes
    ``boot ± boot_jitter`` (uniform), image transfer included, on the boot path
    ``path``; a termination takes ``shutdown ± shutdown_jitter``."""

    boot: float
    boot_jitter: float
    shutdown: float
    shutdown_jitter: float
    path: BootPath = BootPath()

    def __post_init__(self) -> None:
        for label, v in (
            ("boot", self.boot),
            ("boot_jitter", self.boot_jitter),
            ("shutdown", self.shutdown),
            ("shutdown_jitter", self.shutdown_jitter),
        ):
            if not v >= 0:
                raise ValueError(f"{label} must be >= 0 seconds, got {v}")
        if self.boot_jitter > self.boot or self.shutdown_jitter > self.shutdown:
            raise ValueError("a jitter must not exceed its mean (times stay >= 0)")
        if self.path.transfer > self.boot - self.boot_jitter:
            raise ValueError("an image transfer must not exceed the shortest boot alone")

    def mean_boot(self, at_once: int) -> float:
        """The mean boot time of ``at_once`` instances launched together on an idle cloud
        (each at the mean boot alone)."""
        if at_once <= 0:
            return 0.0
        rest = self.boot - self.path.transfer
        ends = replay(((i, 0.0, rest, None) for i in range(at_once)), self.path)
        return sum(ends.values()) / at_once


PAPER000_EC2_LAUNCH_THREADS = 6
"""Paper 000's manager launched on EC2 through six threads, each held by a launch until
its VM was up (IV-D): the scalability run's ``parallel`` boots."""

PAPER000: dict[str, CloudTimes] = {
    "uchicago": CloudTimes(boot=94.0, boot_jitter=3.0, shutdown=6.0, shutdown_jitter=1.0,
                           path=BootPath(transfer=35.0, parallel=10)),
    "iu": CloudTimes(boot=60.0, boot_jitter=10.0, shutdown=6.0, shutdown_jitter=1.0,
                     path=BootPath(transfer=48.0, parallel=10)),
    "ec2": CloudTimes(boot=139.5, boot_jitter=65.5, shutdown=3.5, shutdown_jitter=0.5),
}  # fmt: skip
"""Paper 000's three clouds, calibrated as ``docs/boot-model.md`` explains: the Nimbus
clouds at the University of Chicago (where workloads 1 and 2 ran) and at Indiana
University, each with one repository link and the manager's ten launch threads, and
Amazon EC2 small instances (no contention seen among a handful, none modelled)."""
