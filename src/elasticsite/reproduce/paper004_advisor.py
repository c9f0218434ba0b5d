"""Paper 004, Tables 3.3-3.7: the advisor's bounds on a case study's four phases.

The case study ran one application 100-200 times on three batch resources, each run
staging its input from one repository, waiting in the queue, executing and staging
its output back; each phase was bounded at the 0.95 quantile before the run and the
whole at their product, 0.95 ** 4 = 0.815 (their sum). Here each trial is a run of
that shape whose **queue wait is real**: the wait a job of the configuration's size
had in the RICC trace (default priority), or the wait an urgent trial had when the
trace was replayed on the embedded batch system under next-to-run or preemption
(:mod:`~elasticsite.reproduce.paper004_batch`). **The other phases are synthesised**,
each from a stated law, since no trace records them:

* execution: about two and a half hours, bimodal on the resource with two clock
  speeds (1.5 and 1.7 GHz), unimodal with a few percent of spread elsewhere;
* staging: 1 GB in, 4 GB out, over a link whose bandwidth drifts (a log-normal AR(1)
  process with level shifts); the repository probes it every 10 minutes, so the
  output bound, made before the run, is hours old when the transfer starts.

:func:`case_observations` writes them as the advisor's history would hold them and
:func:`~elasticsite.advisor.evaluate.evaluate` replays it exactly as ``advise
evaluate`` does: each phase predicted from what was known when the trial started.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from elasticsite.advisor.evaluate import OVERALL, Evaluation, Row, evaluate
from elasticsite.history.observations import PROBE, Observation

__all__ = [
    "CASE_STUDIES",
    "PUBLISHED",
    "CaseStudy",
    "Link",
    "case_observations",
    "evaluate_case",
    "phase_figures",
]

EPOCH = 1_272_639_895.0
"""The RICC trace's start (its UnixStartTime): trial times are real dates."""
INPUT_BYTES = 1_000_000_000
OUTPUT_BYTES = 4_000_000_000
PROBE_EVERY = 600.0
PROBE_BYTES = 50_000_000
REPOSITORY = "indiana"
APP = "flash"
PHASES = ("input", "allocation", "execution", "output")


@dataclass(frozen=True, slots=True)
class CaseStudy:
    """One configuration of Table 3.2: a resource, its queue's size class in the RICC
    trace (cores), how its execution time is distributed and how its link behaves."""

    resource: str
    cores: tuple[int, int]
    """The RICC jobs whose waits stand for this resource's queue: cores in [low, high]."""
    nodes: int
    execution: tuple[float, ...]
    """Mean execution times, s: one per mode (two clock speeds: two modes)."""
    spread: float
    """Relative standard deviation of an execution time around its mode."""
    link: Link


@dataclass(frozen=True, slots=True)
class Link:
    """A repository-to-resource link: median bandwidth (bytes/s), the log-scale sd of
    its AR(1) drift, the chance per probe period of a level shift, and each transfer's
    own noise (log-scale sd)."""

    bandwidth: float
    drift: float = 0.25
    shifts: float = 0.01
    noise: float = 0.08


CASE_STUDIES: tuple[CaseStudy, ...] = (
    # 16 nodes: RICC jobs of 9-16 nodes (65-128 cores); two clock speeds.
    CaseStudy("uc-anl", (65, 128), 16, (9_000.0, 7_940.0), 0.01, Link(40e6)),
    # 32 nodes: RICC jobs of 17-64 nodes; one clock speed; Tungsten's link the worst.
    CaseStudy("mercury", (129, 512), 32, (8_100.0,), 0.03, Link(60e6, noise=0.12)),
    CaseStudy("tungsten", (129, 512), 32, (7_200.0,), 0.04, Link(30e6, 0.4, 0.03, 0.2)),
)

PUBLISHED: dict[tuple[str, str], dict[str, tuple[float, float]]] = {
    # (resource, policy) -> phase -> (success %, over-prediction %), Tables 3.3-3.4, 3.6-3.7
    ("uc-anl", "default"): {"input": (100, 7.98), "allocation": (97, 2379.09),
                            "execution": (100, 7.01), "output": (83, 21.89),
                            OVERALL: (97, 64.95)},
    ("mercury", "default"): {"input": (99, 10.19), "allocation": (99, 4468.23),
                             "execution": (93, 3.78), "output": (86, 5.29),
                             OVERALL: (100, 1417.26)},
    ("tungsten", "default"): {"input": (88, 10.57), "allocation": (99, 4811.20),
                              "execution": (96, 13.03), "output": (77, -4.63),
                              OVERALL: (99, 1842.43)},
    ("uc-anl", "next_to_run"): {"input": (100, 8.04), "allocation": (92, 46.37),
                                "execution": (91, 4.54), "output": (92, 41.47),
                                OVERALL: (94, 11.27)},
    ("uc-anl", "preemption"): {"input": (98, 5.72), "allocation": (94, 75.08),
                               "execution": (93, 4.39), "output": (85, 7.39),
                               OVERALL: (95, 6.45)},
}  # fmt: skip
TABLE_3_8 = {"default": (10_833, 17_869), "next_to_run": (11_562, 12_966),
             "preemption": (10_350, 11_019)}  # fmt: skip
"""Table 3.8, UC/ANL: policy -> (average delay, average composite bound), s."""


def _bandwidth(link: Link, start: float, end: float, rng: random.Random) -> list[float]:
    """The link's bandwidth at each probe period from ``start`` to ``end``."""
    level = math.log(link.bandwidth)
    x = 0.0
    out = []
    for _ in range(int((end - start) / PROBE_EVERY) + 2):
        if rng.random() < link.shifts:
            level = math.log(link.bandwidth) + rng.gauss(0.0, 0.5)
        x = 0.9 * x + rng.gauss(0.0, link.drift * math.sqrt(1 - 0.81))
        out.append(math.exp(level + x))
    return out


def case_observations(
    case: CaseStudy,
    waits: Sequence[tuple[float, float]],
    policy: str = "default",
    seed: int = 0,
) -> list[Observation]:
    """One trial per ``(submitted, waited)`` queue wait (seconds from the trace's
    start), each with its four phases, and the repository's probes of the link over
    the whole span; seeded, so the same waits give the same history."""
    rng = random.Random(f"{case.resource}/{policy}/{seed}")
    if not waits:
        return []
    first = min(s for s, _ in waits) - 4 * 3600.0
    last = max(s + w for s, w in waits) + 8 * 3600.0
    bandwidth = _bandwidth(case.link, first, last, rng)

    def bw(t: float) -> float:
        return bandwidth[min(len(bandwidth) - 1, max(0, int((t - first) / PROBE_EVERY)))]

    res = case.resource
    queue_source = "swf" if policy == "default" else "drill"  # the trace / urgent trials
    obs = [
        Observation(phase=PROBE, resource=res, source="probe", at=EPOCH + t,
                    value=(1 / bw(t)) * math.exp(rng.gauss(0, case.link.noise)),
                    repository=REPOSITORY, nbytes=PROBE_BYTES)
        for t in (first + k * PROBE_EVERY for k in range(len(bandwidth)))
    ]  # fmt: skip
    for n, (submitted, waited) in enumerate(sorted(waits)):
        trial = f"{res}-{policy}-{n}"
        staged_in = INPUT_BYTES / bw(submitted) * math.exp(rng.gauss(0, case.link.noise))
        mode = rng.choice(case.execution)
        run = max(60.0, rng.gauss(mode, case.spread * mode))
        out_at = submitted + waited + run
        staged_out = OUTPUT_BYTES / bw(out_at) * math.exp(rng.gauss(0, case.link.noise))
        obs += [
            Observation(phase="input", resource=res, source="csv", policy=policy,
                        nodes=case.nodes, trial=trial, value=staged_in, at=EPOCH + submitted,
                        repository=REPOSITORY, nbytes=INPUT_BYTES),
            Observation(phase="allocation", resource=res, source=queue_source, policy=policy,
                        nodes=case.nodes, trial=trial, value=max(0.0, waited),
                        at=EPOCH + submitted + waited),
            Observation(phase="execution", resource=res, source="csv", policy=policy,
                        nodes=case.nodes, trial=trial, value=run, at=EPOCH + out_at, app=APP),
            Observation(phase="output", resource=res, source="csv", policy=policy,
                        nodes=case.nodes, trial=trial, value=staged_out,
                        at=EPOCH + out_at + staged_out, repository=REPOSITORY,
                        nbytes=OUTPUT_BYTES),
        ]  # fmt: skip
    return obs


def evaluate_case(observations: Sequence[Observation], seed_trials: int) -> Evaluation:
    """The advisor's replay of a case study: 0.95 per phase, the first ``seed_trials``
    of each series only learnt from (the paper seeded its predictors the same way)."""
    return evaluate(observations, quantile=0.95, confidence=0.95, seed=seed_trials)


Figures = tuple[float | None, float | None, float | None, float | None]


def phase_figures(row: Row) -> dict[str, Figures]:
    """Per phase and overall: (success %, over-prediction %, mean delay, mean bound)."""
    out: dict[str, Figures] = {}
    for phase in (*PHASES, OVERALL):
        cell = row.cells.get(phase)
        if cell is None or not cell.predicted:
            out[phase] = (None, None, None, None)
            continue
        ok = cell.correctness
        out[phase] = (
            None if ok is None else 100.0 * ok,
            cell.accuracy,
            cell.observed / cell.predicted,
            cell.bounded / cell.predicted,
        )
    return out
