"""The urgent portals: server-rendered pages over the urgent services, at ``/urgent/portal``.

Three kinds of visitor sign in at ``/urgent/portal/login`` with what they already hold:

* an **administrator** (an ``esk_`` key of role admin) gets the administrators' portal
  (:mod:`.portal_admin`): their resources and each one's urgency → policy map, their
  tokens (issue, expire), and the audit log with filters;
* a **user** (an ``esk_`` key of role user) gets "my sessions": the sessions they are a
  member of, the time left in each, and their urgent submissions;
* the **token manager** (the token's value) gets the token's page: its attributes and
  time left, starting the session, adding and removing team members.

Plain forms, no script at all. A session is a random cookie (8 hours, HttpOnly,
SameSite=Strict, Secure over HTTPS, path ``/urgent/portal``) whose digest alone is
kept, in memory; every form carries the session's CSRF token, and the sign-in form one
bound to a cookie of its own. A session lasts only as long as what opened it: it ends
when its key is removed, or when its token expires or is revoked, at the visitor's next
request. Wrong keys and tokens count as refused attempts of their source network,
which is not heard at sign-in once it has had too many lately; every refusal is
audited (:func:`~.routes.refused`), and every sign-in. Pages forbid framing and allow
only the portal's own stylesheet.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import threading
import time
from dataclasses import replace
from importlib.resources import files
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from elasticsite.urgent import portal_admin
from elasticsite.urgent.portal_visitor import PORTAL, Visitor, redirect
from elasticsite.urgent.principals import key_digest
from elasticsite.urgent.refusals import principal_subject, source_subject, token_subject
from elasticsite.urgent.routes import UrgentService, client_host, refused
from elasticsite.urgent.store import HELD_BACK, RATE_LIMITED
from elasticsite.urgent.tokens import TokenState, check_identities
from elasticsite.web.credentials import digest
from elasticsite.web.pages import PAGE_HEADERS, read_form

__all__ = ["PORTAL", "Portal", "Visitor", "install", "redirect"]

SESSION_COOKIE = "urgent_session"
LOGIN_COOKIE = "urgent_login"
SESSION_SECONDS = 8 * 3600
MAX_SESSIONS = 10_000


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h} h {rest // 60:02d} min" if h else f"{rest // 60} min {rest % 60:02d} s"


class Portal:
    """The portals' sessions and templates, over one :class:`UrgentService`."""

    def __init__(self, service: UrgentService) -> None:
        self.service = service
        self._sessions: dict[bytes, tuple[float, Visitor]] = {}
        self._lock = threading.Lock()  # pages are served by several threads at once
        self.env = Environment(
            loader=PackageLoader("elasticsite", "urgent/templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.env.filters["clock"] = lambda t: (
            "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
        )
        self.env.filters["duration"] = duration

    def open(
        self,
        visitor_kind: str,
        name: str,
        token_id: str = "",
        resources: tuple[str, ...] = (),
        identities: tuple[tuple[str, str], ...] = (),
        key_digest: str = "",
    ) -> tuple[str, Visitor]:
        now = self.service.clock()
        value = secrets.token_urlsafe(32)
        visitor = Visitor(visitor_kind, name, secrets.token_urlsafe(24), token_id, resources,
                          identities, key_digest)  # fmt: skip
        with self._lock:
            for key in [k for k, (exp, _) in self._sessions.items() if exp < now]:
                del self._sessions[key]
            if len(self._sessions) >= MAX_SESSIONS:  # never grow without bound
                del self._sessions[min(self._sessions, key=lambda k: self._sessions[k][0])]
            self._sessions[digest(value)] = (now + SESSION_SECONDS, visitor)
        return value, visitor

    def visitor(self, request: Request) -> Visitor | None:
        """The signed-in visitor, as their key or token stands now: None when there is
        no session, or when its key was removed or its token has ended (the session
        ends with it)."""
        value = request.cookies.get(SESSION_COOKIE)
        if not value:
            return None
        now = self.service.clock()
        with self._lock:
            found = self._sessions.get(digest(value))
        if found is None or found[0] < now:
            return None
        current = self._current(found[1], now)
        if current is None:
            with self._lock:
                self._sessions.pop(digest(value), None)
        return current

    def _current(self, v: Visitor, now: float) -> Visitor | None:
        service = self.service
        with service.lock:
            if v.kind == "manager":
                token = service.store.get(v.token_id)
                alive = token is not None and token.state(now) in LIVE
                return v if alive else None
            principal = service.principals.by_digest(v.key_digest)
        if principal is None or principal.role != v.kind:
            return None
        return replace(v, name=principal.name, resources=tuple(sorted(principal.resources)),
                       identities=tuple(sorted(principal.identities.items())))  # fmt: skip

    def close(self, request: Request) -> None:
        value = request.cookies.get(SESSION_COOKIE)
        if value:
            with self._lock:
                self._sessions.pop(digest(value), None)

    def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        body = self.env.get_template(name).render(portal=PORTAL, **context)
        return HTMLResponse(body, status_code=status, headers=PAGE_HEADERS)

    async def form(self, request: Request, kind: str | None = None) -> tuple[Visitor, dict]:
        """The signed-in visitor (of ``kind``, if given) and their CSRF-checked form."""
        visitor = self.visitor(request)
        fields = await read_form(request)
        if visitor is None or not hmac.compare_digest(
            fields.get("csrf", "").encode(), visitor.csrf.encode()
        ):
            if visitor is None:
                subject, actor, token_id = source_subject(client_host(request)), "", ""
            else:
                subject, actor, token_id = visitor.subject, visitor.name, visitor.token_id
            raise refused(request, 403, "not signed in, or a stale form: load the page again",
                          [subject], actor=actor, token_id=token_id)  # fmt: skip
        if kind is not None and visitor.kind != kind:
            raise refused(request, 403, f"this is for the {kind}", [visitor.subject],
                          actor=visitor.name, token_id=visitor.token_id)  # fmt: skip
        return visitor, fields


LIVE = (TokenState.ISSUED, TokenState.ACTIVE)
"""The states of a token whose manager may sign in and stay signed in."""


def install(app: FastAPI, service: UrgentService) -> Portal:
    """Mount the portals on ``app`` (next to the urgent services of ``service``)."""
    portal = Portal(service)
    static = files("elasticsite").joinpath("urgent/static")

    def secure(request: Request) -> bool:
        return request.url.scheme == "https"

    @app.get(PORTAL, include_in_schema=False)
    def home(request: Request) -> Response:
        v = portal.visitor(request)
        if v is None:
            return redirect("/login")
        return redirect({"admin": "/admin", "user": "/me", "manager": "/token"}[v.kind])

    @app.get(PORTAL + "/login", include_in_schema=False)
    def login_form(request: Request, failed: str = "") -> Response:
        csrf = secrets.token_urlsafe(24)
        why = {"1": "That key or token is not known here.", "rate": RATE_LIMITED,
               "role": "Resource keys are for submit paths, not the portal.",
               "ended": "That token has expired or was revoked."}  # fmt: skip
        page = portal.page("login.html.j2", 401 if failed else 200, csrf=csrf,
                           failed=why.get(failed, ""))  # fmt: skip
        page.set_cookie(LOGIN_COOKIE, csrf, max_age=600, path=PORTAL, httponly=True,
                        secure=secure(request), samesite="strict")  # fmt: skip
        return page

    @app.post(PORTAL + "/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        fields = await read_form(request)
        expected = request.cookies.get(LOGIN_COOKIE, "")
        host = client_host(request)
        src = source_subject(host)
        if not expected or not hmac.compare_digest(
            fields.get("csrf", "").encode(), expected.encode()
        ):
            raise refused(request, 403, "the sign-in form expired; load it again", [src],
                          action="sign in")  # fmt: skip
        credential = fields.get("credential", "").strip()
        now = service.clock()
        with service.lock:
            if service.store.held_back(now, [src], source=host):
                return redirect("/login?failed=rate")
            if credential.startswith("esk_"):
                who = service.principals.by_key(credential)
                token = None
            else:
                who, token = None, service.store.by_value(credential)
        if who is None and token is None:
            why = "wrong key" if credential.startswith("esk_") else "wrong token"
            with service.lock:
                service.store.refuse(now, [src], "sign in", why if credential else "no credential",
                                     source=host)  # fmt: skip
            await asyncio.sleep(0.5)  # a guess costs time
            return redirect("/login?failed=1")
        if who is not None and who.role == "resource":
            with service.lock:
                service.store.refuse(now, [principal_subject(who.name)], "sign in",
                                     "a resource key is for submit paths", actor=who.name,
                                     source=host)  # fmt: skip
            return redirect("/login?failed=role")
        if token is not None and token.state(now) not in LIVE:
            with service.lock:
                service.store.refuse(now, [token_subject(token.id)], "sign in",
                                     f"the token is {token.state(now).value}", source=host,
                                     actor="token manager", token_id=token.id)  # fmt: skip
            return redirect("/login?failed=ended")
        if who is not None:
            value, _ = portal.open(
                who.role,
                who.name,
                resources=tuple(sorted(who.resources)),
                identities=tuple(sorted(who.identities.items())),
                key_digest=key_digest(credential),
            )
            signed = (who.name, "")
        else:
            assert token is not None
            value, _ = portal.open("manager", "token manager", token.id)
            signed = ("token manager", token.id)
        with service.lock:
            service.store.record(now, "sign in", *signed, source=host)
        done = redirect("")  # to the visitor's own portal
        done.set_cookie(SESSION_COOKIE, value, max_age=SESSION_SECONDS, path=PORTAL,
                        httponly=True, secure=secure(request), samesite="strict")  # fmt: skip
        done.delete_cookie(LOGIN_COOKIE, path=PORTAL)
        return done

    @app.post(PORTAL + "/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        await portal.form(request)
        portal.close(request)
        done = redirect("/login")
        done.delete_cookie(SESSION_COOKIE, path=PORTAL)
        return done

    @app.get(PORTAL + "/static/portal.css", include_in_schema=False)
    def stylesheet() -> Response:
        return Response(static.joinpath("portal.css").read_text(), media_type="text/css",
                        headers={"Cache-Control": "max-age=300",
                                 "X-Content-Type-Options": "nosniff"})  # fmt: skip

    # -- the token manager ------------------------------------------------------------

    def managed(request: Request) -> tuple[Visitor, Any] | None:
        v = portal.visitor(request)
        if v is None or v.kind != "manager":
            return None
        with service.lock:
            return v, service.store.get(v.token_id)

    @app.get(PORTAL + "/token", include_in_schema=False)
    def token_page(request: Request, error: str = "") -> Response:
        found = managed(request)
        if found is None or found[1] is None:
            return redirect("/login")
        v, token = found
        now = service.clock()
        return portal.page("token.html.j2", v=v, t=token, state=token.state(now).value,
                           left=token.time_left(now), error=error,
                           resources=sorted(token.resources))  # fmt: skip

    @app.post(PORTAL + "/token/activate", include_in_schema=False)
    async def activate(request: Request) -> Response:
        v, _ = await portal.form(request, "manager")
        with service.lock:
            token = service.store.get(v.token_id)
            if token is None:
                raise HTTPException(404, "the token is gone")
            try:
                service.store.activate(token, service.clock(), "token manager")
            except ValueError as exc:
                return portal.page("token.html.j2", 409, v=v, t=token, error=str(exc),
                                   state=token.state(service.clock()).value,
                                   left=None, resources=sorted(token.resources))  # fmt: skip
        return redirect("/token")

    @app.post(PORTAL + "/token/members", include_in_schema=False)
    async def add_member(request: Request) -> Response:
        v, fields = await portal.form(request, "manager")
        name = fields.get("name", "").strip()
        with service.lock:
            token = service.store.get(v.token_id)
            if token is None:
                raise HTTPException(404, "the token is gone")
            ids = {r: fields.get(f"id:{r}", "") for r in token.resources}
            ids = {r: i for r, i in ids.items() if i.strip()}
            try:
                if not name or len(name) > 128 or any(ord(c) < 33 for c in name):
                    raise ValueError("a member's name is 1-128 characters without spaces")
                check_identities(token.resources, ids)
                service.store.add_member(token.id, name, ids, service.clock(), "token manager")
            except ValueError as exc:
                now = service.clock()
                return portal.page("token.html.j2", 422, v=v, t=token, error=str(exc),
                                   state=token.state(now).value, left=token.time_left(now),
                                   resources=sorted(token.resources))  # fmt: skip
        return redirect("/token")

    @app.post(PORTAL + "/token/members/{name}/remove", include_in_schema=False)
    async def remove_member(name: str, request: Request) -> Response:
        v, _ = await portal.form(request, "manager")
        with service.lock:
            try:
                service.store.remove_member(v.token_id, name, service.clock(), "token manager")
            except KeyError:
                raise HTTPException(404, f"no member {name!r}") from None
        return redirect("/token")

    # -- a team member ----------------------------------------------------------------

    @app.get(PORTAL + "/me", include_in_schema=False)
    def me(request: Request) -> Response:
        v = portal.visitor(request)
        if v is None or v.kind != "user":
            return redirect("/login")
        now = service.clock()
        with service.lock:
            identities = dict(v.identities)
            sessions: dict[str, Any] = {}
            runs = []
            for resource, identity in identities.items():
                for t in service.store.sessions_of(resource, identity, now):
                    sessions.setdefault(t.id, t)
                found = service.store.audit(resource=resource, identity=identity, limit=100)
                runs += [r for r in found if r.action in ("authenticate", HELD_BACK)]
        runs.sort(key=lambda r: -r.at)
        rows = [(t, t.state(now).value, t.time_left(now)) for t in sessions.values()]
        active = [r for r in rows if r[1] == TokenState.ACTIVE.value]
        return portal.page("me.html.j2", v=v, identities=identities, sessions=rows,
                           active=active, runs=runs[:100])  # fmt: skip

    portal_admin.install(app, portal)
    return portal
