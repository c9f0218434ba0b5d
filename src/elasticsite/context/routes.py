"""The broker's HTTP routes: the contract of docs/recontext-api.md on a :class:`Broker`.

:func:`build_router` binds the routes to a broker; :func:`install` adds them, with the
contract's one-line error answers, to an application (``elasticsite.server`` builds
the project's one application around it). Each route checks its caller
(:mod:`elasticsite.context.auth`), and joins and updates pass the context's admission
rules (:mod:`elasticsite.context.admission`) before the store records them.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from elasticsite.context.auth import unauthorized
from elasticsite.context.broker import MAX_WAIT, Broker, Challenged
from elasticsite.context.models import (
    ChallengeBody,
    ContextCreate,
    ContextCreated,
    ContextPolicy,
    ContextSummary,
    EntryRef,
    ErrorBody,
    JoinIn,
    JoinResult,
    Members,
    NodeIn,
    SinceAhead,
    Updates,
)
from elasticsite.context.store import ContextState
from elasticsite.context.validation import describe_errors

__all__ = ["build_router", "install"]

log = logging.getLogger(__name__)

_JSON = "application/json"


def _summary(broker: Broker, request: Request, ctx: ContextState) -> ContextSummary:
    return ContextSummary(
        **ctx.policy.model_dump(),
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
_ADMISSION_ERRORS: dict[int | str, dict[str, Any]] = {
    409: {
        "model": ErrorBody,
        "description": "A current member holds the name or address, or the context is full",
    },
    422: {
        "model": ErrorBody,
        "description": "Invalid or reserved fields, or outside the context's domain or pattern",
    },
    429: {"model": ErrorBody, "description": "Too many joins in this context (Retry-After)"},
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
        broker.auth.admin(request)
        policy = ContextPolicy.model_validate(body.model_dump(exclude={"name"}))
        ctx, key, secret = store.create_context(body.name, policy)
        log.info("created context %s (%s)", ctx.id, ctx.name or "no name")
        return ContextCreated(
            id=ctx.id, name=ctx.name, uri=broker.uri(request, ctx.id), key=key, secret=secret
        )

    @router.get("/ctx", responses=_ERRORS, tags=["contexts"])
    async def list_contexts(request: Request) -> list[ContextSummary]:
        """Every context, oldest first."""
        broker.auth.admin(request)
        ordered = sorted(store.contexts.values(), key=lambda c: c.created_at)
        return [_summary(broker, request, c) for c in ordered]

    @router.get("/ctx/{cid}", responses=_ADMIN_ERRORS, tags=["contexts"])
    async def show_context(cid: str, request: Request) -> ContextSummary:
        """One context."""
        return _summary(broker, request, broker.auth.admin_context(request, cid))

    @router.delete("/ctx/{cid}", status_code=204, responses=_ADMIN_ERRORS, tags=["contexts"])
    async def delete_context(cid: str, request: Request) -> Response:
        """Delete a context, its nodes and its entries; its credentials stop working."""
        broker.auth.admin_context(request, cid)
        store.delete_context(cid)
        broker.notify(cid)
        log.info("deleted context %s", cid)
        return Response(status_code=204)

    @router.post(
        "/ctx/{cid}/nodes",
        status_code=201,
        response_model=JoinResult,
        responses={
            **_ERRORS,
            **_ADMISSION_ERRORS,
            409: {
                "model": ChallengeBody | ErrorBody,
                "description": "A current member holds the name or address, or the context "
                "is full; under replace_on_rejoin, a challenge to sign with the host key",
            },
        },
        tags=["nodes"],
    )
    async def join(cid: str, body: JoinIn, request: Request) -> Response | JoinResult:
        """Join with the context's key and secret; the answer holds the node's credential.

        The record must not take a current member's host name, short host name or
        address, nor a reserved name (409, 422); see the context's admission rules.
        Replacing a member (replace_on_rejoin) takes a ``proof`` signed with the SSH
        host key, answering the challenge of a first ``409``."""
        ctx, _, _ = broker.auth.caller(request, cid, ("context",))
        assert ctx is not None
        try:
            replaced = broker.admit(ctx, body, request)
        except Challenged as exc:
            return JSONResponse(exc.body.model_dump(), status_code=409)
        node_id, node_secret, entry_id = store.join(ctx, body, replaced)
        broker.notify(cid)
        if replaced:
            log.info(
                "context %s: %s rejoined with its host key proven, replacing %s",
                cid,
                body.hostname,
                replaced,
            )
        log.info("context %s: %s joined as node %s", cid, body.hostname, node_id)
        return JoinResult(node_id=node_id, node_secret=node_secret, entry_id=entry_id)

    @router.put(
        "/ctx/{cid}/nodes/{node_id}",
        responses={**_ADMIN_ERRORS, **_ADMISSION_ERRORS},
        tags=["nodes"],
    )
    async def update_node(cid: str, node_id: str, body: NodeIn, request: Request) -> EntryRef:
        """A node replaces its own record (recorded as a leave and a join), under the
        same admission rules as a join: it cannot take another member's names."""
        ctx = broker.auth.node_itself(request, cid, node_id)
        broker.admit(ctx, body, request, updating=node_id)
        entry_id = store.update(ctx, node_id, body)
        broker.notify(cid)
        log.info("context %s: node %s updated as %s", cid, node_id, body.hostname)
        return EntryRef(entry_id=entry_id)

    @router.delete("/ctx/{cid}/nodes/{node_id}", responses=_ADMIN_ERRORS, tags=["nodes"])
    async def remove_node(cid: str, node_id: str, request: Request) -> EntryRef:
        """A node leaves, or an administrator removes it."""
        if broker.auth.is_admin(request):
            ctx = broker.auth.admin_context(request, cid)
            member = ctx.members.get(node_id)
            if member is None:
                raise HTTPException(404, f"no current member {node_id} in context {cid}")
        else:
            ctx = broker.auth.node_itself(request, cid, node_id)
            member = ctx.members[node_id]
        entry_id = store.leave(ctx, [member])
        broker.notify(cid)
        log.info("context %s: node %s left", cid, node_id)
        return EntryRef(entry_id=entry_id)

    @router.delete("/ctx/{cid}/hosts/{short_hostname}", responses=_ADMIN_ERRORS, tags=["nodes"])
    async def remove_host(cid: str, short_hostname: str, request: Request) -> EntryRef:
        """An administrator removes the current member(s) with this short hostname."""
        ctx = broker.auth.admin_context(request, cid)
        short_hostname = short_hostname.lower()  # names are kept in lower case
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
        ctx, _, _ = broker.auth.caller(request, cid, ("admin", "context", "node"))
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
        ctx, _, _ = broker.auth.caller(request, cid, ("context", "node"))
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
        body = await broker.updates(ctx, since, wait)
        if body is None:  # deleted while waiting: its credentials are gone
            raise unauthorized()
        return Response(body, media_type=_JSON)

    return router


def _one_line(exc: RequestValidationError) -> tuple[int, str]:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return 400, "the request body is not valid JSON"
    return 422, describe_errors(errors, skip="body")


async def _validation_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    status, detail = _one_line(exc)
    return JSONResponse({"detail": detail}, status_code=status)


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse(
        {"detail": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers
    )


def install(app: FastAPI, broker: Broker) -> None:
    """Add the broker's routes and the contract's error answers to ``app``."""
    app.include_router(build_router(broker))
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.state.broker = broker
