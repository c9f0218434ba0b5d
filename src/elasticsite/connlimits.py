"""What a client may hold of the server before its request is complete: connection
caps, a deadline for each request's headers and one for its body.

Thousands of agents keep long polls open on kept-alive connections, so the server
neither caps request concurrency nor cuts idle connections short. What it bounds is
what costs a client nothing: connections that never finish a TLS handshake, a
request's headers or its body, and the number of connections one address, or everyone
together, may hold open.

* **Caps.** Every accepted TCP connection is first given to a :class:`_Gate`, which
  counts it in a :class:`ConnectionGuard` by client before reading a byte; a
  connection over the total or the per-client cap is aborted at once and counted,
  with at most one log line a minute per client. A client is an IPv4 address, or an
  IPv6 /64 (what one subscriber is usually given, so one host cannot take a new
  address per connection); an IPv4-mapped IPv6 address counts as its IPv4 address.
  A connection keeps its place in the counts, TLS handshake included, until its
  socket is closed.
* **Header deadline.** A connection has ``header_timeout`` seconds from its accept,
  TLS handshake included, to complete its first request's headers; on a kept-alive
  connection, from the first bytes of each later request to the end of that
  request's headers. The deadline is set once per request, never moved by the bytes
  that arrive, and cleared when the headers are complete, so a long poll is never cut.
  A client that misses it is disconnected.
* **Body deadline.** From the end of a request's headers, its whole body has
  ``body_timeout`` seconds to arrive, however it trickles in. A client that misses it
  is answered ``408`` (if nothing was answered yet) and disconnected; the application
  sees the client gone. A pipelined request's clock starts when it is served.
* **Idle connections** between requests are closed by uvicorn after ``keep_alive``
  seconds.

The gate does what ``loop.create_server(ssl=...)`` does for every connection (wrap
the accepted transport in the event loop's own SSL protocol, the one class uvloop and
asyncio each use for their TLS servers) so that a connection is counted, and can be
refused, before its handshake, and the handshake is bounded by the header timeout.
After the handshake, or at once for plain HTTP, it hands the connection to uvicorn's
HTTP protocol as :mod:`elasticsite.httpdeadlines` subclasses it, which keeps the
deadlines and gives the connection's place back.

Written against uvloop 0.23 (``uvloop.loop.SSLProtocol``) and Python 3.11's
``asyncio.sslproto.SSLProtocol``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

if TYPE_CHECKING:
    from elasticsite.httpdeadlines import Deadlines

__all__ = [
    "Acceptor",
    "ConnectionGuard",
    "ConnectionLimits",
    "LimitError",
    "client_key",
    "tls_protocol_class",
]

log = logging.getLogger(__name__)

REPORT_EVERY = 60.0  # seconds between two log lines about refusals from one client
_MAX_REPORTS = 4096  # clients whose last report is remembered


class LimitError(ValueError):
    """A setting out of range: ``field`` (the setting's name) and ``problem``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


def _positive_seconds(field: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise LimitError(field, f"must be a positive number of seconds, not {value:g}")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The server's limits on connections; every value is checked on creation.

    ``keep_alive`` is how long an idle connection is kept between requests: longer
    than agents wait between two polls, so that they reuse their connections.
    ``max_connections_per_address`` 0 means no per-client limit (agents behind one
    NAT address, benchmarks on the loopback).
    """

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive: int = 75
    max_connections: int = 16_384
    max_connections_per_address: int = 512

    def __post_init__(self) -> None:
        _positive_seconds("header_timeout", self.header_timeout)
        _positive_seconds("body_timeout", self.body_timeout)
        if self.keep_alive < 1:
            raise LimitError("keep_alive", f"must be at least 1 second, not {self.keep_alive}")
        if self.max_connections < 1:
            raise LimitError("max_connections", f"must be at least 1, not {self.max_connections}")
        if self.max_connections_per_address < 0:
            raise LimitError(
                "max_connections_per_address",
                f"must be 0 (no limit) or more, not {self.max_connections_per_address}",
            )


def client_key(address: str) -> str:
    """What the per-client cap counts a connection from ``address`` under: an IPv4
    address as it is, an IPv6 address by its /64 (``2001:db8:1:2::/64``), an
    IPv4-mapped IPv6 address (``::ffff:192.0.2.7``) as its IPv4 address."""
    if ":" not in address:
        return address
    try:
        ip = ipaddress.IPv6Address(address.partition("%")[0])  # no zone: fe80::1%eth0
    except ValueError:
        return address
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return f"{ipaddress.IPv6Address(int(ip) >> 64 << 64)}/64"


class ConnectionGuard:
    """Open connections, overall and per client, against their caps.

    ``refused``, ``header_timeouts``, ``body_timeouts`` and ``handshake_failures``
    count what the server turned away or cut off since it started.
    """

    def __init__(self, max_connections: int, max_per_address: int) -> None:
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self.open = 0
        self.by_address: dict[str, int] = {}  # kept only with a per-client cap
        self.refused = 0
        self.header_timeouts = 0
        self.body_timeouts = 0
        self.handshake_failures = 0
        self._reports: dict[str, list[float]] = {}  # key -> [last report, refused since]

    def key(self, address: str) -> str:
        """The name a connection from ``address`` is counted under (:func:`client_key`
        with a per-client cap; the address itself without one)."""
        return client_key(address) if self.max_per_address else address

    def admit(self, key: str) -> bool:
        """Count a new connection from client ``key``; False (and counted, maybe
        logged) if it would go over a cap."""
        if self.open >= self.max_connections:
            self._refuse("", key, f"{self.open} connections are open (the server's limit)")
            return False
        cap = self.max_per_address
        if cap:
            held = self.by_address.get(key, 0)
            if held >= cap:
                self._refuse(key, key, f"{held} are open from there (the per-address limit)")
                return False
            self.by_address[key] = held + 1
        self.open += 1
        return True

    def release(self, key: str) -> None:
        """A connection admitted from client ``key`` is closed."""
        self.open -= 1
        if self.max_per_address:
            held = self.by_address.get(key, 1) - 1
            if held > 0:
                self.by_address[key] = held
            else:
                self.by_address.pop(key, None)

    def _refuse(self, key: str, client: str, why: str) -> None:
        """Count a refusal; log it unless ``key`` (a client, or "" for the total cap)
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
                return  # counted; that many clients at once are reported by the total
        more = int(report[1]) if report is not None else 0
        self._reports[key] = [now, 0]
        log.warning(
            "refused a connection from %s: %s%s",
            client,
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
    guarded classes of :mod:`elasticsite.httpdeadlines`); ``ssl`` is the server's TLS
    context, None for plain HTTP. Set ``closing`` when the server stops: connections
    that finish their handshake after that are closed instead of served.
    """

    def __init__(
        self,
        guard: ConnectionGuard,
        limits: ConnectionLimits,
        loop: asyncio.AbstractEventLoop,
        make_protocol: Callable[[], Deadlines],
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        self.guard = guard
        self.limits = limits
        self.header_timeout = limits.header_timeout
        self.loop = loop
        self.make_protocol = make_protocol
        self.ssl = ssl_context
        self.tls_protocol = tls_protocol_class(loop) if ssl_context is not None else None
        self.closing = False
        detail = b'{"detail":"the request body did not arrive within %g s"}' % limits.body_timeout
        self.request_timeout = (
            b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(detail), detail)
        )

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
        self._address: str | None = None  # the client's key in the guard's counts
        self._deadline = 0.0
        self._in_tls = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)
        if self._in_tls:  # the TLS layer: the handshake is complete
            self._hand_over(transport)
            return
        acceptor = self._acceptor
        key = acceptor.guard.key(_peer_address(transport))
        if acceptor.closing or not acceptor.guard.admit(key):
            transport.abort()
            return
        self._address = key
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
        protocol.attach(self, self._deadline, acceptor.limits, acceptor.request_timeout)
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

    def overdue(self, part: Literal["headers", "body"], client: tuple[str, int] | None) -> None:
        """Count (and log at debug level) a connection cut for slow headers or body."""
        limits = self._acceptor.limits
        if part == "headers":
            self._acceptor.guard.header_timeouts += 1
            limit, what = limits.header_timeout, "complete request headers"
        else:
            self._acceptor.guard.body_timeouts += 1
            limit, what = limits.body_timeout, "complete request body"
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "closed a connection from %s: no %s within %g s",
                client[0] if client else self._address,
                what,
                limit,
            )
