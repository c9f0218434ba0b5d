"""uvicorn's HTTP protocols with a deadline for each request's headers and one for
its body, and the connection's place in the caps given back when it closes
(:mod:`elasticsite.connlimits` says what each limit is).

A request's header clock is set once, never moved by the bytes that arrive, and
stopped when its headers are complete; its body clock likewise from the end of its
headers to the end of its body. Requests complete in one read (headers and body) are
the common case on the long-poll path, and cost no timer at all. A client whose body
is late is answered ``408`` (if nothing was answered yet) and disconnected, and the
application waiting for the body sees the client gone.

Written against uvicorn 0.54 (``HttpToolsProtocol``: ``connection_made``,
``connection_lost``, ``data_received``, ``on_message_begin``,
``on_headers_complete``, ``on_message_complete``, ``on_response_complete``,
``pipeline``, ``cycle`` with ``response_complete``, ``response_started``,
``disconnected`` and ``message_event``; ``H11Protocol``: the same ``cycle``,
``data_received``, ``on_response_complete``, ``conn.their_state``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

if TYPE_CHECKING:
    from elasticsite.connlimits import ConnectionLimits

__all__ = ["Deadlines", "GuardedH11Protocol", "GuardedHttpToolsProtocol", "Slot"]


class Slot(Protocol):
    """A connection's place in the caps (:class:`elasticsite.connlimits.Acceptor`'s
    gate): given back once, told when a deadline cut the connection."""

    def release(self) -> None: ...

    def overdue(self, part: Literal["headers", "body"], client: tuple[str, int] | None) -> None: ...


class _Clock:
    """One deadline of a connection: started, stopped, and its ``expired`` called if it
    passes first. Only a running clock refers to the connection (through its timer),
    so a connection and its clocks make no lasting reference cycle."""

    __slots__ = ("_timer",)

    def __init__(self) -> None:
        self._timer: asyncio.TimerHandle | None = None

    @property
    def running(self) -> bool:
        return self._timer is not None

    def start_at(
        self, loop: asyncio.AbstractEventLoop, when: float, expired: Callable[[], None]
    ) -> None:
        self._timer = loop.call_at(when, self._expire, expired)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, expired: Callable[[], None]) -> None:
        self._timer = None
        expired()


class Deadlines(asyncio.Protocol):
    """The header and body deadlines and the connection's place, shared by both HTTP
    protocols.

    The header deadline of the first request runs from the connection's accept; later
    ones are started by each protocol's ``data_received``. A body deadline is started
    after a read (or after a response, for a pipelined request) that leaves the served
    request's body incomplete, and stopped when the body is complete.
    """

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    client: tuple[str, int] | None
    cycle: Any  # uvicorn's request-response cycle of the request being served

    _slot: Slot | None = None
    _first_deadline: float | None = None
    _header_timeout = 10.0
    _body_timeout = 30.0
    _request_timeout = b""
    _headers: _Clock
    _body: _Clock
    _cut_timer: asyncio.TimerHandle | None = None

    def attach(
        self, slot: Slot, deadline: float, limits: ConnectionLimits, request_timeout: bytes
    ) -> None:
        """Before ``connection_made``: the connection's place, its first deadline, the
        limits and the 408 answer to send when a body is late."""
        self._slot = slot
        self._first_deadline = deadline
        self._header_timeout = limits.header_timeout
        self._body_timeout = limits.body_timeout
        self._request_timeout = request_timeout

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._headers, self._body = _Clock(), _Clock()
        super().connection_made(transport)
        deadline = self._first_deadline
        if deadline is None:
            deadline = self.loop.time() + self._header_timeout
        self._headers.start_at(self.loop, deadline, self._headers_overdue)

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers.stop()
        self._body.stop()
        if self._cut_timer is not None:
            self._cut_timer.cancel()
        try:
            super().connection_lost(exc)
        finally:
            if self._slot is not None:
                self._slot.release()
                self._slot = None

    def _start_header_clock(self) -> None:
        if not self.transport.is_closing():
            when = self.loop.time() + self._header_timeout
            self._headers.start_at(self.loop, when, self._headers_overdue)

    def _start_body_clock(self) -> None:
        if not self._body.running and not self.transport.is_closing():
            when = self.loop.time() + self._body_timeout
            self._body.start_at(self.loop, when, self._body_overdue)

    def _headers_overdue(self) -> None:
        if self._slot is not None:
            self._slot.overdue("headers", self.client)
        self.transport.abort()  # nothing to flush; no TLS goodbye to wait for

    def _body_overdue(self) -> None:
        if self._slot is not None:
            self._slot.overdue("body", self.client)
        cycle = self.cycle
        if cycle is None or cycle.response_started or self.transport.is_closing():
            self.transport.abort()
            return
        # The application waiting for the rest of the body sees the client gone, and
        # whatever it still sends goes nowhere (as when uvicorn loses a connection).
        cycle.disconnected = True
        cycle.message_event.set()
        self.transport.write(self._request_timeout)
        self.transport.close()
        # A client that does not read its 408 does not keep the connection either.
        self._cut_timer = self.loop.call_later(self._header_timeout, self.transport.abort)


class GuardedHttpToolsProtocol(Deadlines, HttpToolsProtocol):
    """uvicorn's httptools protocol with the header and body deadlines.

    A request's header clock starts at ``on_message_begin`` or, between requests, at
    any byte (stray line ends included), unless that same read completes the headers;
    it stops at ``on_headers_complete``. Its body clock starts after a read that leaves
    its body incomplete (if it is being served, not waiting behind a pipelined one)
    and stops at ``on_message_complete``.
    """

    _awaiting_headers = False
    _awaiting_body = False

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._headers.running and (
            self._awaiting_headers or (cycle := self.cycle) is None or cycle.response_complete
        ):
            self._start_header_clock()
        if self._awaiting_body and not self._body.running and not self.pipeline:
            self._start_body_clock()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._awaiting_headers = True

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._headers.stop()
        super().on_headers_complete()
        self._awaiting_body = True

    def on_message_complete(self) -> None:
        self._awaiting_body = False
        self._body.stop()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._awaiting_body and not self._body.running and not self.pipeline:
            self._start_body_clock()  # a pipelined request, now served, still sending


class GuardedH11Protocol(Deadlines, H11Protocol):
    """uvicorn's h11 protocol with the header and body deadlines: while the client's
    side of the connection is idle after a read, a request has begun and not yet been
    parsed; while it sends a body, the body clock runs."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.IDLE:
            if not self._headers.running:
                self._start_header_clock()
        else:
            self._headers.stop()
        self._check_body_clock(state)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._check_body_clock(self.conn.their_state)  # a pipelined request, now served

    def _check_body_clock(self, state: object) -> None:
        if state is h11.SEND_BODY:
            self._start_body_clock()
        else:
            self._body.stop()
