"""The ASGI middleware in front of the broker's routes.

:class:`BodyLimit` refuses oversized request bodies before anything parses them;
:class:`UpdatesFastPath` answers the long polls of thousands of agents beneath
FastAPI's routing, with the same answer the route would give
(:meth:`elasticsite.context.broker.Broker.updates`).
"""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from elasticsite.context.broker import MAX_WAIT, Broker
from elasticsite.context.models import MAX_BODY

__all__ = ["BodyLimit", "UpdatesFastPath"]


class BodyLimit:
    """ASGI middleware: refuse bodies over ``max_body`` bytes with 413 before any parsing.

    Reads the (small) body itself and hands it on in one piece.
    """

    def __init__(self, app: ASGIApp, max_body: int = MAX_BODY) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = f"the request body exceeds {self.max_body} bytes"
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await _reject(send, 400, "the Content-Length header is not a number")
                    return
                if declared > self.max_body:
                    # Read (and drop) a moderately large body so the client, still sending,
                    # gets the 413 rather than a reset connection; refuse huge ones at once.
                    drained = declared <= _DRAIN and await _drain(receive)
                    await _reject(send, 413, too_big, close=not drained)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                more = message.get("more_body", False)
                drained = await _drain(receive, size) if more else True
                await _reject(send, 413, too_big, close=not drained)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


_DRAIN = 1024 * 1024
"""Largest oversized body read and dropped before answering 413 (bytes)."""


async def _drain(receive: Receive, already: int = 0) -> bool:
    """Read the rest of a request body up to ``_DRAIN`` bytes; False if it was longer
    or the client went away (then the connection is closed after the answer)."""
    size = already
    while size <= _DRAIN:
        message = await receive()
        if message["type"] == "http.disconnect":
            return False
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            return True
    return False


async def _reject(send: Send, status: int, detail: str, *, close: bool = True) -> None:
    body = JSONResponse({"detail": detail}).body
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class UpdatesFastPath:
    """ASGI middleware answering well-formed, authorised ``GET /ctx/{id}/updates``
    requests directly, beneath FastAPI's routing and parameter machinery.

    Thousands of agents wait in these requests and are answered at once, so each
    answer must cost little more than sending cached bytes. Anything unusual (a bad
    query, wrong credentials, ``since`` ahead) falls through to the documented route,
    which gives the contract's error answers; the behaviour is the same either way.
    """

    def __init__(self, app: ASGIApp, broker: Broker) -> None:
        self.app = app
        self.broker = broker

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            path: str = scope["path"]
            if path.startswith("/ctx/") and path.endswith("/updates"):
                cid = path[5:-8]
                if "/" not in cid and await self._answer(cid, scope, send):
                    return
        await self.app(scope, receive, send)

    async def _answer(self, cid: str, scope: Scope, send: Send) -> bool:
        query = _simple_query(scope.get("query_string", b""))
        if query is None:
            return False
        since, wait = query
        header: str | None = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        ctx = self.broker.auth.reader(cid, header)
        if ctx is None or since > ctx.last_id:
            return False
        body = await self.broker.updates(ctx, since, wait)
        if body is None:
            return False  # deleted meanwhile: the route answers 401
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(body)),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
        return True


def _simple_query(raw: bytes) -> tuple[int, float] | None:
    """``(since, wait)`` from a plain ``since=N[&wait=T]`` query, or None if unusual."""
    since: int | None = None
    wait = 0.0
    for part in raw.split(b"&"):
        name, _, value = part.partition(b"=")
        if name == b"since" and since is None and value.isdigit() and len(value) < 19:
            since = int(value)
        elif name == b"wait" and 0 < len(value) < 24:
            try:
                wait = float(value)
            except ValueError:
                return None
            if not 0 <= wait <= MAX_WAIT:  # also refuses nan
                return None
        else:
            return None
    return None if since is None else (since, wait)
