"""What a running simulation shows of itself, and when it is stopped as exploded.

:class:`RunStatus` is the view a progress display gets (simulated time, jobs done,
workers). :class:`RunLimits` are the guards an elastic run is held to, stated from
its workload and clouds, so a setting that makes the simulated site run away (boots
that outlast the stall timeout and are relaunched forever, a cloud that never boots
the VMs asked for) stops in one line instead of running for hours:

* **time**: the simulated clock passes ``TIME_FACTOR`` (100) times the workload's
  nominal length — its span (first to last submission) plus its longest walltime,
  the longest boot alone and the longest shutdown — and also the time the whole
  workload would take run one job after another, each on a fresh VM (its walltime,
  a boot, a shutdown and two decisions per job), whichever is later;
* **workers**: more than ``WASTE_FACTOR`` (10) times the clouds' VM limits, plus one
  per job, were launched and ended without ever joining.

A sane run stays far inside both: a site that is merely slow still finishes its
jobs one after another, and workers end unjoined only when cancelled or stalled.
Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from elasticsite.sim.cloud import CloudModel

__all__ = ["TIME_FACTOR", "WASTE_FACTOR", "RunLimits", "RunStatus", "SimulationExploded"]

TIME_FACTOR = 100
"""Times the workload's nominal length past which a run is stopped."""
WASTE_FACTOR = 10
"""Times the clouds' VM limits (plus one per job) of never-joined workers past which a
run is stopped."""


@dataclass(frozen=True, slots=True)
class RunStatus:
    """A running simulation, for a progress display; times in simulated seconds since
    the first submission."""

    elapsed: float
    jobs_done: int
    jobs_total: int
    workers: int
    """Workers requested, booting or joined now."""
    booting: int
    launched: int
    """Workers launched since the start."""

    def line(self) -> str:
        """``simulated 1:02:03, jobs 120/1,150 done, 45 workers (12 booting), 300 launched``."""
        return (
            f"simulated {clock(self.elapsed)}, jobs {self.jobs_done:,}/{self.jobs_total:,} "
            f"done, {self.workers:,} worker{'' if self.workers == 1 else 's'} "
            f"({self.booting:,} booting), "
            f"{self.launched:,} launched"
        )


class SimulationExploded(RuntimeError):
    """A simulation passed one of its :class:`RunLimits`; the message is one line naming
    the setting that most likely caused it."""


def clock(seconds: float) -> str:
    """``1:02:03`` (or ``3d 1:02:03``)."""
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    text = f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
    return f"{days}d {text}" if days else text


@dataclass(frozen=True, slots=True)
class RunLimits:
    """The guards of one run: ``until`` simulated seconds after the first submission,
    ``wasted`` workers ended without joining (see the module's text)."""

    until: float
    wasted: int
    nominal: float
    """The workload's nominal length: span + longest walltime, boot and shutdown."""

    @classmethod
    def of(
        cls,
        arrivals: Sequence[tuple[float, int, float, float]],
        clouds: Sequence[CloudModel],
        interval: float,
    ) -> RunLimits:
        times = [a[0] for a in arrivals] or [0.0]
        walltimes = [a[3] for a in arrivals] or [0.0]
        boot = max(c.boot.high for c in clouds)
        shutdown = max(c.shutdown.high for c in clouds)
        nominal = max(times) - min(times) + max(walltimes) + boot + shutdown
        serial = sum(walltimes) + len(walltimes) * (boot + shutdown + 2 * interval)
        until = max(TIME_FACTOR * nominal, serial)
        wasted = WASTE_FACTOR * sum(c.vm_limit for c in clouds) + len(arrivals)
        return cls(until, wasted, nominal)


def cause(clouds: Sequence[CloudModel], stall_timeout: float) -> str | None:
    """The cloud setting most likely behind a run that exploded, in a few words (None:
    no cloud's boots outlast the stall timeout)."""
    for c in clouds:
        many = c.vm_limit
        bound = c.boot_bound(many)
        if c.path.shared and bound > stall_timeout:
            return (
                f"cloud {c.name!r} boots its {many:,} VMs at once in up to {bound:,.0f} s "
                f"over its shared boot path (image_transfer {c.image_transfer:g} s, "
                f"parallel_boots {c.parallel_boots}), longer than stall_timeout "
                f"({stall_timeout:g} s): lower its VM limit or its contention"
            )
        if c.boot.high > stall_timeout:
            return (
                f"cloud {c.name!r} boots in up to {c.boot.high:g} s, longer than "
                f"stall_timeout ({stall_timeout:g} s)"
            )
    return None


def exploded_time(
    status: RunStatus, limits: RunLimits, clouds: Sequence[CloudModel], stall_timeout: float
) -> SimulationExploded:
    return SimulationExploded(
        f"stopped at {clock(status.elapsed)} simulated, past {TIME_FACTOR}x the workload's "
        f"nominal {clock(limits.nominal)} (and past running it one job at a time), with "
        f"{status.jobs_done:,} of {status.jobs_total:,} jobs done: "
        + (cause(clouds, stall_timeout) or "the policy does not finish the workload on "
           "these clouds (their VM limits, boot times and the policy's settings)")
    )  # fmt: skip


def exploded_workers(
    status: RunStatus,
    wasted: int,
    limits: RunLimits,
    clouds: Sequence[CloudModel],
    stall_timeout: float,
) -> SimulationExploded:
    return SimulationExploded(
        f"stopped at {clock(status.elapsed)} simulated: {wasted:,} workers ended without "
        f"joining (limit {limits.wasted:,}), {status.jobs_done:,} of {status.jobs_total:,} "
        "jobs done: "
        + (cause(clouds, stall_timeout) or "the policy keeps launching workers that never "
           f"join (stall_timeout {stall_timeout:g} s)")
    )  # fmt: skip
