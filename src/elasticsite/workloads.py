"""Paper 000's workloads as named built-ins: who submits what, when.

Times are in seconds from the start of the run, uncompressed. Paper 000 gives run
times but not requested walltimes except for workload 1 (120 s for 60 s jobs);
every other job here requests twice its run time, rounded up to a whole minute.
Randomised workloads are seeded, so a name and a seed always give the same jobs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["WORKLOADS", "Arrival", "get_workload", "workload_names"]


@dataclass(frozen=True, slots=True)
class Arrival:
    """One job of a workload: submitted at ``at``, runs ``runtime``, requests ``walltime``."""

    at: float
    runtime: float
    walltime: float
    cores: int = 1


def _wall(runtime: float) -> float:
    return 60.0 * math.ceil(2 * runtime / 60.0)


def workload1(rng: random.Random) -> list[Arrival]:
    """20 jobs of 60 s submitted at once (walltime 120 s): the bursts case."""
    return [Arrival(0.0, 60.0, 120.0) for _ in range(20)]


def workload2(rng: random.Random) -> list[Arrival]:
    """10 jobs of 60 s, 30 s apart; 5 minutes of nothing; 10 jobs of 120 s, 10 s apart."""
    first = [Arrival(30.0 * i, 60.0, _wall(60.0)) for i in range(10)]
    start = 30.0 * 9 + 300.0
    second = [Arrival(start + 10.0 * i, 120.0, _wall(120.0)) for i in range(10)]
    return first + second


def reactivity1(rng: random.Random) -> list[Arrival]:
    """Sporadic: 10 jobs of 1-10 minutes at random times over an hour."""
    out = []
    for _ in range(10):
        rt = rng.uniform(60.0, 600.0)
        out.append(Arrival(rng.uniform(0.0, 3600.0), rt, _wall(rt)))
    return sorted(out, key=lambda a: a.at)


def reactivity2(rng: random.Random) -> list[Arrival]:
    """Steady: 1-10 minute jobs every 3 minutes for 15 minutes, two more in the next 15,
    then one-minute jobs every minute for 30 minutes."""
    out = []
    for i in range(5):
        rt = rng.uniform(60.0, 600.0)
        out.append(Arrival(180.0 * i, rt, _wall(rt)))
    for at in sorted(rng.uniform(900.0, 1800.0) for _ in range(2)):
        rt = rng.uniform(60.0, 600.0)
        out.append(Arrival(at, rt, _wall(rt)))
    out.extend(Arrival(1800.0 + 60.0 * i, 60.0, _wall(60.0)) for i in range(30))
    return out


def _bursts(rng: random.Random, factor: int) -> list[Arrival]:
    out = []
    for _ in range(40 * factor):
        rt = rng.uniform(60.0, 300.0)
        out.append(Arrival(0.0, rt, _wall(rt)))
    out.extend(Arrival(1200.0, 600.0, _wall(600.0)) for _ in range(15 * factor))
    out.extend(Arrival(2400.0, 60.0, _wall(60.0)) for _ in range(60 * factor))
    return out


def reactivity3(rng: random.Random) -> list[Arrival]:
    """Bursts: 40 jobs of 1-5 minutes; 20 minutes later 15 of 10 minutes; 20 minutes
    later 60 of one minute."""
    return _bursts(rng, 1)


def scalability(rng: random.Random) -> list[Arrival]:
    """The third reactivity test with ten times the jobs (400, 150, 600)."""
    return _bursts(rng, 10)


WORKLOADS: dict[str, Callable[[random.Random], list[Arrival]]] = {
    "workload1": workload1,
    "workload2": workload2,
    "reactivity1": reactivity1,
    "reactivity2": reactivity2,
    "reactivity3": reactivity3,
    "scalability": scalability,
}


def workload_names() -> list[str]:
    return list(WORKLOADS)


def get_workload(name: str, seed: int = 0) -> list[Arrival]:
    """The jobs of built-in workload ``name``, in submission order."""
    try:
        make = WORKLOADS[name]
    except KeyError:
        raise ValueError(
            f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}"
        ) from None
    return sorted(make(random.Random(seed)), key=lambda a: a.at)
