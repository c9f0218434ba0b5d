"""Reading history for the advisor: CSV files, ``sacct --json`` output and SWF traces.

Each reader yields :class:`~elasticsite.history.observations.Observation` objects and stops
at the first thing it cannot read with one :class:`SourceError`, ``FILE:LINE: what``
(``FILE: jobs[3] (job 1234): what`` in JSON, where a job, not a line, is what a person
can look up):

- **CSV** (:func:`read_csv`): a header row naming the columns, then one observation per
  row. ``phase``, ``resource``, ``value`` (seconds; for a probe, seconds per byte) and
  ``at`` (epoch seconds or an ISO 8601 time, UTC unless it says otherwise) are required;
  ``policy``, ``nodes``, ``repository``, ``app``, ``nbytes``, ``ref`` and ``trial`` are
  optional. Blank lines and lines starting with ``#`` are skipped.
- **sacct** (:func:`read_sacct`): ``sacct --json`` of Slurm 22.05 and later. A job that
  started gives its queue wait (phase ``allocation``: start minus eligible time, so a
  hold or a dependency is not counted as waiting, at its start); a job that completed
  also gives its run time (phase ``execution``, app = the job's name, at its end).
  The resource is the job's partition; ``qos_policies`` maps a QOS (``urgent``) to the
  advisor policy its jobs ran under (``next_to_run``); others are ``default``.
- **SWF** (:func:`read_swf_waits`): the queue waits of a Parallel Workloads Archive
  trace, read with :mod:`elasticsite.traces.swf`. Processors become nodes through the
  header's ``MaxProcs``/``MaxNodes`` when it gives both; each queue is its own resource.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from elasticsite.history.observations import Observation
from elasticsite.traces.swf import CleaningRules, SWFError, SWFReader

__all__ = [
    "CSV_COLUMNS",
    "FORMATS",
    "Format",
    "SourceError",
    "detect_format",
    "parse_time",
    "read_csv",
    "read_history",
    "read_sacct",
    "read_swf_waits",
]

Format = Literal["csv", "sacct", "swf"]
FORMATS: tuple[Format, ...] = ("csv", "sacct", "swf")

CSV_COLUMNS = (
    "phase", "resource", "value", "at", "policy", "nodes", "repository", "app", "nbytes",
    "ref", "trial",
)  # fmt: skip
"""The columns a history CSV may have; the first four are required."""
_REQUIRED = CSV_COLUMNS[:4]


class SourceError(ValueError):
    """A history file that cannot be read: ``FILE:LINE: what is wrong``."""


def detect_format(path: str | os.PathLike[str]) -> Format:
    """The format a file's name implies: ``.swf`` (``.swf.gz``), ``.json``, else CSV."""
    name = os.fspath(path).lower().removesuffix(".gz")
    if name.endswith(".swf"):
        return "swf"
    return "sacct" if name.endswith(".json") else "csv"


def read_history(
    path: str | os.PathLike[str],
    fmt: Format | None = None,
    *,
    resource: str | None = None,
    qos_policies: Mapping[str, str] | None = None,
) -> Iterator[Observation]:
    """Observations from ``path`` in format ``fmt`` (default: :func:`detect_format`);
    ``resource`` names the resource of every observation of an SWF or sacct file,
    ``qos_policies`` the policy of a sacct job's QOS (see :func:`read_sacct`)."""
    chosen = fmt or detect_format(path)
    if chosen == "csv":
        return read_csv(path)
    if chosen == "sacct":
        return read_sacct(path, resource=resource, qos_policies=qos_policies)
    if chosen == "swf":
        return read_swf_waits(path, resource=resource)
    raise ValueError(f"unknown history format {chosen!r}; choose from {', '.join(FORMATS)}")


# -- CSV -----------------------------------------------------------------------------


def parse_time(text: str) -> float:
    """Epoch seconds from a number or an ISO 8601 time (naive times are UTC)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not epoch seconds or an ISO 8601 time: {text!r}") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text!r}")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"not a whole number: {text!r}") from None


_CONVERT: dict[str, Callable[[str], object]] = {
    "value": _number,
    "at": parse_time,
    "nodes": _whole,
    "nbytes": _whole,
}


def read_csv(path: str | os.PathLike[str]) -> Iterator[Observation]:
    """Observations from a history CSV (the columns are in the module docstring)."""
    name = os.fspath(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            yield from _csv_rows(name, fh)
    except OSError as exc:
        raise SourceError(f"{name}: cannot read ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise SourceError(f"{name}: not UTF-8 text ({exc.reason})") from exc


def _csv_rows(name: str, fh: Iterator[str]) -> Iterator[Observation]:
    at_line = [0]  # the file line of the last line handed to the CSV reader

    def lines() -> Iterator[str]:
        for number, line in enumerate(fh, 1):
            if line.strip() and not line.lstrip().startswith("#"):
                at_line[0] = number
                yield line

    header: list[str] | None = None
    for row in csv.reader(lines()):
        line = at_line[0]
        if header is None:
            header = [c.strip().lower() for c in row]
            _check_header(name, line, header)
            continue
        if len(row) != len(header):
            raise SourceError(f"{name}:{line}: {len(row)} fields, the header has {len(header)}")
        fields: dict[str, Any] = {}
        for column, raw in zip(header, row, strict=True):
            text = raw.strip()
            if not text and column not in _REQUIRED:
                continue  # an empty optional field takes its default
            try:
                fields[column] = _CONVERT.get(column, str)(text)
            except ValueError as exc:
                raise SourceError(f"{name}:{line}: {column}: {exc}") from None
        try:
            yield Observation(source="csv", **fields)
        except ValueError as exc:
            raise SourceError(f"{name}:{line}: {exc}") from None
    if header is None:
        raise SourceError(f"{name}: empty; expected a header row ({', '.join(CSV_COLUMNS)})")


def _check_header(name: str, line: int, header: list[str]) -> None:
    unknown = [c for c in header if c not in CSV_COLUMNS]
    missing = [c for c in _REQUIRED if c not in header]
    twice = [c for c in header if header.count(c) > 1]
    if unknown:
        problem = f"unknown column {unknown[0]!r}"
    elif missing:
        problem = f"missing column {missing[0]!r}"
    elif twice:
        problem = f"column {twice[0]!r} named twice"
    else:
        return
    raise SourceError(
        f"{name}:{line}: header: {problem}; the columns are {', '.join(CSV_COLUMNS)} "
        f"({', '.join(_REQUIRED)} required)"
    )


# -- sacct --json --------------------------------------------------------------------


def _slurm_number(value: Any) -> float | None:
    """A number as any Slurm version writes it: plain or ``{"set", "infinite", "number"}``;
    unset, infinite and zero (never happened) give None."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def _state(job: Mapping[str, Any]) -> set[str]:
    current = (job.get("state") or {}).get("current", [])
    return {current} if isinstance(current, str) else {str(s) for s in current or ()}


def read_sacct(
    path: str | os.PathLike[str],
    *,
    resource: str | None = None,
    qos_policies: Mapping[str, str] | None = None,
) -> Iterator[Observation]:
    """Queue waits and run times from ``sacct --json`` output (Slurm 22.05 and later).

    ``resource`` replaces every job's partition as the resource name.
    """
    name = os.fspath(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceError(f"{name}: cannot read ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise SourceError(f"{name}: not UTF-8 text ({exc.reason})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(f"{name}:{exc.lineno}: not JSON ({exc.msg})") from None
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, list):
        raise SourceError(f'{name}: no "jobs" list; expected the output of sacct --json')
    policies = dict(qos_policies or {})
    for index, job in enumerate(jobs):
        try:
            yield from _sacct_job(job, resource, policies)
        except (ValueError, TypeError, AttributeError) as exc:
            ident = job.get("job_id") if isinstance(job, dict) else None
            where = f"jobs[{index}]" + (f" (job {ident})" if ident is not None else "")
            raise SourceError(f"{name}: {where}: {exc}") from None


def _sacct_job(
    job: Mapping[str, Any], resource: str | None, policies: Mapping[str, str]
) -> Iterator[Observation]:
    if not isinstance(job, dict):
        raise ValueError("not a JSON object")
    if "job_id" not in job or not isinstance(job.get("time"), dict):
        raise ValueError('missing "job_id" or "time"; expected a job of sacct --json')
    times = job["time"]
    start = _slurm_number(times.get("start"))
    if start is None:
        return  # never started: no wait was observed (pending, or cancelled in the queue)
    queued = _slurm_number(times.get("eligible")) or _slurm_number(times.get("submission"))
    if queued is None:
        raise ValueError("time.submission: missing for a job that started")
    cluster = str(job.get("cluster") or "")
    where = resource or str(job.get("partition") or "") or cluster
    if not where:
        raise ValueError("no partition or cluster to name the resource")
    nodes = int(_slurm_number(job.get("allocation_nodes")) or 1)
    ref = f"{cluster}:{job['job_id']}" if cluster else str(job["job_id"])
    policy = policies.get(str(job.get("qos") or ""), "default")
    yield Observation(
        phase="allocation",
        resource=where,
        policy=policy,
        nodes=nodes,
        value=max(0.0, start - queued),
        at=start,
        source="sacct",
        ref=ref,
    )
    end = _slurm_number(times.get("end"))
    if end is not None and end >= start and "COMPLETED" in _state(job):
        yield Observation(
            phase="execution",
            resource=where,
            policy=policy,
            nodes=nodes,
            app=str(job.get("name") or ""),
            value=end - start,
            at=end,
            source="sacct",
            ref=ref,
        )


# -- SWF -----------------------------------------------------------------------------

_SWF_RULES = CleaningRules(
    fill_allocated_processors=True,
    drop_cancelled_without_processors=False,
    drop_non_positive_processors=False,
    drop_non_positive_run_time=False,
    fill_requested_processors=False,
    fill_requested_time=False,
    overrun="keep",
)
"""Only allocated processors are repaired (from requested ones): a wait is a wait
whatever the job did next, so nothing else is dropped."""


def read_swf_waits(
    path: str | os.PathLike[str], *, resource: str | None = None
) -> Iterator[Observation]:
    """Queue waits of an SWF trace: one ``allocation`` observation per job with a known
    wait (``-1`` waits are skipped), at the job's start, ``ref`` its job number.

    The resource is ``resource`` (default: the file name without ``.swf``/``.gz``),
    with ``:q<N>`` added for a job in queue N.
    """
    name = os.fspath(path)
    base = resource or Path(name).name.removesuffix(".gz").removesuffix(".swf")
    try:
        with SWFReader(path, rules=_SWF_RULES) as reader:
            header = reader.header
            origin = float(header.unix_start_time or 0)
            procs, nodes = header.max_procs, header.max_nodes
            per_node = procs // nodes if procs and nodes and procs % nodes == 0 else 1
            for rec in reader:
                if rec.wait_time < 0 or rec.submit_time < 0:
                    continue
                cpus = rec.allocated_processors if rec.allocated_processors > 0 else 1
                where = f"{base}:q{rec.queue_number}" if rec.queue_number >= 0 else base
                yield Observation(
                    phase="allocation",
                    resource=where,
                    nodes=max(1, -(-cpus // per_node)),
                    value=rec.wait_time,
                    at=origin + rec.submit_time + rec.wait_time,
                    source="swf",
                    ref=str(rec.job_number),
                )
    except SWFError as exc:
        raise SourceError(str(exc)) from None
    except OSError as exc:
        raise SourceError(f"{name}: cannot read ({exc.strerror or exc})") from exc
