"""A replay's jobs: those one round reads, and the per-job CSV of what the replay did.

A replay spec's workload is either the Lublin99 model, generated afresh for each round
from that round's seed and cut at ``duration_days``, or an SWF trace split into
consecutive ``interval_days`` pieces, one per round. Either way a round's jobs come as
plain arrays in allocation units (:class:`Jobs`): an SWF trace that counts CPUs is
brought to nodes with ``procs_per_unit``. A trace is read once per process and kept.
:func:`write_replay_jobs_csv` writes one row per job of a finished replay, in the cells
of the results CSVs (``elasticsite simulate --strategy``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from elasticsite.sim.replay import ReplayResult
from elasticsite.sim.runner import cell
from elasticsite.sim.specs import LublinSource, ReplaySpec, SpecError, SWFSource
from elasticsite.traces.lublin import LublinParams, WalltimeModel, generate

__all__ = [
    "DAY",
    "Jobs",
    "check_rounds",
    "lublin_jobs",
    "swf_intervals",
    "swf_jobs",
    "swf_round",
    "write_replay_jobs_csv",
]

DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Jobs:
    """Jobs of one round as the replay reads them (seconds, allocation units)."""

    submit: np.ndarray[Any, np.dtype[np.float64]]
    procs: np.ndarray[Any, np.dtype[np.int64]]
    runtime: np.ndarray[Any, np.dtype[np.float64]]
    requested: np.ndarray[Any, np.dtype[np.float64]]


def lublin_jobs(source: LublinSource, params: LublinParams, seed: int) -> Jobs:
    """Enough Lublin99 jobs to cover ``duration_days`` from midnight, cut at that time."""
    horizon = source.duration_days * DAY
    wall = WalltimeModel.f_model(source.walltime_f) if source.walltime_f else WalltimeModel()
    n = max(64, int(200 * source.duration_days))
    while True:
        w = generate(n, params, machine_size=source.machine_size, seed=seed, walltime=wall)
        if float(w.submit_time[-1]) >= horizon:
            break
        n *= 2
    keep = w.submit_time < horizon
    return Jobs(w.submit_time[keep], w.processors[keep], w.runtime[keep], w.requested_time[keep])


_SWF_CACHE: dict[Path, Jobs] = {}


def swf_jobs(source: SWFSource) -> Jobs:
    """The whole trace in allocation units (CPUs / ``procs_per_unit``, rounded up)."""
    cached = _SWF_CACHE.get(source.path)
    if cached is None:
        from elasticsite.traces.swf import read_swf

        t = read_swf(source.path, sort_by_submit=True)
        run = t.run_time.astype(np.float64)
        cached = Jobs(
            t.submit_time.astype(np.float64),
            -(-t.allocated_processors // source.procs_per_unit),
            run,
            np.maximum(np.maximum(t.requested_time, run), 1.0),
        )
        _SWF_CACHE[source.path] = cached
    return cached


def swf_intervals(source: SWFSource) -> int:
    """How many consecutive ``interval_days`` pieces the trace holds (rounds available)."""
    jobs = swf_jobs(source)
    if len(jobs.submit) == 0:
        return 0
    span = float(jobs.submit[-1] - jobs.submit[0])
    return int(span // (source.interval_days * DAY)) + 1


def check_rounds(spec: ReplaySpec) -> None:
    """A trace-driven spec's rounds fit in its trace, one interval each (else SpecError)."""
    if isinstance(spec.workload, SWFSource):
        have = swf_intervals(spec.workload)
        if spec.rounds > have:
            raise SpecError(
                f"rounds: {spec.rounds} rounds need {spec.rounds} intervals of "
                f"{spec.workload.interval_days:g} days but {spec.workload.path} holds {have}"
            )


def swf_round(source: SWFSource, round_: int) -> Jobs:
    """The ``round_``-th interval of the trace, submit times kept as in the trace."""
    jobs = swf_jobs(source)
    length = source.interval_days * DAY
    lo = float(jobs.submit[0]) + round_ * length
    keep = (jobs.submit >= lo) & (jobs.submit < lo + length)
    return Jobs(jobs.submit[keep], jobs.procs[keep], jobs.runtime[keep], jobs.requested[keep])


def write_replay_jobs_csv(path: str | Path, result: ReplayResult) -> Path:
    """One row per job of a replay: times in seconds, where it ran, whether it was rejected."""
    from elasticsite.sim.metrics import CLOUD

    jobs = result.jobs
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = ["job", "submit", "start", "finish", "processors", "runtime", "requested",
              "deadline", "wait", "where", "rejected"]  # fmt: skip
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(header)
        for i in range(len(jobs)):
            start, submit = float(jobs.start[i]), float(jobs.submit[i])
            out.writerow([
                i + 1, cell(submit), cell(start), cell(float(jobs.finish[i])),
                int(jobs.processors[i]), cell(float(jobs.runtime[i])),
                cell(float(jobs.requested[i])), cell(float(jobs.deadline[i])),
                cell(start - submit), "cloud" if jobs.where[i] == CLOUD else "site",
                int(bool(jobs.rejected[i])),
            ])  # fmt: skip
    return path
