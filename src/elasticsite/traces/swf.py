"""Read and write the Standard Workload Format (SWF) of the Parallel Workloads Archive.

A trace is header comments (lines starting with ``;``, mostly ``Key: value``) and one
line of 18 whitespace-separated numbers per job. Every field keeps the archive's ``-1``
for "unknown"; nothing becomes ``None``, so a column is one plain numpy array. Time,
CPU-time, memory and think-time fields are floats (real traces carry ``1234.5``); job,
processor, status and id fields are ints and must be integral (``32.0`` is accepted).
Everything from a ``;`` to the end of a line is a comment; only whole-line comments
feed the header.

:func:`read_swf` loads a whole trace into columns for the simulator; :class:`SWFReader`
streams records a block at a time for traces too big to hold. Both parse with numpy's C
line parser and re-read a block line by line only when it holds a bad line, so an
error names its line and the fast path stays fast. Gzip is detected by magic bytes.

Cleaning (:class:`CleaningRules`) runs these rules in this order, each optional and
counted in the :class:`CleaningReport` over the rows still kept when it runs:

1. ``fill_allocated_processors`` (on): allocated ``-1`` -> requested processors, so
   "processors" below means allocated, or requested when allocation is unknown.
2. ``drop_cancelled_without_processors`` (on): status 5 and processors <= 0.
3. ``drop_non_positive_processors`` (on): processors <= 0.
4. ``drop_non_positive_run_time`` (on): run time <= 0, which includes unknown (-1).
5. ``overrun="drop"``: drop jobs whose run time exceeds a known (> 0) requested time.
6. ``fill_requested_processors`` (on): requested ``-1`` -> allocated processors.
7. ``fill_requested_time`` (on): requested time ``-1`` -> run time.
8. ``overrun="clip"`` (the default): clip such run times to the requested time, what a
   scheduler enforcing limits does; ``overrun="keep"`` leaves them alone.

The file order is kept; ``read_swf(..., sort_by_submit=True)`` sorts stably.
"""

from __future__ import annotations

import gzip
import io
import logging
import math
import os
import warnings
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

from elasticsite.traces.swf_cleaning import (
    CANCELLED,
    CleaningReport,
    CleaningRules,
    clean_rows,
)
from elasticsite.traces.swf_header import STANDARD_KEYS, SWFHeader

__all__ = [
    "CANCELLED",
    "FIELDS",
    "ROW",
    "STANDARD_KEYS",
    "CleaningReport",
    "CleaningRules",
    "SWFError",
    "SWFHeader",
    "SWFReader",
    "SWFRecord",
    "SWFTrace",
    "read_swf",
    "write_swf",
]

log = logging.getLogger(__name__)

OnError = Literal["raise", "skip"]


class SWFError(ValueError):
    """A malformed trace: ``path:line: what is wrong``, or ``path: what is wrong`` for the
    file as a whole (a gzip stream that is cut short or is not one)."""

    def __init__(self, path: str, line: int | None, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if line is None else f"{path}:{line}: {reason}")
        self.path, self.line, self.reason = path, line, reason

    def __reduce__(self) -> tuple[type[SWFError], tuple[str, int | None, str]]:
        # Rebuilt from its parts when it crosses a process boundary (experiment workers).
        return type(self), (self.path, self.line, self.reason)


_BAD_GZIP = "not a valid gzip stream (truncated?)"


class SWFRecord(NamedTuple):
    """One job line, fields in file order; -1 means unknown."""

    job_number: int
    submit_time: float
    wait_time: float
    run_time: float
    allocated_processors: int
    average_cpu_time: float
    used_memory: float
    requested_processors: int
    requested_time: float
    requested_memory: float
    status: int
    user_id: int
    group_id: int
    executable_number: int
    queue_number: int
    partition_number: int
    preceding_job_number: int
    think_time: float


FIELDS = SWFRecord._fields
"""The 18 field names in file order."""
_NFIELDS = len(FIELDS)
_FLOATS = (
    "submit_time", "wait_time", "run_time", "average_cpu_time", "used_memory",
    "requested_time", "requested_memory", "think_time",
)  # fmt: skip
_INT_SET = frozenset(i for i, name in enumerate(FIELDS) if name not in _FLOATS)
ROW = np.dtype([(f, np.float64 if f in _FLOATS else np.int64) for f in FIELDS])
"""One job line as a numpy record; blocks of jobs are 1-d arrays of it."""
_LABELS = [f.replace("_", " ").replace("cpu", "CPU") for f in FIELDS]


def _row_values(tokens: list[bytes]) -> tuple[float, ...] | str:
    """One line's 18 numbers, or the reason it is malformed (the slow path's judge)."""
    if len(tokens) != _NFIELDS:
        return f"expected {_NFIELDS} fields, found {len(tokens)}"
    values: list[float] = []
    for i, token in enumerate(tokens):
        problem, text = "", token.decode("latin-1")
        try:
            value = float(token.replace(b"_", b"?"))  # as numpy's parser, refuse 1_000
        except ValueError:
            return f"field {i + 1} ({_LABELS[i]}) is not a number: {text!r}"
        if not math.isfinite(value):
            problem = "is not a finite number:"
        elif i in _INT_SET and not value.is_integer():
            problem = "must be an integer, found"
        elif i in _INT_SET:
            value = int(token) if token.lstrip(b"+-").isdigit() else int(value)  # exact > 2**53
            problem = "" if -(2**63) <= value < 2**63 else "is out of range:"
        if problem:
            return f"field {i + 1} ({_LABELS[i]}) {problem} {text!r}"
        values.append(value)
    return tuple(values)


def _parse_fast(block: bytes) -> NDArray[np.void] | None:
    """Parse a block with numpy's C parser; None when any line is not a valid job line."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "input contained no data" for comment-only blocks
            rows = np.loadtxt(io.BytesIO(block), dtype=ROW, comments=";", ndmin=1)
    except ValueError:  # wrong field count, not a number, 32.0 for an int: judged line by line
        return None
    return rows if all(np.isfinite(rows[f]).all() for f in _FLOATS) else None


class SWFReader:
    """Stream the jobs of a (possibly gzipped) SWF trace without loading it whole.

    Iterating yields cleaned :class:`SWFRecord` objects, once. :attr:`header` holds the
    leading header as soon as the reader is open (comments between jobs are added when
    reached); :attr:`report` counts what cleaning did so far. ``on_error="raise"`` stops
    at the first malformed line with an :class:`SWFError`; ``"skip"`` counts each in
    ``report.malformed_lines`` and logs the first ten.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        rules: CleaningRules = CleaningRules(),
        on_error: OnError = "raise",
        block_size: int = 1 << 20,
    ) -> None:
        self.name = str(path)
        self.rules, self.on_error = rules, on_error
        self.header, self.report = SWFHeader(), CleaningReport()
        with open(path, "rb") as probe:
            gzipped = probe.read(2) == b"\x1f\x8b"
        self._file: io.BufferedIOBase = gzip.open(path) if gzipped else open(path, "rb")  # noqa: SIM115
        try:
            self._blocks = self._parsed_blocks(block_size)
            self._pending: list[NDArray[np.void]] = []
            for rows in self._blocks:  # read up to the first job line: the header is complete
                self._pending.append(rows)
                if self.report.records_read or self.report.malformed_lines:
                    break
        except BaseException:
            self._file.close()
            raise

    def __enter__(self) -> SWFReader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the trace file."""
        self._file.close()

    def __iter__(self) -> Iterator[SWFRecord]:
        for rows in self.blocks():
            yield from _records(rows[name] for name in FIELDS)

    def blocks(self) -> Iterator[NDArray[np.void]]:
        """Cleaned jobs as arrays of :data:`ROW` records, one per block read, in file order."""
        while self._pending:
            yield self._pending.pop(0)
        yield from self._blocks

    def _parsed_blocks(self, block_size: int) -> Iterator[NDArray[np.void]]:
        line, rest = 1, b""
        while chunk := self._read(block_size):
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            if cut:
                block, rest = data[:cut], data[cut:]
                yield clean_rows(self._parse(block, line), self.rules, self.report)
                line += block.count(b"\n")
            else:
                rest = data
        if rest:
            yield clean_rows(self._parse(rest, line), self.rules, self.report)

    def _read(self, size: int) -> bytes:
        """Up to ``size`` bytes of the (decompressed) trace; a broken gzip stream is an
        :class:`SWFError` naming the file, not the decompressor's own exception."""
        try:
            return self._file.read(size)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise SWFError(self.name, None, _BAD_GZIP) from exc

    def _parse(self, block: bytes, first_line: int) -> NDArray[np.void]:
        self._read_comments(block)
        rows = _parse_fast(block)
        if rows is not None:
            return rows
        good = []
        for number, line in enumerate(block.split(b"\n"), first_line):
            tokens = line.split(b";", 1)[0].split()
            if not tokens:
                continue
            values = _row_values(tokens)
            if not isinstance(values, str):
                good.append(values)
            elif self.on_error == "raise":
                raise SWFError(self.name, number, values)
            else:
                self.report.malformed_lines += 1
                if self.report.malformed_lines <= 10:
                    log.warning("%s:%d: %s; line skipped", self.name, number, values)
        return np.array(good, dtype=ROW)

    def _read_comments(self, block: bytes) -> None:
        """Feed whole-line comments to the header; scans only where a ``;`` is."""
        at = block.find(b";")
        while at >= 0:
            start = block.rfind(b"\n", 0, at) + 1
            end = block.find(b"\n", at)
            end = len(block) if end < 0 else end
            if not block[start:at].strip():
                self.header.add_comment(block[at + 1 : end].decode("utf-8", "replace"))
            at = block.find(b";", end)


def _records(columns: Iterable[NDArray[Any]]) -> Iterator[SWFRecord]:
    """Records from the 18 columns; column-wise tolist() beats a structured one."""
    return map(SWFRecord._make, zip(*(column.tolist() for column in columns), strict=True))


@dataclass(frozen=True, slots=True, eq=False)
class SWFTrace:
    """A whole trace as one numpy array per field (int64 or float64), -1 for unknown."""

    header: SWFHeader
    report: CleaningReport
    job_number: NDArray[np.int64]
    submit_time: NDArray[np.float64]
    wait_time: NDArray[np.float64]
    run_time: NDArray[np.float64]
    allocated_processors: NDArray[np.int64]
    average_cpu_time: NDArray[np.float64]
    used_memory: NDArray[np.float64]
    requested_processors: NDArray[np.int64]
    requested_time: NDArray[np.float64]
    requested_memory: NDArray[np.float64]
    status: NDArray[np.int64]
    user_id: NDArray[np.int64]
    group_id: NDArray[np.int64]
    executable_number: NDArray[np.int64]
    queue_number: NDArray[np.int64]
    partition_number: NDArray[np.int64]
    preceding_job_number: NDArray[np.int64]
    think_time: NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.job_number)

    def records(self) -> Iterator[SWFRecord]:
        """The jobs one :class:`SWFRecord` at a time."""
        return _records(getattr(self, name) for name in FIELDS)


def read_swf(
    path: str | os.PathLike[str],
    *,
    rules: CleaningRules = CleaningRules(),
    on_error: OnError = "raise",
    sort_by_submit: bool = False,
) -> SWFTrace:
    """Load a whole (possibly gzipped) trace into columns, cleaned by ``rules``.

    ``CleaningRules.none()`` returns the trace as written; ``sort_by_submit`` sorts
    the jobs stably by submit time. Raises :class:`SWFError` on a malformed line
    unless ``on_error="skip"``, which counts it in ``report.malformed_lines``.
    """
    with SWFReader(path, rules=rules, on_error=on_error, block_size=4 << 20) as reader:
        blocks = [np.empty(0, ROW), *reader.blocks()]
    columns: list[Any] = [np.concatenate([rows[name] for rows in blocks]) for name in FIELDS]
    if sort_by_submit:
        order = np.argsort(columns[FIELDS.index("submit_time")], kind="stable")
        columns = [column[order] for column in columns]
    return SWFTrace(reader.header, reader.report, *columns)


def _format(record: Iterable[float]) -> str:
    """One job line: integral values without a fraction, others as shortest round trip."""
    values = tuple(record)
    if len(values) != _NFIELDS:
        raise ValueError(f"a job line has {_NFIELDS} fields, this record has {len(values)}")
    out = []
    for i, value in enumerate(values):
        number = int(value) if isinstance(value, int | np.integer) else float(value)
        if isinstance(number, float) and not number.is_integer():
            fits = i not in _INT_SET and math.isfinite(number)
            text = repr(number)
        else:
            fits = i not in _INT_SET or -(2**63) <= int(number) < 2**63
            text = str(int(number))
        if not fits:
            raise ValueError(f"{FIELDS[i]}={value!r} cannot be written to SWF")
        out.append(text)
    return " ".join(out)


def write_swf(
    path: str | os.PathLike[str],
    jobs: SWFTrace | Iterable[SWFRecord],
    header: SWFHeader | None = None,
) -> int:
    """Write a valid SWF file (gzipped when the name ends in ``.gz``); returns the job count.

    ``header`` defaults to the trace's own; records are written in the order given.
    """
    if isinstance(jobs, SWFTrace):
        header = jobs.header if header is None else header
        jobs = jobs.records()
    opener = gzip.open if os.fspath(path).endswith(".gz") else open
    count = 0
    with opener(path, "wt", encoding="utf-8", newline="\n") as out:
        for line in header.lines() if header is not None else ():
            out.write(line + "\n")
        for count, record in enumerate(jobs, 1):  # noqa: B007 - count is the result
            out.write(_format(record) + "\n")
    return count
