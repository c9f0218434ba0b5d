"""How long a cloud takes to boot an instance when others boot with it, and paper 000's clouds.

Paper 000 (section IV-A) saw boots slow down when several VMs of one cloud boot at
once: their images cross the same network from the same storage, so each boot in
flight slows every other. A boot here takes

    base + jitter + slowdown x (other boots of the cloud in flight with it)

counting both the boots already under way when it starts and those started before it
ends: five VMs launched together all take ``base + 4 x slowdown``, and a VM launched
alone takes ``base`` unless others follow while it boots. The simulator's cloud and
the embedded local cloud both draw their boot times this way (:func:`contended` gives
the part known at launch); how the defaults below were derived from the paper is in
``docs/boot-model.md``.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CALIBRATION_BOOTS", "PAPER000", "CloudTimes", "contended"]

CALIBRATION_BOOTS = 5
"""VMs booted together in paper 000's calibration runs (Figures 5 and 6): the mean
boot of that many is a cloud's boot estimate until its own boots are observed."""


def contended(alone: float, slowdown: float, booting: int) -> float:
    """A boot that would take ``alone`` seconds on an idle cloud, started while
    ``booting`` other instances of that cloud are still booting."""
    if slowdown < 0 or booting < 0:
        raise ValueError(f"slowdown and booting must be >= 0, got {slowdown}, {booting}")
    return max(0.0, alone) + slowdown * booting


@dataclass(frozen=True, slots=True)
class CloudTimes:
    """One cloud's boot and termination times, in seconds: a boot alone takes
    ``boot ± boot_jitter`` (uniform), each other boot in flight adds ``slowdown``;
    a termination takes ``shutdown ± shutdown_jitter``."""

    boot: float
    boot_jitter: float
    slowdown: float
    shutdown: float
    shutdown_jitter: float

    def __post_init__(self) -> None:
        for label, v in (
            ("boot", self.boot),
            ("boot_jitter", self.boot_jitter),
            ("slowdown", self.slowdown),
            ("shutdown", self.shutdown),
            ("shutdown_jitter", self.shutdown_jitter),
        ):
            if not v >= 0:
                raise ValueError(f"{label} must be >= 0 seconds, got {v}")
        if self.boot_jitter > self.boot or self.shutdown_jitter > self.shutdown:
            raise ValueError("a jitter must not exceed its mean (times stay >= 0)")

    def mean_boot(self, at_once: int) -> float:
        """The mean boot time of ``at_once`` instances launched together (and alone)."""
        return self.boot + self.slowdown * (at_once - 1) if at_once > 0 else 0.0


PAPER000: dict[str, CloudTimes] = {
    "uchicago": CloudTimes(boot=94.0, boot_jitter=3.0, slowdown=35.0, shutdown=6.0,
                           shutdown_jitter=1.0),
    "iu": CloudTimes(boot=60.0, boot_jitter=10.0, slowdown=48.0, shutdown=6.0,
                     shutdown_jitter=1.0),
    "ec2": CloudTimes(boot=139.5, boot_jitter=65.5, slowdown=0.0, shutdown=3.5,
                      shutdown_jitter=0.5),
}  # fmt: skip
"""Paper 000's three clouds, calibrated as ``docs/boot-model.md`` explains: the Nimbus
clouds at the University of Chicago (where workloads 1 and 2 ran) and at Indiana
University, and Amazon EC2 small instances (no contention seen among a handful)."""
