"""The resumable, parallel runner under every experiment: tasks in, CSV rows out.

An experiment is a list of tasks, each a pure function of its spec and its round's
seed (:func:`round_seed`) that returns result rows, and the files it drew when it draws
any (a :class:`RunOutput`: bytes keyed by their path under the output directory; a run
writes nothing itself, so a run on another machine writes nothing there either).
:func:`execute` runs them in worker processes or on a Dask cluster, writes each task's
files and then appends its rows to the results log as it finishes, so an
interrupted experiment resumes where it stopped: :func:`read_rows` gives back what is
already there (dropping a row cut short by a kill), and the experiment kind leaves out
every task whose rows it finds. :func:`check_fingerprint` refuses to mix rows of two
different experiments in one directory. When the last task is in, :func:`sorted_log`
rewrites the log in a fixed order, so the same spec always gives the same bytes,
whatever order the workers finished in.

Cells are written by :func:`cell`: exact ``repr`` of floats, empty for undefined.
"""

from __future__ import annotations

import csv
import json
import math
import os
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from elasticsite.sim.dask_runner import DaskCluster, run_on_dask
from elasticsite.sim.specs import Spec, SpecError

__all__ = [
    "FINGERPRINT",
    "DaskCluster",
    "Progress",
    "Row",
    "RunOutput",
    "aggregate",
    "cell",
    "check_fingerprint",
    "execute",
    "number",
    "read_rows",
    "round_seed",
    "sorted_log",
    "summarise",
    "write_files",
    "write_rows",
]

FINGERPRINT = "spec.json"

Row = dict[str, str]

Progress = Callable[[int, int], None]
"""``progress(rows_done, rows_total)``, called as rows come in."""


@dataclass(frozen=True, slots=True)
class RunOutput:
    """What one run gives back when it made files besides its rows: each file's bytes
    keyed by its relative path under the experiment's output directory."""

    rows: list[Row]
    files: dict[str, bytes] = field(default_factory=dict)


def round_seed(seed: int, round_: int) -> int:
    """The seed of one round: the same for every swept value (common random numbers)."""
    return int(np.random.SeedSequence([seed, round_]).generate_state(1)[0])


# -- cells -------------------------------------------------------------------------


def cell(value: float | int | None) -> str:
    """A CSV cell: empty for undefined (None or NaN), exact repr otherwise."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, int | np.integer):
        return str(int(value))
    return repr(float(value))


def number(text: str) -> float:
    """A cell read back: NaN for an empty one."""
    return math.nan if text == "" else float(text)


# -- the results log ---------------------------------------------------------------


def read_rows(path: Path, header: Sequence[str]) -> list[Row]:
    """Rows already in ``path``; a file written by another kind of experiment is an error."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        # a run killed mid-write leaves a partial last row: drop it, it is recomputed
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
        if b"\n" not in data:
            return []
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if list(reader.fieldnames or []) != list(header):
            raise SpecError(
                f"{path}: its columns {reader.fieldnames} are not this experiment's; "
                "choose another --out directory"
            )
        return [row for row in reader if None not in row.values() and None not in row]


def write_rows(path: Path, header: Sequence[str], rows: Iterable[Row]) -> None:
    """Write a whole CSV atomically (a crash leaves the old file or the new one)."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=list(header), lineterminator="\n")
        out.writeheader()
        out.writerows(rows)
    tmp.replace(path)


def sorted_log(
    path: Path, header: Sequence[str], key: Callable[[Row], tuple[Any, ...]]
) -> list[Row]:
    """The log's rows in their fixed order, rewriting the file only when it was not."""
    rows = read_rows(path, header)
    ordered = sorted(rows, key=key)
    if ordered != rows:
        write_rows(path, header, ordered)
    return ordered


def write_files(out: Path, files: Mapping[str, bytes]) -> None:
    """Write a run's files under ``out``, each atomically; a path that would leave
    ``out`` (absolute, ``..``) is refused: it comes from a worker."""
    for name in files:
        parts = PurePosixPath(name).parts
        if not parts or name.startswith("/") or "\\" in name or {"", ".", ".."} & set(parts):
            raise RuntimeError(f"a run returned a file outside {out}: {name!r}; nothing written")
    for name, data in sorted(files.items()):
        path = out.joinpath(*PurePosixPath(name).parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
        # 0o666 less the umask, as any file this process writes: not a temp file's 0600
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as f:
            f.write(data)
        tmp.replace(path)


def check_fingerprint(out: Path, spec: Spec) -> None:
    """Refuse to mix rows of two different experiments in one directory.

    What may change between runs of one directory: the name, the rounds and the list
    of values, strategies, workloads, policies, runs, fractions and stringencies (new
    keys are computed, known ones kept); anything else makes the kept rows wrong.
    """
    data = spec.model_dump(mode="json", exclude={"name", "rounds", "strategies", "workloads",
                                                 "policies", "runs", "timelines", "fractions",
                                                 "stringency"})  # fmt: skip
    if isinstance(data.get("sweep"), dict):
        data["sweep"].pop("values", None)
    text = json.dumps(data, sort_keys=True, indent=1) + "\n"
    path = out / FINGERPRINT
    if path.exists() and path.read_text(encoding="utf-8") != text:
        raise SpecError(
            f"{out} holds results of an experiment with other settings (see {path}); "
            "choose another --out directory or delete it"
        )
    path.write_text(text, encoding="utf-8")


# -- running -----------------------------------------------------------------------


def execute(
    tasks: Sequence[Any],
    fn: Callable[[Any], list[Row] | RunOutput],
    workers: int | DaskCluster,
    results: Path,
    header: Sequence[str],
    total: int,
    progress: Progress | None,
) -> int:
    """Run tasks (in worker processes when ``workers`` > 1, or on a Dask cluster),
    appending each task's rows as they come.

    ``fn`` must be a module-level function and the tasks picklable: both travel to the
    worker processes. A run's files are written under the results' directory before
    its rows are appended, so a run whose rows are in has its files too. Returns how
    many rows were written.
    """
    done = 0
    if progress:
        progress(0, total)
    if not tasks:
        return 0
    fresh = not results.exists() or results.stat().st_size == 0
    with results.open("a", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=list(header), lineterminator="\n")
        if fresh:
            out.writeheader()
            f.flush()

        def record(output: list[Row] | RunOutput) -> None:
            nonlocal done
            if isinstance(output, RunOutput):
                write_files(results.parent, output.files)
            rows = output.rows if isinstance(output, RunOutput) else output
            out.writerows(rows)
            f.flush()
            done += len(rows)
            if progress:
                progress(done, total)

        if isinstance(workers, DaskCluster):
            run_on_dask(workers, tasks, fn, record)
            return done
        if workers <= 1 or len(tasks) == 1:
            for task in tasks:
                record(fn(task))
            return done
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
            pending: set[Future[list[Row] | RunOutput]] = {pool.submit(fn, t) for t in tasks}
            try:
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in sorted(finished, key=id):
                        record(fut.result())
            except BaseException:
                for fut in pending:
                    fut.cancel()
                raise
    return done


# -- summaries ---------------------------------------------------------------------


def aggregate(rows: Sequence[Row], group: Sequence[str], metrics: Sequence[str]) -> list[Row]:
    """Mean of each metric over the rounds of each group (undefined rounds left out)."""
    groups: dict[tuple[str, ...], list[Row]] = {}
    for r in rows:
        groups.setdefault(tuple(r[g] for g in group), []).append(r)
    out = []
    for key, members in groups.items():
        row = dict(zip(group, key, strict=True))
        row["rounds"] = str(len(members))
        for m in metrics:
            values = np.array([number(r[m]) for r in members])
            defined = values[~np.isnan(values)]
            row[m] = cell(float(defined.mean()) if len(defined) else math.nan)
        out.append(row)
    return out


def summarise(
    results: Path,
    key: Sequence[str],
    metrics: Sequence[str],
    *,
    order: Callable[[Row], tuple[Any, ...]],
    wanted: Collection[tuple[str, ...]],
    group: Sequence[str],
    summary: Path,
) -> tuple[list[Row], list[Row]]:
    """Put the log of ``key`` and ``metrics`` columns in ``order``, keep its rows whose
    ``key`` is ``wanted`` (a directory may hold rows of a larger spec), and write their
    means over the rounds of each ``group`` to ``summary``, in the same order.

    Returns the rows kept and the summary's rows."""
    rows = sorted_log(results, [*key, *metrics], order)
    mine = [r for r in rows if tuple(r[k] for k in key) in wanted]
    summary_rows = aggregate(mine, group, metrics)
    summary_rows.sort(key=lambda r: order({**r, "round": "0"}))
    write_rows(summary, [*group, "rounds", *metrics], summary_rows)
    return mine, summary_rows
