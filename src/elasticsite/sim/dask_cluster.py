"""Reaching a Dask cluster and checking, before any run is sent, that it can run them.

Every failure here is a :class:`DaskError` with one line saying what is wrong and what
to do, raised within a stated time: a malformed address at once; a refused connection
after 3 s; a host that does not answer after ``connect_timeout`` (Dask's
``distributed.comm.timeouts.connect``, 30 s, by default); a port that accepts
connections but does not answer Dask's handshake (an HTTP dashboard, say), or answers
as a worker rather than a scheduler, within the same time; a scheduler with no worker
after ``wait_workers``; and workers that cannot import elasticsite, or run another
version of it, named one by one. The client is always closed before the error leaves,
so nothing is reported again at interpreter exit.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "AsyncClient",
    "DaskCluster",
    "DaskError",
    "check_scheduler",
    "check_workers",
    "open_client",
    "parse_address",
]

AsyncClient = Any
"""A ``distributed.Client(asynchronous=True)``: its methods return awaitables, which
distributed's annotations (written for the blocking client) do not say."""

DEFAULT_PORT_HINT = "a scheduler listens on port 8786 by default"
REFUSED_GRACE = 3.0
"""Seconds a refused connection is retried: long enough for a scheduler that is just
starting, short enough that a wrong port is said at once."""


class DaskError(RuntimeError):
    """The cluster cannot run this sweep; the message is one line saying why."""


def parse_address(text: str) -> str:
    """``tcp://HOST:PORT`` (or ``tls://``; a bare ``HOST:PORT`` means tcp), checked."""
    m = re.fullmatch(
        r"(?:(tcp|tls)://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})/?", text.strip()
    )
    if m is None or not 0 < int(m[3]) < 65536:
        raise ValueError(
            f"--dask {text!r} is not a Dask scheduler address: give tcp://HOST:PORT "
            f"({DEFAULT_PORT_HINT})"
        )
    return f"{m[1] or 'tcp'}://{m[2]}:{int(m[3])}"


@dataclass(frozen=True, slots=True)
class DaskCluster:
    """Where to run (a Dask scheduler's address) and how long to wait for what.

    ``connect_timeout`` bounds reaching the scheduler and its handshake (``None``:
    Dask's ``distributed.comm.timeouts.connect``); ``wait_workers`` is how long a
    scheduler may have no worker before the sweep gives up; ``timeout`` is how long the
    sweep may go without any run finishing, and ``on_timeout`` what happens then:
    ``"stop"`` (cancel what is outstanding and raise; the results log keeps every run
    done, so the same command resumes) or ``"wait"`` (tell ``notify`` which runs are
    outstanding where, and again after each further ``timeout``).
    """

    address: str
    connect_timeout: float | None = None
    wait_workers: float = 60.0
    timeout: float = 600.0
    on_timeout: Literal["stop", "wait"] = "stop"
    notify: Callable[[str], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "address", parse_address(self.address))
        for name in ("connect_timeout", "wait_workers", "timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name.replace('_', ' ')} must be > 0 seconds, got {value}")
        if self.on_timeout not in ("stop", "wait"):
            raise ValueError(f"on timeout: 'stop' or 'wait', not {self.on_timeout!r}")

    def seconds(self) -> float:
        """The connection timeout in seconds, Dask's configured one when not given."""
        if self.connect_timeout is not None:
            return self.connect_timeout
        import dask.config
        from dask.utils import parse_timedelta

        return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), "s"))


# -- reaching the scheduler ----------------------------------------------------------


async def _reach(address: str, timeout: float) -> None:
    """A TCP connection to the address within ``timeout``; a refused one is retried for
    :data:`REFUSED_GRACE` seconds at most (a scheduler just started), not longer."""
    loop = asyncio.get_running_loop()
    host, port = address.split("://", 1)[1].rsplit(":", 1)
    host = host.strip("[]")
    start = loop.time()
    delay = 0.05
    while True:
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(host, int(port)),
                max(start + timeout - loop.time(), 0.001),
            )
        except TimeoutError:
            raise DaskError(
                f"cannot reach the Dask scheduler at {address}: no answer within {timeout:g} s"
            ) from None
        except OSError as exc:
            if isinstance(exc, ConnectionRefusedError):
                if loop.time() + delay < start + min(timeout, REFUSED_GRACE):
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, 0.5)
                    continue
                why = "connection refused"
            elif isinstance(exc, socket.gaierror):
                why = f"unknown host {host!r}"
            else:
                why = exc.strerror or str(exc)
            raise DaskError(
                f"cannot reach the Dask scheduler at {address}: {why}; is it running there? "
                f"({DEFAULT_PORT_HINT})"
            ) from None
        writer.close()
        with suppress(OSError):
            await writer.wait_closed()
        return


async def _identify(address: str, timeout: float) -> None:
    """Dask's handshake and an ``identity`` call, each within ``timeout``."""
    from distributed.comm import connect
    from distributed.security import Security

    not_dask = (
        f"{address} accepts connections but does not answer as a Dask scheduler within "
        f"{timeout:g} s: is it another service, such as the scheduler's dashboard? "
        f"({DEFAULT_PORT_HINT})"
    )
    args = Security().get_connection_args("client")
    try:
        comm = await asyncio.wait_for(connect(address, timeout=timeout, **args), timeout)
    except Exception:  # a timeout, a closed connection or bytes that are not Dask's
        raise DaskError(not_dask) from None
    try:
        await comm.write({"op": "identity", "reply": True})
        info = await asyncio.wait_for(comm.read(), timeout)
    except Exception:
        raise DaskError(not_dask) from None
    finally:
        comm.abort()
    kind = info.get("type") if isinstance(info, dict) else None
    if kind != "Scheduler":
        raise DaskError(
            f"{address} is a Dask {kind or 'peer'}, not a scheduler: give the scheduler's "
            f"address ({DEFAULT_PORT_HINT})"
        )


async def open_client(cluster: DaskCluster) -> AsyncClient:
    """A client of the scheduler, started once the address is known to be one."""
    try:
        from distributed import Client
    except ImportError:
        raise DaskError("--dask needs dask.distributed: pip install 'elasticsite[dask]'") from None
    timeout = cluster.seconds()
    if cluster.address.startswith("tcp://"):
        await _reach(cluster.address, timeout)
    await _identify(cluster.address, timeout)
    client = Client(cluster.address, asynchronous=True, timeout=timeout, set_as_default=False)
    try:
        await asyncio.wait_for(client, timeout)
    except BaseException as exc:
        await close(client)
        if isinstance(exc, Exception):
            raise DaskError(
                f"the Dask scheduler at {cluster.address} refused a client: {exc}"
            ) from None
        raise
    return client


async def close(client: AsyncClient) -> None:
    """Close the client now (never at interpreter exit), whatever state it is in."""
    with suppress(Exception):
        await client.close(timeout=10)


# -- checking the workers --------------------------------------------------------------


async def worker_names(client: AsyncClient) -> dict[str, str]:
    """Each connected worker's address and its name (``--name``, else its address)."""
    info = await client.scheduler.identity()
    return {addr: str(w.get("name", addr)) for addr, w in info.get("workers", {}).items()}


def named(address: str, names: dict[str, str]) -> str:
    """A worker as a person knows it: its name, and its address when that differs."""
    name = names.get(address, address)
    return address if name == address else f"{name} ({address})"


async def wait_for_workers(client: AsyncClient, cluster: DaskCluster) -> None:
    """Return once a worker is connected; give up after ``cluster.wait_workers``."""
    try:
        await client.wait_for_workers(1, timeout=cluster.wait_workers)
    except TimeoutError:
        raise DaskError(
            f"the Dask scheduler at {cluster.address} has no worker after "
            f"{cluster.wait_workers:g} s: start one with `dask worker {cluster.address}` "
            "(it needs elasticsite installed), or wait longer with --dask-wait-workers"
        ) from None


_CHECK_TIME = 60.0
"""Seconds the scheduler and the workers have to answer the check (they import
elasticsite's simulator to answer)."""


def _make_probe() -> Callable[[Sequence[str]], tuple[bool, str]]:
    """The check run on the scheduler and every worker. Defined inside a function so
    that cloudpickle sends its code by value: it must run where elasticsite cannot be
    imported, and say so."""

    def probe(modules: Sequence[str]) -> tuple[bool, str]:
        import importlib

        try:
            for module in modules:
                importlib.import_module(module)
            return True, str(importlib.import_module("elasticsite").__version__)
        except Exception as exc:
            return False, f"{type(exc).__name__}: {exc}"

    return probe


def worker_problems(results: dict[str, Any], version: str, names: dict[str, str]) -> list[str]:
    """What is wrong with each worker, from what the probe returned on it (or the
    exception that kept it from running there)."""
    problems = []
    for addr, result in sorted(results.items()):
        if isinstance(result, BaseException):
            why = f"cannot run the check ({type(result).__name__}: {result}); same Python?"
        elif not result[0]:
            why = str(result[1])
        elif result[1] != version:
            why = f"has elasticsite {result[1]}, not {version}"
        else:
            continue
        problems.append(f"{named(addr, names)}: {why}")
    return problems


async def check_scheduler(
    client: AsyncClient, cluster: DaskCluster, modules: Sequence[str]
) -> None:
    """The scheduler imports ``modules`` and has this elasticsite's version: it unpacks
    every run it is sent, so it needs the package as much as the workers do."""
    import elasticsite

    version = elasticsite.__version__
    try:
        result = await asyncio.wait_for(
            client.run_on_scheduler(_make_probe(), list(modules)), _CHECK_TIME
        )
    except Exception as exc:  # its answer did not come, or the probe could not run there
        result = exc
    problems = worker_problems({cluster.address: result}, version, {})
    if problems:
        raise DaskError(
            f"the Dask scheduler at {problems[0]}; it unpacks every run, so it needs "
            f"pip install 'elasticsite[dask]=={version}' where it runs"
        )


async def check_workers(client: AsyncClient, cluster: DaskCluster, modules: Sequence[str]) -> None:
    """Every connected worker imports ``modules`` and has this elasticsite's version."""
    import elasticsite

    version = elasticsite.__version__
    try:
        results = await asyncio.wait_for(
            client.run(_make_probe(), list(modules), on_error="return"), _CHECK_TIME
        )
    except TimeoutError:
        raise DaskError(
            f"the Dask workers of {cluster.address} did not answer a check within "
            f"{_CHECK_TIME:g} s; see their logs"
        ) from None
    problems = worker_problems(results, version, await worker_names(client))
    if problems:
        raise DaskError(
            f"{len(problems)} of {len(results)} Dask workers of {cluster.address} cannot run "
            f"this sweep: {'; '.join(problems)}. Every worker needs "
            f"pip install 'elasticsite[dask]=={version}'"
        )
