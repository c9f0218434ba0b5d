"""The recontextualization broker: the HTTP contract of docs/recontext-api.md.

:class:`Broker` holds the store, the admin token's digest and the long-poll waiters;
:func:`build_router` turns it into a FastAPI router, :func:`install` adds that router
and the contract's error answers to an application (``elasticsite.server`` builds the
project's one application around it).

Long polls wait on an in-memory future per request, registered in a per-context set
and all resolved at once when the context changes; nothing polls the database.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
import os
import stat
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from elasticsite.context.models import (
    MAX_BODY,
    ContextCreate,
    ContextCreated,
    ContextSummary,
    EntryRef,
    ErrorBody,
    JoinResult,
    Members,
    NodeIn,
    SinceAhead,
    Updates,
)
from elasticsite.context.store import ContextState, Store, digest, new_secret

__all__ = [
    "BodyLimit",
    "Broker",
    "BrokerError",
    "UpdatesFastPath",
    "build_router",
    "install",
    "load_admin_token",
]

log = logging.getLogger(__name__)

MAX_WAIT = 60.0
"""Longest long poll a caller may ask for (seconds)."""

TOKEN_ENV = "ELASTICSITE_BROKER_TOKEN"
TOKEN_FILE = "admin.token"
_MIN_TOKEN = 16

Role = Literal["admin", "context", "node"]


class BrokerError(Exception):
    """The broker cannot start as configured (message says what to change)."""


def load_admin_token(state_dir: Path, token_file: Path | None = None) -> tuple[str, str]:
    """The admin token and a description of where it came from (never the token).

    Order: ``token_file``, then ``$ELASTICSITE_BROKER_TOKEN``, then ``admin.token`` in
    the state directory, generated (mode 0600) when absent.
    """
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise BrokerError(f"cannot read admin token file {token_file}: {exc}") from None
        source = str(token_file)
    elif os.environ.get(TOKEN_ENV):
        token, source = os.environ[TOKEN_ENV].strip(), f"${TOKEN_ENV}"
    else:
        path = state_dir / TOKEN_FILE
        state_dir.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
            with os.fdopen(fd, "w") as f:
                f.write(new_secret() + "\n")
        token, source = path.read_text().strip(), str(path)
    if len(token) < _MIN_TOKEN:
        raise BrokerError(
            f"the admin token from {source} has {len(token)} characters; "
            f"use at least {_MIN_TOKEN} random ones"
        )
    return token, source


def _unauthorized(scheme: str) -> HTTPException:
    return HTTPException(401, "invalid or missing credentials", {"WWW-Authenticate": scheme})


_BASIC = 'Basic realm="elasticsite"'
_BEARER = 'Bearer realm="elasticsite"'
_JSON = "application/json"


class Broker:
    """Contexts, their credentials and their waiting long polls."""

    def __init__(self, store: Store, admin_token: str, *, public_url: str | None = None) -> None:
        self.store = store
        self._admin = digest(admin_token)
        self.public_url = public_url.rstrip("/") if public_url else None
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}

    # --- credentials --------------------------------------------------------------

    @staticmethod
    def _authorization(request: Request) -> tuple[str, str, str] | None:
        """``(scheme, user, secret)`` from the Authorization header, or None."""
        return parse_authorization(request.headers.get("authorization"))

    def reader(self, cid: str, header: str | None) -> ContextState | None:
        """The context, if ``header`` holds its key and secret or a member's credential."""
        ctx = self.store.contexts.get(cid)
        cred = parse_authorization(header)
        if ctx is None or cred is None or cred[0] != "basic":
            return None
        _, user, secret = cred
        if user in ctx.members:
            return ctx if ctx.check_node(user, secret) else None
        return ctx if ctx.check_context(user, secret) else None

    def is_admin(self, request: Request) -> bool:
        cred = self._authorization(request)
        return (
            cred is not None
            and cred[0] == "bearer"
            and hmac.compare_digest(digest(cred[2]), self._admin)
        )

    def admin(self, request: Request) -> None:
        if not self.is_admin(request):
            raise _unauthorized(_BEARER)

    def admin_context(self, request: Request, cid: str) -> ContextState:
        self.admin(request)
        ctx = self.store.contexts.get(cid)
        if ctx is None:
            raise HTTPException(404, f"no context {cid}")
        return ctx

    def caller(
        self, request: Request, cid: str, allowed: tuple[Role, ...]
    ) -> tuple[ContextState | None, Role, str]:
        """Who is asking about context ``cid``: ``(context, role, node id)``.

        Raises 401 unless the caller is one of ``allowed``; the context is None only
        for an admin asking about a context that does not exist.
        """
        cred = self._authorization(request)
        if cred is None:
            raise _unauthorized(_BASIC)
        scheme, user, secret = cred
        ctx = self.store.contexts.get(cid)
        if scheme == "bearer":
            if "admin" in allowed and hmac.compare_digest(digest(secret), self._admin):
                return ctx, "admin", ""
            raise _unauthorized(_BEARER)
        if ctx is not None:
            if user in ctx.members:
                if "node" in allowed and ctx.check_node(user, secret):
                    return ctx, "node", user
            elif "context" in allowed and ctx.check_context(user, secret):
                return ctx, "context", ""
        raise _unauthorized(_BASIC)

    def uri(self, request: Request, cid: str) -> str:
        base = self.public_url or str(request.base_url).rstrip("/")
        return f"{base}/ctx/{cid}"

    # --- long polls ---------------------------------------------------------------

    def notify(self, cid: str) -> None:
        """Wake every long poll waiting on context ``cid``."""
        waiters = self._waiters.pop(cid, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait(self, cid: str, timeout: float) -> None:
        """Return when context ``cid`` changes or after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        waiters = self._waiters.setdefault(cid, set())
        waiters.add(fut)
        timer = loop.call_later(timeout, _resolve, fut)
        try:
            await fut
        finally:
            timer.cancel()
            waiters.discard(fut)

    def wake_all(self) -> None:
        """Answer every waiting long poll now (the server is shutting down)."""
        for cid in list(self._waiters):
            self.notify(cid)


def parse_authorization(header: str | None) -> tuple[str, str, str] | None:
    """``(scheme, user, secret)`` from an Authorization header (Basic or Bearer), or None."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        return "bearer", "", value.strip()
    if scheme != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, secret = decoded.partition(":")
    return ("basic", user, secret) if sep else None


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _summary(broker: Broker, request: Request, ctx: ContextState) -> ContextSummary:
    return ContextSummary(
        id=ctx.id,
        name=ctx.name,
        uri=broker.uri(request, ctx.id),
        created_at=ctx.created_at,
        members=len(ctx.members),
        last_id=ctx.last_id,
    )


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or wrong credentials"},
    422: {"model": ErrorBody, "description": "Invalid fields"},
}
_ADMIN_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    404: {"model": ErrorBody, "description": "No such context or node"},
}


def build_router(broker: Broker) -> APIRouter:
    """The broker's routes, bound to ``broker``."""
    router = APIRouter()
    store = broker.store

    @router.get("/healthz", tags=["broker"])
    async def healthz() -> dict[str, str]:
        """Liveness, without credentials."""
        return {"status": "ok"}

    @router.post("/ctx", status_code=201, responses=_ERRORS, tags=["contexts"])
    async def create_context(body: ContextCreate, request: Request) -> ContextCreated:
        """Create a context; its key and secret are shown only in this answer."""
        broker.admin(request)
        ctx, key, secret = store.create_context(body.name)
        log.info("created context %s (%s)", ctx.id, ctx.name or "no name")
        return ContextCreated(
            id=ctx.id, name=ctx.name, uri=broker.uri(request, ctx.id), key=key, secret=secret
        )

    @router.get("/ctx", responses=_ERRORS, tags=["contexts"])
    async def list_contexts(request: Request) -> list[ContextSummary]:
        """Every context, oldest first."""
        broker.admin(request)
        ordered = sorted(store.contexts.values(), key=lambda c: c.created_at)
        return [_summary(broker, request, c) for c in ordered]

    @router.get("/ctx/{cid}", responses=_ADMIN_ERRORS, tags=["contexts"])
    async def show_context(cid: str, request: Request) -> ContextSummary:
        """One context."""
        return _summary(broker, request, broker.admin_context(request, cid))

    @router.delete("/ctx/{cid}", status_code=204, responses=_ADMIN_ERRORS, tags=["contexts"])
    async def delete_context(cid: str, request: Request) -> Response:
        """Delete a context, its nodes and its entries; its credentials stop working."""
        broker.admin_context(request, cid)
        store.delete_context(cid)
        broker.notify(cid)
        log.info("deleted context %s", cid)
        return Response(status_code=204)

    @router.post("/ctx/{cid}/nodes", status_code=201, responses=_ERRORS, tags=["nodes"])
    async def join(cid: str, body: NodeIn, request: Request) -> JoinResult:
        """Join with the context's key and secret; the answer holds the node's credential."""
        ctx, _, _ = broker.caller(request, cid, ("context",))
        assert ctx is not None
        node_id, node_secret, entry_id = store.join(ctx, body)
        broker.notify(cid)
        log.info("context %s: %s joined as node %s", cid, body.hostname, node_id)
        return JoinResult(node_id=node_id, node_secret=node_secret, entry_id=entry_id)

    @router.put("/ctx/{cid}/nodes/{node_id}", responses=_ADMIN_ERRORS, tags=["nodes"])
    async def update_node(cid: str, node_id: str, body: NodeIn, request: Request) -> EntryRef:
        """A node replaces its own record (recorded as a leave and a join)."""
        ctx = _node_itself(broker, request, cid, node_id)
        entry_id = store.update(ctx, node_id, body)
        broker.notify(cid)
        log.info("context %s: node %s updated as %s", cid, node_id, body.hostname)
        return EntryRef(entry_id=entry_id)

    @router.delete("/ctx/{cid}/nodes/{node_id}", responses=_ADMIN_ERRORS, tags=["nodes"])
    async def remove_node(cid: str, node_id: str, request: Request) -> EntryRef:
        """A node leaves, or an administrator removes it."""
        if broker.is_admin(request):
            ctx = broker.admin_context(request, cid)
            member = ctx.members.get(node_id)
            if member is None:
                raise HTTPException(404, f"no current member {node_id} in context {cid}")
        else:
            ctx = _node_itself(broker, request, cid, node_id)
            member = ctx.members[node_id]
        entry_id = store.leave(ctx, [member])
        broker.notify(cid)
        log.info("context %s: node %s left", cid, node_id)
        return EntryRef(entry_id=entry_id)

    @router.delete("/ctx/{cid}/hosts/{short_hostname}", responses=_ADMIN_ERRORS, tags=["nodes"])
    async def remove_host(cid: str, short_hostname: str, request: Request) -> EntryRef:
        """An administrator removes the current member(s) with this short hostname."""
        ctx = broker.admin_context(request, cid)
        gone = [m for m in ctx.members.values() if m.short_hostname == short_hostname]
        if not gone:
            raise HTTPException(404, f"no current member named {short_hostname} in {cid}")
        entry_id = store.leave(ctx, gone)
        broker.notify(cid)
        log.info("context %s: host %s removed", cid, short_hostname)
        return EntryRef(entry_id=entry_id)

    @router.get(
        "/ctx/{cid}/members",
        responses={**_ADMIN_ERRORS, 200: {"model": Members}},
        response_class=Response,
        tags=["nodes"],
    )
    async def members(cid: str, request: Request) -> Response:
        """Current members in join order."""
        ctx, _, _ = broker.caller(request, cid, ("admin", "context", "node"))
        if ctx is None:
            raise HTTPException(404, f"no context {cid}")
        return Response(ctx.members_body(), media_type=_JSON)

    @router.get(
        "/ctx/{cid}/updates",
        responses={
            **_ERRORS,
            200: {"model": Updates},
            409: {"model": SinceAhead, "description": "since is ahead of the context"},
        },
        response_class=Response,
        tags=["nodes"],
    )
    async def updates(
        cid: str,
        request: Request,
        since: Annotated[int, Query(ge=0, description="id of the last entry applied")],
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT, description="long poll, s")] = 0,
    ) -> Response:
        """Entries after ``since``, or a snapshot of the members; waits up to ``wait`` s."""
        ctx, _, _ = broker.caller(request, cid, ("context", "node"))
        assert ctx is not None
        if since > ctx.last_id:
            return JSONResponse(
                {
                    "detail": f"since={since} is ahead of the context's last entry "
                    f"{ctx.last_id}; resynchronise with since=0",
                    "last_id": ctx.last_id,
                },
                status_code=409,
            )
        if since == ctx.last_id and wait > 0:
            await broker.wait(cid, wait)
            current = store.contexts.get(cid)
            if current is not ctx:  # deleted while waiting: its credentials are gone
                raise _unauthorized(_BASIC)
        return Response(ctx.updates_body(since), media_type=_JSON)

    return router


def _node_itself(broker: Broker, request: Request, cid: str, node_id: str) -> ContextState:
    """The context, if the caller is node ``node_id`` itself; a node that already left
    learns so (404) rather than being told its credential is wrong."""
    cred = broker._authorization(request)
    ctx = broker.store.contexts.get(cid)
    if cred is not None and cred[0] == "basic" and cred[1] == node_id and ctx is not None:
        if ctx.check_node(node_id, cred[2]):
            return ctx
        if ctx.check_departed(node_id, cred[2]):
            raise HTTPException(404, f"node {node_id} has already left context {cid}")
    raise _unauthorized(_BASIC)


def _one_line(exc: RequestValidationError) -> tuple[int, str]:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return 400, "the request body is not valid JSON"
    if not errors:
        return 422, "invalid request"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return 422, f"{where}: {first.get('msg', 'invalid')}{more}"


async def _validation_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    status, detail = _one_line(exc)
    return JSONResponse({"detail": detail}, status_code=status)


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse(
        {"detail": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers
    )


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
        ctx = self.broker.reader(cid, header)
        if ctx is None or since > ctx.last_id:
            return False
        if since == ctx.last_id and wait > 0:
            await self.broker.wait(cid, wait)
            if self.broker.store.contexts.get(cid) is not ctx:
                return False  # deleted meanwhile: the route answers 401
        body = ctx.updates_body(since)
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


def install(app: FastAPI, broker: Broker) -> None:
    """Add the broker's routes and the contract's error answers to ``app``."""
    app.include_router(build_router(broker))
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.state.broker = broker


def open_broker(
    state_dir: Path,
    *,
    admin_token: str | None = None,
    public_url: str | None = None,
    history: int = 10_000,
) -> Broker:
    """The broker whose state lives in ``state_dir`` (created if needed)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    token = admin_token if admin_token is not None else load_admin_token(state_dir)[0]
    store = Store(state_dir / "broker.sqlite3", history=history)
    return Broker(store, token, public_url=public_url)
