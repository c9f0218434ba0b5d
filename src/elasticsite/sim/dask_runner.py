"""Running an experiment's tasks on an existing Dask distributed cluster.

``elasticsite experiment SPEC --dask tcp://HOST:PORT`` sends each task (one round of
one value, or one workload under one policy) to the cluster's workers instead of local
processes. Nothing else changes: the rows come back to this process, which appends each
task's rows to ``results.csv`` when the task is done (so an interrupted sweep resumes
the same way) and writes the same sorted files at the end, byte for byte what a local
run writes.

A worker that dies mid-task loses only that task's future; the scheduler runs it again
on another worker, and its rows are recorded once, when it completes. Workers need the
``elasticsite`` package and nothing else: an SWF trace is read from the same path
when the workers can see it (a shared file system), and otherwise shipped to them once
and cached under the worker's temporary directory by its SHA-256.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DaskCluster", "run_on_dask"]

Row = dict[str, str]


@dataclass(frozen=True, slots=True)
class DaskCluster:
    """Where to run: a Dask scheduler's address (``tcp://host:8786``)."""

    address: str
    timeout: float = 30.0


def _trace_of(task: Any) -> Path | None:
    spec = getattr(task, "spec", None)
    workload = getattr(spec, "workload", None)
    path = getattr(workload, "path", None)
    return Path(path) if path is not None else None


def _localized(task: Any, digest: str, data: bytes | None) -> Any:
    """The task, its trace path replaced by a cached copy when the worker cannot see it."""
    path = _trace_of(task)
    if path is None or data is None or path.exists():
        return task
    cache = Path(tempfile.gettempdir()) / "elasticsite-traces"
    cache.mkdir(mode=0o700, exist_ok=True)
    local = cache / f"{digest}{''.join(path.suffixes[-2:])}"
    if not local.exists():
        tmp = local.with_suffix(f".{os.getpid()}.part")
        tmp.write_bytes(data)
        tmp.replace(local)
    workload = task.spec.workload.model_copy(update={"path": local})
    return dataclasses.replace(task, spec=task.spec.model_copy(update={"workload": workload}))


def _run(fn: Callable[[Any], list[Row]], task: Any, digest: str, data: bytes | None) -> list[Row]:
    return fn(_localized(task, digest, data))


def run_on_dask(
    cluster: DaskCluster,
    tasks: Sequence[Any],
    fn: Callable[[Any], list[Row]],
    record: Callable[[list[Row]], None],
) -> None:
    """Run every task on the cluster; ``record`` each one's rows as it completes."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise RuntimeError(
            "--dask needs dask.distributed: pip install 'elasticsite[dask]'"
        ) from None
    try:
        client = Client(cluster.address, timeout=cluster.timeout, set_as_default=False)
    except OSError as exc:
        raise RuntimeError(f"cannot reach the Dask scheduler at {cluster.address}: {exc}") from None
    try:
        trace = next((p for p in map(_trace_of, tasks) if p is not None), None)
        digest, shipped = "", None
        if trace is not None:
            data = trace.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            shipped = client.scatter(data, broadcast=True, hash=False)
        futures = [
            client.submit(_run, fn, task, digest, shipped, pure=False, retries=2) for task in tasks
        ]
        try:
            with client.as_current():
                for future in as_completed(futures):
                    record(future.result())
        except BaseException:
            client.cancel(futures)
            raise
    finally:
        client.close()
