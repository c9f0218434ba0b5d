"""What a client may hold of the server before it has sent a request: connection caps
and a deadline for each request's headers.

Thousands of agents keep long polls open on kept-alive connections, so the server
neither caps request concurrency nor cuts idle connections short. What it bounds is
what costs a client nothing: connections that never finish a TLS handshake or a
request's headers, and the number of connections one address, or everyone together,
may hold open.

* **Caps.** Every accepted TCP connection is first given to a :class:`_Gate`, which
  counts it in a :class:`ConnectionGuard` by client address before reading a byte; a
  connection over the total or the per-address cap is aborted at once and counted,
  with at most one log line a minute per address. A connection keeps its place in
  the counts, TLS handshake included, until its socket is closed.
* **Header deadline.** A connection has ``header_timeout`` seconds from its accept,
  TLS handshake included, to complete its first request's headers; on a kept-alive
  connection, from the first bytes of each later request to the end of that
  request's headers. The deadline is set once per request, never moved by the bytes
  that arrive, and cleared when the headers are complete, so a long poll is never cut.
  A client that misses it is disconnected.
* **Idle connections** between requests are closed by uvicorn after ``keep_alive``
  seconds.

The gate does what ``loop.create_server(ssl=...)`` does for every connection (wrap
the accepted transport in the event loop's own SSL protocol, the one class uvloop and
asyncio each use for their TLS servers) so that a connection is counted, and can be
refused, before its handshake, and the handshake is bounded by the header timeout.
After the handshake, or at once for plain HTTP, it hands the connection to uvicorn's
HTTP protocol, subclassed here only to keep the header deadline and to give the
connection's place back. Requests complete in one read are the common case on the
long-poll path, and cost no timer at all.

Written against uvicorn 0.54 (``HttpToolsProtocol``: ``connection_made``,
``connection_lost``, ``data_received``, ``on_message_begin``,
``on_headers_complete``, ``cycle.response_complete``; ``H11Protocol``:
``data_received``, ``conn.their_state``), uvloop 0.23 (``uvloop.loop.SSLProtocol``)
and Python 3.11's ``asyncio.sslproto.SSLProtocol``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = [
    "Acceptor",
    "ConnectionGuard",
    "ConnectionLimits",
    "GuardedH11Protocol",
    "GuardedHttpToolsProtocol",
    "LimitError",
    "tls_protocol_class",
]

log = logging.getLogger(__name__)

REPORT_EVERY = 60.0  # seconds between two log lines about refusals from one address
_MAX_REPORTS = 4096  # addresses whose last report is remembered


class LimitError(ValueError):
    """A setting out of range: ``field`` (the setting's name) and ``problem``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The server's limits on connections; every value is checked on creation.

    ``keep_alive`` is how long an idle connection is kept between requests: longer
    than agents wait between two polls, so that they reuse their connections.
    ``max_connections_per_address`` 0 means no per-address limit (agents behind one
    NAT address, benchmarks on the loopback).
    """

    header_timeout: float = 10.0
    keep_alive: int = 75
    max_connections: int = 16_384
    max_connections_per_address: int = 512

    def __post_init__(self) -> None:
        if not (math.isfinite(self.header_timeout) and self.header_timeout > 0):
            raise LimitError(
                "header_timeout",
                f"must be a positive number of seconds, not {self.header_timeout:g}",
            )
        if self.keep_alive < 1:
            raise LimitError("keep_alive", f"must be at least 1 second, not {self.keep_alive}")
        if self.max_connections < 1:
            raise LimitError("max_connections", f"must be at least 1, not {self.max_connections}")
        if self.max_connections_per_address < 0:
            raise LimitError(
                "max_connections_per_address",
                f"must be 0 (no limit) or more, not {self.max_connections_per_address}",
            )


class ConnectionGuard:
    """Open connections, overall and per client address, against their caps.

    ``refused``, ``header_timeouts`` and ``handshake_failures`` count what the server
    turned away or cut off since it started.
    """

    def __init__(self, max_connections: int, max_per_address: int) -> None:
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self.open = 0
        self.by_address: dict[str, int] = {}  # kept only with a per-address cap
        self.refused = 0
        self.header_timeouts = 0
        self.handshake_failures = 0
        self._reports: dict[str, list[float]] = {}  # key -> [last report, refused since]

    def admit(self, address: str) -> bool:
        """Count a new connection from ``address``; False (and counted, maybe logged)
        if it would go over a cap."""
        if self.open >= self.max_connections:
            self._refuse("", address, f"{self.open} connections are open (the server's limit)")
            return False
        cap = self.max_per_address
        if cap:
            held = self.by_address.get(address, 0)
            if held >= cap:
                self._refuse(
                    address, address, f"{held} are open from that address (the per-address limit)"
                )
                return False
            self.by_address[address] = held + 1
        self.open += 1
        return True

    def release(self, address: str) -> None:
        """A connection admitted from ``address`` is closed."""
        self.open -= 1
        if self.max_per_address:
            held = self.by_address.get(address, 1) - 1
            if held > 0:
                self.by_address[address] = held
            else:
                self.by_address.pop(address, None)

    def _refuse(self, key: str, address: str, why: str) -> None:
        """Count a refusal; log it unless ``key`` (an address, or "" for the total cap)
        was reported less than a minute ago, in which case the next report says how
        many more there were."""
        self.refused += 1
        now = time.monotonic()
        report = self._reports.get(key)
        if report is not None and now - report[0] < REPORT_EVERY:
            report[1] += 1
            return
        if report is None and len(self._reports) >= _MAX_REPORTS:
            for old in [k for k, (t, _) in self._reports.items() if now - t >= REPORT_EVERY]:
                del self._reports[old]
            if len(self._reports) >= _MAX_REPORTS:
                return  # counted; that many addresses at once are reported by the total
        more = int(report[1]) if report is not None else 0
        self._reports[key] = [now, 0]
        log.warning(
            "refused a connection from %s: %s%s",
            address,
            why,
            f"; {more} more refused since the last report" if more else "",
        )


def _peer_address(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return str(peer) if peer else "unknown"


def tls_protocol_class(loop: asyncio.AbstractEventLoop) -> Callable[..., asyncio.BaseProtocol]:
    """The SSL protocol class ``loop`` itself uses for TLS servers (uvloop's or asyncio's)."""
    if type(loop).__module__.partition(".")[0] == "uvloop":
        from uvloop.loop import SSLProtocol as UVSSLProtocol  # type: ignore[attr-defined]

        return cast(Callable[..., asyncio.BaseProtocol], UVSSLProtocol)
    from asyncio.sslproto import SSLProtocol

    return SSLProtocol


class Acceptor:
    """The listening socket's protocol factory: a :class:`_Gate` per accepted connection.

    ``make_protocol`` builds uvicorn's HTTP protocol for a connection (one of the
    guarded classes below); ``ssl`` is the server's TLS context, None for plain HTTP.
    Set ``closing`` when the server stops: connections that finish their handshake
    after that are closed instead of served.
    """

    def __init__(
        self,
        guard: ConnectionGuard,
        limits: ConnectionLimits,
        loop: asyncio.AbstractEventLoop,
        make_protocol: Callable[[], _HeaderDeadline],
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        self.guard = guard
        self.header_timeout = limits.header_timeout
        self.loop = loop
        self.make_protocol = make_protocol
        self.ssl = ssl_context
        self.tls_protocol = tls_protocol_class(loop) if ssl_context is not None else None
        self.closing = False

    def __call__(self) -> _Gate:
        return _Gate(self)


class _Gate(asyncio.Protocol):
    """One accepted connection: admitted or refused, then through its TLS handshake (as
    the TLS layer's application protocol), then handed to the HTTP protocol. Also the
    connection's place in the guard's counts, given back once, by whichever protocol
    sees the connection end."""

    __slots__ = ("_acceptor", "_address", "_deadline", "_in_tls")

    def __init__(self, acceptor: Acceptor) -> None:
        self._acceptor = acceptor
        self._address: str | None = None
        self._deadline = 0.0
        self._in_tls = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)
        if self._in_tls:  # the TLS layer: the handshake is complete
            self._hand_over(transport)
            return
        acceptor = self._acceptor
        address = _peer_address(transport)
        if acceptor.closing or not acceptor.guard.admit(address):
            transport.abort()
            return
        self._address = address
        self._deadline = acceptor.loop.time() + acceptor.header_timeout
        if acceptor.tls_protocol is None:
            self._hand_over(transport)
            return
        # What the event loop does for create_server(ssl=...), with the handshake (and
        # the wait for a closing client's close_notify) bounded by the header timeout.
        self._in_tls = True
        waiter = acceptor.loop.create_future()
        waiter.add_done_callback(self._handshake_done)
        tls = acceptor.tls_protocol(
            acceptor.loop,
            self,
            acceptor.ssl,
            waiter,
            server_side=True,
            ssl_handshake_timeout=acceptor.header_timeout,
            ssl_shutdown_timeout=acceptor.header_timeout,
        )
        transport.set_protocol(tls)
        tls.connection_made(transport)

    def _hand_over(self, transport: asyncio.Transport) -> None:
        acceptor = self._acceptor
        if acceptor.closing:
            transport.abort()
            return
        protocol = acceptor.make_protocol()
        protocol.attach(self, self._deadline, acceptor.header_timeout)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)

    def _handshake_done(self, waiter: asyncio.Future[None]) -> None:
        if waiter.cancelled() or waiter.exception() is not None:
            self._acceptor.guard.handshake_failures += 1
            self.release()

    def connection_lost(self, exc: Exception | None) -> None:
        self.release()

    def release(self) -> None:
        """Give the connection's place back (once)."""
        if self._address is not None:
            self._acceptor.guard.release(self._address)
            self._address = None

    def headers_overdue(self, client: tuple[str, int] | None) -> None:
        """Count (and log at debug level) a connection closed for slow headers."""
        self._acceptor.guard.header_timeouts += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "closed a connection from %s: no complete request headers within %g s",
                client[0] if client else self._address,
                self._acceptor.header_timeout,
            )


class _HeaderDeadline(asyncio.Protocol):
    """The header deadline and the connection's place, shared by both HTTP protocols.

    The deadline of the first request runs from the connection's accept; later ones
    are started by each protocol's ``data_received``.
    """

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    client: tuple[str, int] | None

    _slot: _Gate | None = None
    _first_deadline: float | None = None
    _header_timeout = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def attach(self, slot: _Gate, deadline: float, header_timeout: float) -> None:
        """Before ``connection_made``: the connection's place and first deadline."""
        self._slot = slot
        self._first_deadline = deadline
        self._header_timeout = header_timeout

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        deadline = self._first_deadline
        if deadline is None:
            deadline = self.loop.time() + self._header_timeout
        self._header_timer = self.loop.call_at(deadline, self._headers_overdue)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        try:
            super().connection_lost(exc)
        finally:
            if self._slot is not None:
                self._slot.release()
                self._slot = None

    def _start_header_clock(self) -> None:
        if not self.transport.is_closing():
            self._header_timer = self.loop.call_later(self._header_timeout, self._headers_overdue)

    def _stop_header_clock(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_overdue(self) -> None:
        self._header_timer = None
        if self._slot is not None:
            self._slot.headers_overdue(self.client)
        self.transport.abort()  # nothing to flush; no TLS goodbye to wait for


class GuardedHttpToolsProtocol(_HeaderDeadline, HttpToolsProtocol):
    """uvicorn's httptools protocol with the header deadline.

    A request's clock starts at ``on_message_begin`` or, between requests, at any
    byte (stray line ends included), unless that same read completes the headers; it
    stops at ``on_headers_complete``.
    """

    _awaiting_headers = False

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._header_timer is None and (
            self._awaiting_headers or (cycle := self.cycle) is None or cycle.response_complete
        ):
            self._start_header_clock()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._awaiting_headers = True

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        if self._header_timer is not None:
            self._stop_header_clock()
        super().on_headers_complete()


class GuardedH11Protocol(_HeaderDeadline, H11Protocol):
    """uvicorn's h11 protocol with the header deadline: while the client's side of the
    connection is idle after a read, a request has begun and not yet been parsed."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:
            if self._header_timer is None:
                self._start_header_clock()
        elif self._header_timer is not None:
            self._stop_header_clock()
