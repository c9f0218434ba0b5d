"""Running an experiment's tasks on an existing Dask distributed cluster.

``elasticsite experiment SPEC --dask tcp://HOST:PORT`` sends each task (one round of
one value, or one workload under one policy) to the cluster's workers instead of local
processes. Nothing else changes: each run's rows and files come back to this process,
which writes the files under ``--out`` and appends the rows to ``results.csv`` when the
run is done (so an interrupted sweep resumes the same way), and writes the same sorted
files at the end, byte for byte what a local run writes. Workers write nothing of ours
but a cached trace in their own local directory.

Before any run is sent, :mod:`~elasticsite.sim.dask_cluster` checks the scheduler and
its workers. A worker that dies mid-run loses only that run's future; the scheduler
runs it again on another worker, and its rows are recorded once, when it completes.
When no run finishes for ``cluster.timeout`` seconds, the sweep says which runs are
outstanding on which workers, and stops or keeps waiting as ``cluster.on_timeout`` says.

Workers need the ``elasticsite`` package at the client's version. An SWF trace is read
from the same path when the workers can see it (a shared file system), and otherwise
shipped to them once and cached in the worker's local directory by its SHA-256.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import tempfile
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elasticsite.sim.dask_cluster import (
    AsyncClient,
    DaskCluster,
    DaskError,
    check_scheduler,
    check_workers,
    close,
    named,
    open_client,
    wait_for_workers,
    worker_names,
)

if TYPE_CHECKING:
    from distributed import Future

__all__ = ["DaskCluster", "DaskError", "run_on_dask"]

log = logging.getLogger(__name__)

SHOWN = 5
"""How many outstanding runs a stall message names before it only counts them."""


def _trace_of(task: Any) -> Path | None:
    spec = getattr(task, "spec", None)
    workload = getattr(spec, "workload", None)
    path = getattr(workload, "path", None)
    return Path(path) if path is not None else None


def _localized(task: Any, digest: str, data: bytes | None, cache: Path) -> Any:
    """The task, its trace path replaced by a copy in ``cache`` when the worker cannot
    see it. ``cache`` is private to the worker, so no other user can plant a trace."""
    path = _trace_of(task)
    if path is None or data is None or path.exists():
        return task
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    local = cache / f"{digest}{''.join(path.suffixes[-2:])}"
    if not local.exists():
        # a unique name per writer: two threads of one worker may ship the same trace
        with tempfile.NamedTemporaryFile(dir=cache, suffix=".part", delete=False) as f:
            f.write(data)
        Path(f.name).replace(local)
    workload = task.spec.workload.model_copy(update={"path": local})
    return dataclasses.replace(task, spec=task.spec.model_copy(update={"workload": workload}))


def _run(fn: Callable[[Any], Any], task: Any, digest: str, data: bytes | None) -> Any:
    """What a worker runs: the task, with its trace where this worker can read it."""
    from distributed import get_worker

    cache = Path(get_worker().local_directory) / "elasticsite-traces"
    return fn(_localized(task, digest, data, cache))


def _label(task: Any, index: int, count: int) -> str:
    label = getattr(task, "label", None)
    return str(label) if label else f"run {index + 1} of {count}"


def run_on_dask(
    cluster: DaskCluster,
    tasks: Sequence[Any],
    fn: Callable[[Any], Any],
    record: Callable[[Any], None],
) -> None:
    """Run every task on the cluster; ``record`` what each returns as it completes.

    Raises :class:`DaskError` (one line) when the cluster cannot run the sweep, or
    when it stalls and ``cluster.on_timeout`` is ``"stop"``.
    """
    sweep = _sweep(cluster, tasks, fn, record)
    quiet, client_log = _NoCloseNoise(), logging.getLogger("distributed.client")
    client_log.addFilter(quiet)
    try:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(sweep)
            return
        # called from inside an event loop (a notebook's): the sweep gets a loop of its own
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, sweep).result()
    finally:
        client_log.removeFilter(quiet)


class _NoCloseNoise(logging.Filter):
    """Drops the traceback distributed logs when a client that is trying to reconnect to
    a lost scheduler is closed: the sweep has said what happened, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError))


async def _sweep(
    cluster: DaskCluster,
    tasks: Sequence[Any],
    fn: Callable[[Any], Any],
    record: Callable[[Any], None],
) -> None:
    trace = next((p for p in map(_trace_of, tasks) if p is not None), None)
    data = trace.read_bytes() if trace is not None else None
    client = await open_client(cluster)
    try:
        try:
            modules = sorted({fn.__module__, *map(_module, tasks)})
            await check_scheduler(client, cluster, modules)
            await wait_for_workers(client, cluster)
            await check_workers(client, cluster, modules)
            digest, shipped = "", None
            if data is not None:
                digest = hashlib.sha256(data).hexdigest()
                shipped = await client.scatter(data, broadcast=True, hash=False)
        except OSError as exc:  # distributed's CommClosedError among them
            raise DaskError(
                f"lost the connection to the Dask scheduler at {cluster.address} while "
                f"checking it ({exc}); is it still running?"
            ) from None
        token = uuid.uuid4().hex[:12]  # two sweeps on one cluster never share a key
        futures: dict[str, Future] = {}
        labels: dict[str, str] = {}
        for i, task in enumerate(tasks):
            key = f"elasticsite-{token}-{i}"
            labels[key] = _label(task, i, len(tasks))
            futures[key] = client.submit(
                _run, fn, task, digest, shipped, key=key, pure=False, retries=2
            )
        try:
            await _collect(client, cluster, futures, labels, record)
        except BaseException:
            await asyncio.shield(_cancel(client, list(futures.values())))
            raise
    finally:
        await asyncio.shield(close(client))


def _module(task: Any) -> str:
    return type(task).__module__


async def _cancel(client: AsyncClient, futures: list[Future]) -> None:
    with suppress(Exception):  # the scheduler forgets them anyway when this client closes
        await asyncio.wait_for(client.cancel(futures), 10)


RESUME = "the runs done are in results.csv and the same command resumes from them"


async def _result(future: Future, label: str, address: str) -> Any:
    """What the run returned; a run the cluster lost or cancelled is a :class:`DaskError`."""
    from distributed import KilledWorker

    try:
        return await future
    except KilledWorker as exc:
        last = getattr(getattr(exc, "last_worker", None), "address", "unknown")
        raise DaskError(
            f"run {label} was lost: every worker that ran it died (the last: {last}; see its "
            f"log: a worker without elasticsite dies unpacking a run); {RESUME}"
        ) from None
    except CancelledError as exc:  # concurrent.futures': the cluster's doing, not ours
        reason = getattr(exc, "reason", "")
        if reason == "scheduler-connection-lost":
            raise DaskError(
                f"lost the connection to the Dask scheduler at {address} (is it still "
                f"running?); {RESUME}"
            ) from None
        raise DaskError(
            f"the Dask cluster cancelled run {label} ({reason or 'no reason given'}); {RESUME}"
        ) from None


async def _collect(
    client: AsyncClient,
    cluster: DaskCluster,
    futures: dict[str, Future],
    labels: dict[str, str],
    record: Callable[[Any], None],
) -> None:
    """Record runs as they finish; when none finishes for ``cluster.timeout``, stop or
    say what is outstanding and keep waiting."""
    loop = asyncio.get_running_loop()
    waiting = {
        asyncio.ensure_future(_result(f, labels[k], cluster.address)): k for k, f in futures.items()
    }
    order = {k: i for i, k in enumerate(futures)}
    try:
        finished = told = loop.time()  # the last run finished, the last time we said so
        while waiting:
            done, _ = await asyncio.wait(
                waiting,
                timeout=max(told + cluster.timeout - loop.time(), 0.0),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:
                where = await _outstanding(client, list(waiting.values()), labels)
                text = f"no run finished in the last {loop.time() - finished:.0f} s; {where}"
                if cluster.on_timeout == "stop":
                    raise DaskError(f"{text}. Stopped (--dask-timeout): {RESUME}")
                (cluster.notify or log.warning)(f"{text}; still waiting")
                told = loop.time()
                continue
            finished = told = loop.time()
            for t in sorted(done, key=lambda t: order[waiting[t]]):
                del waiting[t]
                record(t.result())
    finally:
        for t in waiting:
            t.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)


async def _outstanding(client: AsyncClient, keys: list[str], labels: dict[str, str]) -> str:
    try:
        processing = await asyncio.wait_for(client.processing(), 10)
        names = await asyncio.wait_for(worker_names(client), 10)
    except Exception:
        return f"{_runs(len(keys))} outstanding (the scheduler does not say where)"
    return outstanding(keys, labels, processing, names)


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def outstanding(
    keys: Sequence[str],
    labels: dict[str, str],
    processing: dict[str, Sequence[Any]],
    names: dict[str, str],
) -> str:
    """Which runs are outstanding, by the worker each one is processing on (as the
    scheduler's ``processing`` says), and how many no worker has yet."""
    where = {str(k): addr for addr, ks in processing.items() for k in ks}
    by_worker: dict[str, list[str]] = {}
    for k in keys:
        if k in where:
            by_worker.setdefault(where[k], []).append(labels[k])
    parts, shown = [], 0
    for addr, runs in sorted(by_worker.items()):
        some = runs[: max(SHOWN - shown, 0)]
        shown += len(some)
        if not some:
            listed = _runs(len(runs))
        else:
            more = f" and {len(runs) - len(some)} more" if len(runs) > len(some) else ""
            listed = ", ".join(some) + more
        parts.append(f"on {named(addr, names)}: {listed}")
    if queued := len(keys) - sum(map(len, by_worker.values())):
        workers = f"{len(names) or 'no'} worker{'s' if len(names) != 1 else ''} connected"
        parts.append(f"{queued} not yet sent to a worker ({workers})")
    return f"{_runs(len(keys))} outstanding: {'; '.join(parts)}"
