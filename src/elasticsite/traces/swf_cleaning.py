"""Cleaning an SWF trace: the rules, in order, and the report of what each did.

The rules and their order are in :mod:`elasticsite.traces.swf`'s docstring; they run on
a block of rows at a time, repairing in place, so a streamed trace is cleaned as a
loaded one is.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

__all__ = ["CANCELLED", "CleaningReport", "CleaningRules", "Overrun", "clean_rows"]

CANCELLED = 5
"""Status of a job cancelled by its user (SWF 2.1); the others are 0 failed, 1 done."""

Overrun = Literal["clip", "drop", "keep"]


@dataclass(frozen=True, slots=True)
class CleaningRules:
    """Which cleaning rules to apply; the order and defaults are in the module docstring."""

    fill_allocated_processors: bool = True
    drop_cancelled_without_processors: bool = True
    drop_non_positive_processors: bool = True
    drop_non_positive_run_time: bool = True
    fill_requested_processors: bool = True
    fill_requested_time: bool = True
    overrun: Overrun = "clip"

    @classmethod
    def none(cls) -> CleaningRules:
        """No rule at all: the trace exactly as written."""
        off: dict[str, Any] = {f.name: False for f in fields(cls) if f.name != "overrun"}
        return cls(**off, overrun="keep")


@dataclass(slots=True)
class CleaningReport:
    """How many lines were read, repaired and dropped, by rule."""

    records_read: int = 0
    malformed_lines: int = 0
    allocated_from_requested: int = 0
    dropped_cancelled_without_processors: int = 0
    dropped_non_positive_processors: int = 0
    dropped_non_positive_run_time: int = 0
    requested_processors_from_allocated: int = 0
    requested_time_from_run_time: int = 0
    run_time_clipped: int = 0
    dropped_overrun: int = 0
    kept: int = 0

    @property
    def dropped(self) -> int:
        """Well-formed records removed by any rule."""
        return self.records_read - self.kept

    def summary(self) -> str:
        """Non-zero counts as ``name=count`` pairs, for logs and reports."""
        return ", ".join(
            f"{f.name}={getattr(self, f.name)}" for f in fields(self) if getattr(self, f.name)
        )


def clean_rows(
    rows: NDArray[np.void], rules: CleaningRules, report: CleaningReport
) -> NDArray[np.void]:
    """Apply ``rules`` to a block of jobs, repairing in place; count into ``report``."""
    report.records_read += len(rows)
    alloc, req = rows["allocated_processors"], rows["requested_processors"]
    run, req_time = rows["run_time"], rows["requested_time"]
    keep = np.ones(len(rows), dtype=bool)

    def count(name: str, hit: NDArray[np.bool_]) -> None:
        setattr(report, name, getattr(report, name) + int(hit.sum()))

    if rules.fill_allocated_processors:
        hit = (alloc == -1) & (req > 0)
        alloc[hit] = req[hit]
        count("allocated_from_requested", hit)
    for enabled, name, cond in (
        (rules.drop_cancelled_without_processors, "dropped_cancelled_without_processors",
         (rows["status"] == CANCELLED) & (alloc <= 0)),
        (rules.drop_non_positive_processors, "dropped_non_positive_processors", alloc <= 0),
        (rules.drop_non_positive_run_time, "dropped_non_positive_run_time", run <= 0),
        (rules.overrun == "drop", "dropped_overrun", (req_time > 0) & (run > req_time)),
    ):  # fmt: skip
        if enabled:
            hit = keep & cond
            keep &= ~hit
            count(name, hit)
    for enabled, name, target, cond, source in (
        (rules.fill_requested_processors, "requested_processors_from_allocated",
         req, (req == -1) & (alloc > 0), alloc),
        (rules.fill_requested_time, "requested_time_from_run_time",
         req_time, (req_time == -1) & (run > 0), run),
        (rules.overrun == "clip", "run_time_clipped",
         run, (req_time > 0) & (run > req_time), req_time),
    ):  # fmt: skip
        if enabled:
            hit = keep & cond
            target[hit] = source[hit]
            count(name, hit)
    report.kept += int(keep.sum())
    return rows if keep.all() else rows[keep]
