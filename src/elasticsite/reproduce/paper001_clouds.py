"""Paper 001's clouds and periods, calibrated from its text (``docs/boot-model.md``).

Paper 001 gives its periods but no boot times, so the clouds take paper 000's
calibrations for the same clouds and fit what paper 001's sentences pin down:

* the EPU's sensor reads Torque every 60 s, the decision engine runs every 5 s, a
  pending instance is stalled after 10 minutes, agents poll every 120 s (lines
  472-478 and 319-322 of the paper's text);
* EC2 micro workers boot as paper 000's EC2 VMs did (74-205 s, no contention), and a
  boot fails (never ends) with the probability that makes Figure 3's text most likely:
  no stall in the twelve runs of 2-16 nodes, two of three runs stalled at 32 nodes and
  at 64 (lines 527-541) — :func:`stall_probability`;
* FutureGrid's Hotel and Sierra boot as paper 000's University of Chicago Nimbus cloud
  (94 s alone, ten boots at once, images over one shared link), with dual-core
  workers (lines 457-459, 598-600). Hotel's image transfer is fitted to its first
  test (alone, 128 VMs asked for: over 100 but not 128 up within 30 minutes, lines
  586-591); in Figure 5 each cloud stops at a VM limit, Hotel's being what it has up
  just before 3,000 s, Sierra's the most that keeps the two short of 512 cores, and
  Sierra's transfer is fitted so that it reaches its limit just before 2,000 s
  (lines 610-617).

Pure: the fits replay boots on a boot path (:func:`elasticsite.boottime.replay`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from elasticsite.boottime import PAPER000, BootPath, CloudTimes, replay
from elasticsite.sim.cloud import CloudModel, Durations

__all__ = [
    "DECISION_PERIOD",
    "FIG3_TEXT_RUNS",
    "FIRST_DECISION",
    "RECONTEXT_PERIOD",
    "SENSOR_PERIOD",
    "STALL_TIMEOUT",
    "Calibration",
    "calibrate",
    "ec2_micro",
    "futuregrid",
    "joined_by",
    "stall_probability",
]

SENSOR_PERIOD = 60.0
"""The EPU's sensor reads Torque every 60 s (line 472)."""
DECISION_PERIOD = 5.0
"""The decision engine runs every 5 s (lines 473-475)."""
STALL_TIMEOUT = 600.0
"""Pending instances are replaced after 10 minutes without a change (lines 319-322)."""
RECONTEXT_PERIOD = 120.0
"""Agents poll the broker every 120 s (lines 475-478)."""
FIRST_DECISION = (SENSOR_PERIOD + DECISION_PERIOD) / 2
"""When, on average, the decision engine first acts on jobs submitted at once: the
sensor's next reading, then the next decision (half of each period on average)."""

FIG3_TEXT_RUNS: Mapping[int, tuple[int, int]] = {
    2: (3, 0), 4: (3, 0), 8: (3, 0), 16: (3, 0), 32: (3, 2), 64: (3, 2),
}  # fmt: skip
"""Figure 3 as its text tells it: per cluster size, (runs, runs with a stalled node):
2-16 nodes all alike (no stall), 32 and 64 each one run alike and two much higher
(lines 527-541). The text says nothing of 128 and 256."""

HOTEL_TEST = (128, 1800.0, 100, 128)
"""Hotel alone, 256 single-core jobs on dual-core workers: of 128 VMs asked for, over
100 but not 128 up within 30 minutes (lines 586-591)."""
HOTEL_FILLS = 3000.0
"""Figure 5: Hotel reaches its VM limit just before 3,000 s (lines 615-617)."""
SIERRA_FILLS = 2000.0
"""Figure 5: Sierra reaches its VM limit just before 2,000 s (lines 615-616)."""
FIG5_CORES = 512
"""Figure 5: 512 single-core jobs, and the two clouds cannot provide 512 cores."""
EARLY = 200.0
"""'Just before' a time: within this many seconds before it."""


def stall_probability(runs: Mapping[int, tuple[int, int]] = FIG3_TEXT_RUNS) -> float:
    """The chance ``p`` that one boot fails which makes ``runs`` (size -> runs, runs
    with a stall) most likely: a run of ``n`` nodes has a stall with probability
    ``1 - (1 - p)^n``. Maximised on a grid of 1e-5 by ternary search: the
    log-likelihood is a sum of concave terms (``log(1 - p)`` and ``log`` of the
    concave ``1 - (1 - p)^n``), so it has one peak."""

    def loglik(p: float) -> float:
        q = math.log1p(-p)
        total = 0.0
        for n, (count, stalled) in runs.items():
            total += (count - stalled) * n * q
            if stalled:
                total += stalled * math.log(-math.expm1(n * q))
        return total

    lo, hi = 1, 19_999
    while hi - lo > 2:
        a, b = lo + (hi - lo) // 3, hi - (hi - lo) // 3
        if loglik(a / 1e5) < loglik(b / 1e5):
            lo = a + 1
        else:
            hi = b
    return max(range(lo, hi + 1), key=lambda i: loglik(i / 1e5)) / 1e5


def ec2_micro(boot_failure: float, name: str = "ec2") -> CloudModel:
    """EC2 east micro workers (single core, US$0.02 an hour, line 461): paper 000's EC2
    boots and terminations, no boot contention, no VM limit that binds (line 636)."""
    t = PAPER000["ec2"]
    return CloudModel(
        name,
        vm_limit=100_000,
        boot=Durations.uniform(t.boot - t.boot_jitter, t.boot + t.boot_jitter),
        shutdown=Durations.uniform(t.shutdown - t.shutdown_jitter, t.shutdown + t.shutdown_jitter),
        price_per_hour=0.02,
        boot_failure=boot_failure,
    )


def _nimbus(transfer: float) -> CloudTimes:
    t = PAPER000["uchicago"]
    return CloudTimes(t.boot, t.boot_jitter, t.shutdown, t.shutdown_jitter,
                      BootPath(transfer, t.path.parallel))  # fmt: skip


def futuregrid(name: str, transfer: float, vm_limit: int) -> CloudModel:
    """A FutureGrid Nimbus cloud (Hotel, Sierra): dual-core workers (lines 457-459)
    booting as paper 000's University of Chicago cloud, with its own image transfer."""
    t = _nimbus(transfer)
    return CloudModel(
        name,
        vm_limit=vm_limit,
        boot=Durations.uniform(t.boot - t.boot_jitter, t.boot + t.boot_jitter),
        shutdown=Durations.uniform(t.shutdown - t.shutdown_jitter, t.shutdown + t.shutdown_jitter),
        image_transfer=transfer,
        parallel_boots=t.path.parallel,
        cores_per_vm=2,
        price_per_hour=0.0,
    )


_GOLDEN = (math.sqrt(5) - 1) / 2


def _ends(transfer: float, n: int) -> list[float]:
    """When each of ``n`` FutureGrid VMs asked for together ends its boot (since the
    request). Boots alone spread evenly over 91-97 s (a low-discrepancy sequence, not a
    random draw: the fit is the same every time); the spread matters, since boots that
    end apart stop sharing the link in step."""
    t = _nimbus(transfer)
    rests = (t.boot - transfer + t.boot_jitter * (2 * ((i * _GOLDEN) % 1.0) - 1) for i in range(n))
    return list(replay(((i, 0.0, r, None) for i, r in enumerate(rests)), t.path).values())


def joined_by(transfer: float, n: int, at: float) -> int:
    """Of ``n`` FutureGrid VMs asked for together at :data:`FIRST_DECISION`, how many
    are up ``at`` seconds after the jobs were submitted."""
    return sum(1 for e in _ends(transfer, n) if FIRST_DECISION + e <= at)


def _fill_time(transfer: float, n: int) -> float:
    """When the last of ``n`` VMs asked for together is up (since submission)."""
    return FIRST_DECISION + max(_ends(transfer, n))


_GRID = [i / 10 for i in range(1, 601)]
"""Image transfers tried, 0.1-60 s (a boot alone is 91-97 s)."""


def _first(pred: Callable[[float], bool]) -> int:
    """The first index of :data:`_GRID` where a monotone ``pred`` holds (its length
    when it never does), by bisection."""
    lo, hi = 0, len(_GRID)
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(_GRID[mid]):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _fit(start: Callable[[float], bool], stop: Callable[[float], bool]) -> tuple[float, ...]:
    """The transfers from the first where ``start`` holds to the last before ``stop``
    does (both monotone: slower links only make later boots): their middle and ends."""
    lo, hi = _first(start), _first(stop) - 1
    if lo > hi:
        raise ValueError("no image transfer fits the paper's times")
    return round((_GRID[lo] + _GRID[hi]) / 2, 1), _GRID[lo], _GRID[hi]


@dataclass(frozen=True, slots=True)
class Calibration:
    """Paper 001's fitted numbers (``docs/boot-model.md``)."""

    boot_failure: float
    hotel_transfer: float
    hotel_range: tuple[float, float]
    hotel_limit: int
    sierra_limit: int
    sierra_transfer: float
    sierra_range: tuple[float, float]

    def lines(self) -> list[str]:
        """The calibration in words, for a report."""
        return [
            f"EC2 micro: a boot fails (never ends) with probability {self.boot_failure:.2%}, "
            "the most likely value for Figure 3's text (no stall among twelve runs of "
            "2-16 nodes, two of three runs stalled at 32 and at 64 nodes).",
            f"Hotel: images over one link, {self.hotel_transfer:g} s each alone (the middle "
            f"of {self.hotel_range[0]:g}-{self.hotel_range[1]:g} s, where 128 VMs asked for "
            "at once have over 100 but not 128 up at 30 minutes), ten boots at once, "
            "94 s alone; dual-core workers.",
            f"Figure 5's limits: Hotel {self.hotel_limit} VMs (what it has up "
            f"{EARLY / 2:g} s before 3,000 s), Sierra {self.sierra_limit} (the most that keeps "
            "the two short of "
            f"512 cores); Sierra's transfer {self.sierra_transfer:g} s (the middle of "
            f"{self.sierra_range[0]:g}-{self.sierra_range[1]:g} s, where its "
            f"{self.sierra_limit}th VM is up within {EARLY:g} s before 2,000 s).",
        ]


def calibrate() -> Calibration:
    """Fit paper 001's numbers as the module's text says."""
    n, at, low, high = HOTEL_TEST
    hotel = _fit(lambda t: joined_by(t, n, at) < high, lambda t: joined_by(t, n, at) <= low)
    hotel_limit = joined_by(hotel[0], 1000, HOTEL_FILLS - EARLY / 2)
    sierra_limit = (FIG5_CORES - 1) // 2 - hotel_limit
    sierra = _fit(
        lambda t: _fill_time(t, sierra_limit) > SIERRA_FILLS - EARLY,
        lambda t: _fill_time(t, sierra_limit) > SIERRA_FILLS,
    )
    return Calibration(
        stall_probability(), hotel[0], (hotel[1], hotel[2]), hotel_limit, sierra_limit,
        sierra[0], (sierra[1], sierra[2]),
    )  # fmt: skip
