"""Where a simulated workload comes from: a built-in, an SWF trace, or the Lublin model.

Every source becomes the same columnar :class:`Workload` (submit time, processors,
run time, requested time), sorted by submission, which both simulation modes read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from elasticsite.workloads import get_workload, workload_names

__all__ = ["Workload", "load_workload"]


@dataclass(frozen=True, slots=True)
class Workload:
    """Jobs in submission order as parallel arrays; ``name`` says where they came from."""

    name: str
    submit: npt.NDArray[np.float64]
    procs: npt.NDArray[np.int64]
    runtime: npt.NDArray[np.float64]
    requested: npt.NDArray[np.float64]
    note: str = ""

    def __len__(self) -> int:
        return int(self.submit.size)

    def arrivals(self) -> list[tuple[float, int, float, float]]:
        """``(submit, procs, runtime, requested)`` tuples, the elastic simulation's input."""
        return list(
            zip(
                self.submit.tolist(),
                self.procs.tolist(),
                self.runtime.tolist(),
                self.requested.tolist(),
                strict=True,
            )
        )


def _sorted(
    name: str,
    submit: npt.ArrayLike,
    procs: npt.ArrayLike,
    runtime: npt.ArrayLike,
    requested: npt.ArrayLike,
    note: str = "",
) -> Workload:
    order = np.argsort(np.asarray(submit, dtype=np.float64), kind="stable")
    return Workload(
        name,
        np.asarray(submit, dtype=np.float64)[order],
        np.asarray(procs, dtype=np.int64)[order],
        np.asarray(runtime, dtype=np.float64)[order],
        np.asarray(requested, dtype=np.float64)[order],
        note,
    )


def load_workload(
    source: str,
    *,
    seed: int = 0,
    jobs: int = 10_000,
    machine_size: int = 128,
) -> Workload:
    """``source`` is a built-in name (``workload1`` ...), ``lublin`` or a path to an SWF trace.

    ``jobs`` and ``machine_size`` shape a Lublin workload; ``seed`` makes randomised
    sources reproducible.
    """
    if source in workload_names():
        arr = get_workload(source, seed)
        return _sorted(
            source,
            [a.at for a in arr],
            [a.cores for a in arr],
            [a.runtime for a in arr],
            [a.walltime for a in arr],
        )
    if source == "lublin":
        from elasticsite.traces.lublin import generate

        w = generate(jobs, machine_size=machine_size, seed=seed)
        return _sorted(
            f"lublin-{jobs}",
            w.submit_time,
            w.processors,
            w.runtime,
            w.requested_time,
            f"Lublin99 model, {machine_size} processors, seed {seed}",
        )
    path = Path(source)
    if not path.exists():
        raise ValueError(
            f"unknown workload {source!r}: not a built-in ({', '.join(workload_names())}), "
            "not 'lublin', and no such file"
        )
    from elasticsite.traces.swf import read_swf

    trace = read_swf(path)
    return _sorted(
        path.name,
        trace.submit_time,
        trace.allocated_processors,
        trace.run_time,
        trace.requested_time,
        trace.report.summary(),
    )
