"""The urgent services over REST, at ``/urgent`` on the project's server.

The services of a right-of-way token system, each with its access rule:

| service | route | who |
| --- | --- | --- |
| issue a token | ``POST /urgent/tokens`` | an admin of every resource it names |
| list tokens | ``GET /urgent/tokens`` | an admin (the tokens naming their resources) |
| expire a token | ``POST /urgent/tokens/{id}/expire`` | an admin of a resource it names |
| the audit log | ``GET /urgent/audit`` | an admin (attempts on their resources) |
| getTokenInfo | ``GET /urgent/token`` | the token manager (``X-Urgent-Token``) |
| addUserToToken | ``POST /urgent/token/members`` | the token manager |
| removeUserFromToken | ``DELETE /urgent/token/members/{name}`` | the token manager |
| activateToken | ``POST /urgent/token/activate`` | the token manager |
| checkTokenTime | ``GET /urgent/token/time`` | the token manager |
| getUserInfo | ``GET /urgent/me`` | a user (their own sessions) |
| authenticate | ``POST /urgent/authenticate`` | a user, or a resource's submit path |
| compensate | ``POST /urgent/compensation`` | a resource's submit path, for a job it preempted |

A user authenticates as their own identity on the resource; a resource's submit path
names the identity, on its own resources only.

Keys travel as ``Authorization: Bearer esk_...`` (:mod:`.principals`); the token as
``X-Urgent-Token``. A wrong or missing credential is 401 with nothing else said; a
right one without the right is 403. Token values are never returned except once, when
issued, and never logged. Every refusal is audited and counted against its subject
(:mod:`.refusals`): a wrong or missing credential against its source network, a
request beyond a key's rights against its principal, a change to a token that has
ended against the token, a refused submission against the identity on the resource.
A subject with too many refusals lately is answered 429 (the submit filter, the token
manager's calls) without being heard; nobody else is. A token that has expired or been
revoked still tells its manager so (getTokenInfo, checkTokenTime), and changes nothing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.responses import Response

from elasticsite.urgent.principals import Principal, Principals
from elasticsite.urgent.refusals import principal_subject, source_subject, token_subject
from elasticsite.urgent.resources import ResourcePolicies
from elasticsite.urgent.schemas import (
    AuditOut,
    AuthenticateIn,
    AuthenticateOut,
    CompensationIn,
    MemberIn,
    TimeLeft,
    TokenIn,
    TokenIssued,
    TokenOut,
    UserInfo,
)
from elasticsite.urgent.store import RATE_LIMITED, UrgentStore
from elasticsite.urgent.tokens import Token, TokenState, Urgency
from elasticsite.web.credentials import BEARER, parse_authorization

__all__ = [
    "UrgentService",
    "authenticated",
    "client_host",
    "install",
    "refused",
    "submitting_identity",
]


class UrgentService:
    """The store, its principals and the clock, behind one lock (SQLite is serial)."""

    def __init__(self, store: UrgentStore, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.principals = Principals(store.db)
        self.resources = ResourcePolicies(store.db)
        self.clock = clock
        self.lock = threading.RLock()


def _out(t: Token, now: float, cls: type[TokenOut] = TokenOut, **extra: str) -> TokenOut:
    token = t
    return cls(
        id=token.id, label=token.label, resources=sorted(token.resources),
        max_urgency=token.max_urgency.label,
        session_seconds=token.session_seconds, state=token.state(now).value,
        issued_at=token.issued_at, activated_at=token.activated_at,
        expires_at=token.expires_at, seconds_left=token.time_left(now),
        members={k: dict(v) for k, v in token.members.items()}, **extra,
    )  # fmt: skip


def _service(request: Request) -> UrgentService:
    service: UrgentService = request.app.state.urgent
    return service


def client_host(request: Request) -> str:
    """The address the request came from: the connection's, never a header's."""
    return request.client.host if request.client else ""


def _rate_limited() -> HTTPException:
    return HTTPException(429, RATE_LIMITED, {"Retry-After": "60"})


def refused(
    request: Request, status: int, detail: str, subjects: list[str], *, reason: str = "",
    action: str = "", headers: dict[str, str] | None = None, **row: str,
) -> HTTPException:  # fmt: skip
    """Audit a refused request against ``subjects`` and the error answering it: ``status``
    with ``detail``, or 429 once one of the subjects has had too many refusals lately.
    ``row`` gives the audit row's actor, token_id, resource and identity."""
    service = _service(request)
    route = request.scope.get("route")
    action = action or f"{request.method} {getattr(route, 'path', request.url.path)[:200]}"
    with service.lock:
        held = service.store.refuse(service.clock(), subjects, action, (reason or detail)[:300],
                                    source=client_host(request),
                                    **{k: v[:128] for k, v in row.items()})  # fmt: skip
    return _rate_limited() if held else HTTPException(status, detail, headers)


async def _principal(request: Request) -> Principal:
    cred = parse_authorization(request.headers.get("authorization"))
    service = _service(request)
    found = None
    if cred is not None and cred[0] == "bearer":
        with service.lock:
            found = service.principals.by_key(cred[2])
    if found is None:
        why = "no key" if cred is None else "wrong key" if cred[0] == "bearer" else "not a key"
        raise refused(request, 401, "invalid or missing credentials",
                      [source_subject(client_host(request))], reason=why,
                      headers={"WWW-Authenticate": BEARER})  # fmt: skip
    return found


def _role(*allowed: str) -> Callable[[Request], Awaitable[Principal]]:
    # async: a key lookup is one indexed SQLite read; no thread hop for it
    async def check(request: Request) -> Principal:
        p = await _principal(request)
        if p.role not in allowed:
            raise refused(request, 403, f"this service is not for a {p.role}",
                          [principal_subject(p.name)], actor=p.name)  # fmt: skip
        return p

    return check


def _managed(request: Request, x_urgent_token: Annotated[str | None, Header()] = None) -> Token:
    """The token whose value the caller presents (the token manager's credential).
    Wrong values count against their source, which is not heard once it has had too
    many refusals lately."""
    service = _service(request)
    host = client_host(request)
    source = source_subject(host)
    now = service.clock()
    with service.lock:
        store = service.store
        if store.held_back(now, [source], source=host):
            raise _rate_limited()
        token = store.by_value(x_urgent_token or "")
    if token is None:
        raise refused(request, 401, "invalid or missing token", [source],
                      reason="wrong token" if x_urgent_token else "no token",
                      headers={"WWW-Authenticate": "Token"})  # fmt: skip
    return token


Admin = Annotated[Principal, Depends(_role("admin"))]
User = Annotated[Principal, Depends(_role("user"))]
Submitter = Annotated[Principal, Depends(_role("user", "resource"))]
Resource = Annotated[Principal, Depends(_role("resource"))]
Managed = Annotated[Token, Depends(_managed)]


def _changing(request: Request, token: Managed) -> Token:
    """The token its manager is changing, which must not have ended."""
    state = token.state(_service(request).clock())
    if state in (TokenState.EXPIRED, TokenState.REVOKED):
        raise refused(request, 403, f"token {token.id} is {state.value}: nothing about it "
                      "changes any more", [token_subject(token.id)], actor="token manager",
                      token_id=token.id)  # fmt: skip
    return token


Changing = Annotated[Token, Depends(_changing)]


def submitting_identity(who: Principal, body: AuthenticateIn) -> str | None:
    """The identity a caller may authenticate as (None: it may not): a user as their
    own identity on the resource; a resource's submit path the one it names, on its own
    resources."""
    if who.role == "user":
        identity = who.identities.get(body.resource)
        return identity if identity is not None and body.identity in (None, identity) else None
    if who.role == "resource" and body.resource in who.resources and body.identity:
        return body.identity
    return None


def authenticated(service: UrgentService, body: AuthenticateIn, identity: str,
                  source: str) -> tuple[int, bytes]:  # fmt: skip
    """The audited decision and its answer: (status, JSON bytes)."""
    with service.lock:
        token, why = service.store.authenticate(
            body.resource, identity, Urgency.parse(body.urgency), service.clock(), source
        )
        policy = service.resources.policy(body.resource, body.urgency) if token else None
    if why == RATE_LIMITED:
        return 429, json.dumps({"detail": RATE_LIMITED}, separators=(",", ":")).encode()
    return 200, json.dumps({"ok": token is not None, "token_id": token.id if token else None,
                            "reason": why or "",
                            "compensation": bool(token and token.single_use),
                            "policy": policy},
                           separators=(",", ":")).encode()  # fmt: skip


def install(app: FastAPI, service: UrgentService) -> None:
    """Mount the urgent services on ``app``."""
    app.state.urgent = service
    router = APIRouter(prefix="/urgent", tags=["urgent"])

    @router.post("/tokens", status_code=201, response_model=TokenIssued)
    def issue(body: TokenIn, admin: Admin, request: Request) -> TokenOut:
        """Issue a token for resources the caller administers; its value is shown once."""
        foreign = sorted(set(body.resources) - admin.resources)
        if foreign:
            raise refused(request, 403, f"not an administrator of {', '.join(foreign)}",
                          [principal_subject(admin.name)], actor=admin.name,
                          resource=foreign[0])  # fmt: skip
        now = service.clock()
        with service.lock:
            token, value = service.store.issue(
                body.resources, Urgency.parse(body.max_urgency), body.session_seconds, now,
                issued_by=admin.name, label=body.label,
            )  # fmt: skip
        return _out(token, now, TokenIssued, token=value)

    @router.get("/tokens", response_model=list[TokenOut])
    def tokens(admin: Admin) -> list[TokenOut]:
        """The tokens naming a resource the caller administers (never their values)."""
        now = service.clock()
        with service.lock:
            found = service.store.tokens(sorted(admin.resources))
        return [_out(t, now) for t in found]

    @router.post("/tokens/{token_id}/expire", response_model=TokenOut)
    def expire(token_id: str, admin: Admin, request: Request) -> TokenOut:
        """End a token's use now: no session starts or goes on under it."""
        now = service.clock()
        with service.lock:
            token = service.store.get(token_id)
            if token is None or not token.resources & admin.resources:
                raise refused(request, 404, "no such token among your resources",
                              [principal_subject(admin.name)], actor=admin.name,
                              token_id=token_id)  # fmt: skip
            token = service.store.expire(token_id, now, admin.name)
        return _out(token, now)

    @router.get("/audit", response_model=list[AuditOut])
    def audit(
        admin: Admin,
        request: Request,
        resource: str | None = None,
        identity: str | None = None,
        ok: bool | None = None,
        since: float | None = None,
        limit: Annotated[int, Query(ge=1, le=5000)] = 500,
    ) -> list[AuditOut]:
        """Every urgent attempt on the caller's resources, newest first, filtered."""
        if resource is not None and resource not in admin.resources:
            raise refused(request, 403, f"not an administrator of {resource}",
                          [principal_subject(admin.name)], actor=admin.name,
                          resource=resource)  # fmt: skip
        with service.lock:
            rows = list(service.store.audit(resource=resource, identity=identity, ok=ok,
                                            since=since, limit=limit))  # fmt: skip
        return [AuditOut(**{k: getattr(r, k) for k in AuditOut.model_fields}) for r in rows
                if r.visible_to(admin.name, admin.resources)]  # fmt: skip

    @router.get("/token", response_model=TokenOut)
    def token_info(token: Managed) -> TokenOut:
        """getTokenInfo: the token's attributes and members."""
        return _out(token, service.clock())

    @router.post("/token/members", response_model=TokenOut)
    def add_member(body: MemberIn, token: Changing) -> TokenOut:
        """addUserToToken: add (or change) a team member, even during a session."""
        now = service.clock()
        with service.lock:
            try:
                found = service.store.add_member(token.id, body.name, body.identities, now,
                                                 "token manager")  # fmt: skip
            except ValueError as exc:
                raise HTTPException(422, str(exc)) from None
        return _out(found, now)

    @router.delete("/token/members/{name}", response_model=TokenOut)
    def remove_member(name: str, token: Changing) -> TokenOut:
        """removeUserFromToken: the member can no longer submit, at once."""
        now = service.clock()
        with service.lock:
            try:
                found = service.store.remove_member(token.id, name, now, "token manager")
            except KeyError:
                raise HTTPException(404, f"no member {name!r}") from None
        return _out(found, now)

    @router.post("/token/activate", response_model=TokenOut)
    def activate(token: Changing) -> TokenOut:
        """activateToken: start the urgent session; its clock starts now."""
        now = service.clock()
        with service.lock:
            try:
                found = service.store.activate(token, now, "token manager")
            except ValueError as exc:
                raise HTTPException(409, str(exc)) from None
        return _out(found, now)

    @router.get("/token/time", response_model=TimeLeft)
    def check_time(token: Managed) -> TimeLeft:
        """checkTokenTime: seconds left in the session (null when none is active)."""
        now = service.clock()
        return TimeLeft(state=token.state(now).value, seconds_left=token.time_left(now))

    @router.get("/me", response_model=UserInfo)
    def me(user: User) -> UserInfo:
        """getUserInfo: the caller's sessions, on every resource they have an identity on."""
        now = service.clock()
        seen: dict[str, TokenOut] = {}
        with service.lock:
            for resource, identity in user.identities.items():
                for t in service.store.sessions_of(resource, identity, now):
                    seen.setdefault(t.id, _out(t, now))
        return UserInfo(name=user.name, identities=dict(user.identities),
                        sessions=list(seen.values()))  # fmt: skip

    @router.post("/authenticate", response_model=AuthenticateOut)
    async def authenticate(body: AuthenticateIn, who: Submitter, request: Request) -> Response:
        """The submit filter: may this identity submit at this urgency on this resource
        now? Audited, successful or not."""
        identity = submitting_identity(who, body)
        if identity is None:
            raise refused(request, 403, "a user submits as their own identity; a resource, "
                          "on its own resources", [principal_subject(who.name)], actor=who.name,
                          resource=body.resource, identity=body.identity or "")  # fmt: skip
        status, payload = authenticated(service, body, identity, client_host(request))
        headers = {"Retry-After": "60"} if status == 429 else None
        return Response(payload, status, headers, media_type="application/json")

    @router.post("/compensation", status_code=201, response_model=TokenOut)
    def compensation(body: CompensationIn, who: Resource, request: Request) -> TokenOut:
        """A single-use next-to-run session for the owner of a job an urgent one
        preempted, on the resource that preempted it (its submit path asks)."""
        if body.resource not in who.resources:
            raise refused(request, 403, "a resource compensates on its own resources only",
                          [principal_subject(who.name)], actor=who.name, resource=body.resource,
                          identity=body.identity)  # fmt: skip
        now = service.clock()
        with service.lock:
            token = service.store.compensate(body.resource, body.identity, now, actor=who.name)
        return _out(token, now)

    app.include_router(router)
