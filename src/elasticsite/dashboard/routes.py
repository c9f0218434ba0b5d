"""The dashboard's pages on the project's server, read-only, for the admin.

``/dashboard`` (the site at a glance), ``/dashboard/live`` (its changing part, which the
page fetches every few seconds: no reload, no JavaScript framework), ``/dashboard/workers``
(every unfinished worker). They read the manager's state store read-only
(:class:`~elasticsite.history.samples.HistoryReader`), so they work as well while the
manager is stopped, saying how old what they show is; they create nothing, and with no
state store yet they say where they looked and how the site starts.

Who may look: the holder of the broker's admin token. A browser signs in once with it
at ``/dashboard/login`` and gets a session cookie (random, 12 hours, HttpOnly,
SameSite=Strict, Secure over HTTPS, path ``/dashboard``); the sign-in and sign-out
forms carry a CSRF token that must match a cookie of its own. Scripts may send the
token as ``Authorization: Bearer`` instead. Every answer forbids framing and carries a
content security policy that allows only the dashboard's own script and style.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from elasticsite.dashboard.views import STATES, age_text, overview
from elasticsite.history.samples import HistoryReader
from elasticsite.spend import utc
from elasticsite.web.credentials import digest
from elasticsite.web.pages import PAGE_HEADERS, read_form

__all__ = ["PAGE_HEADERS", "SESSION_COOKIE", "Dashboard", "install", "read_form"]

SESSION_COOKIE = "elasticsite_session"
CSRF_COOKIE = "elasticsite_csrf"
SESSION_SECONDS = 12 * 3600
REFRESH_SECONDS = 5


class Dashboard:
    """The dashboard of one site: its state store, sessions and templates."""

    def __init__(
        self,
        state_db: Path,
        *,
        clock: Callable[[], float] = time.time,
        stale_after: float = 180.0,
        site_file: Path | None = None,
    ) -> None:
        """``site_file``: the site's configuration, named in how to start the site."""
        self.reader = HistoryReader(state_db)
        self.site_file = site_file
        self.clock = clock
        self.stale_after = stale_after
        self._sessions: dict[bytes, tuple[float, str]] = {}  # digest -> (expiry, csrf)
        self.env = Environment(
            loader=PackageLoader("elasticsite", "dashboard/templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.env.filters["age"] = age_text
        self.env.filters["clock"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
        self.env.filters["utc"] = utc

    # -- sessions -------------------------------------------------------------------

    def open_session(self) -> tuple[str, str]:
        """A new session's cookie value and its CSRF token."""
        now = self.clock()
        for key in [k for k, (exp, _) in self._sessions.items() if exp < now]:
            del self._sessions[key]
        value, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
        self._sessions[digest(value)] = (now + SESSION_SECONDS, csrf)
        return value, csrf

    def session(self, request: Request) -> str | None:
        """The CSRF token of the request's live session, or None."""
        value = request.cookies.get(SESSION_COOKIE)
        if not value:
            return None
        found = self._sessions.get(digest(value))
        if found is None or found[0] < self.clock():
            return None
        return found[1]

    def close_session(self, request: Request) -> None:
        value = request.cookies.get(SESSION_COOKIE)
        if value:
            self._sessions.pop(digest(value), None)

    def render(self, name: str, **context: Any) -> str:
        """The page ``name``; ``no_state`` is where the state store was looked for and the
        command that starts the site, while there is none."""
        no_state = None
        if not self.reader.path.exists():
            start = f"elasticsite run -c {self.site_file}" if self.site_file else "elasticsite run"
            no_state = (str(self.reader.path), start)
        return self.env.get_template(name).render(no_state=no_state, **context)


def _page(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=PAGE_HEADERS)


def install(
    app: FastAPI,
    dashboard: Dashboard,
    is_admin: Callable[[Request], bool],
    is_admin_token: Callable[[str], bool],
) -> None:
    """Mount the dashboard's routes; ``is_admin`` checks a request's bearer token,
    ``is_admin_token`` a token typed into the sign-in form."""
    static = files("elasticsite").joinpath("dashboard/static")

    def signed_in(request: Request) -> bool:
        return dashboard.session(request) is not None or is_admin(request)

    def secure(request: Request) -> bool:
        return request.url.scheme == "https"

    @app.get("/dashboard", include_in_schema=False)
    def main(request: Request) -> Response:
        if not signed_in(request):
            return RedirectResponse("/dashboard/login", 303, headers=PAGE_HEADERS)
        view = overview(dashboard.reader, dashboard.clock(), stale_after=dashboard.stale_after)
        return _page(dashboard.render("main.html.j2", v=view, states=STATES,
                                      session_csrf=dashboard.session(request) or "",
                                      refresh=REFRESH_SECONDS))  # fmt: skip

    @app.get("/dashboard/live", include_in_schema=False)
    def live(request: Request) -> Response:
        if not signed_in(request):
            raise HTTPException(401, "sign in at /dashboard/login")
        view = overview(dashboard.reader, dashboard.clock(), stale_after=dashboard.stale_after)
        return _page(dashboard.render("live.html.j2", v=view, states=STATES))

    @app.get("/dashboard/workers", include_in_schema=False)
    def workers(request: Request) -> Response:
        if not signed_in(request):
            return RedirectResponse("/dashboard/login", 303, headers=PAGE_HEADERS)
        view = overview(dashboard.reader, dashboard.clock(), stale_after=dashboard.stale_after)
        return _page(dashboard.render("workers.html.j2", v=view,
                                      session_csrf=dashboard.session(request) or ""))  # fmt: skip

    @app.get("/dashboard/login", include_in_schema=False)
    def login_form(request: Request, failed: int = 0) -> Response:
        csrf = secrets.token_urlsafe(24)
        page = _page(dashboard.render("login.html.j2", csrf=csrf, failed=bool(failed)),
                     401 if failed else 200)  # fmt: skip
        page.set_cookie(CSRF_COOKIE, csrf, max_age=600, path="/dashboard", httponly=True,
                        secure=secure(request), samesite="strict")  # fmt: skip
        return page

    @app.post("/dashboard/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        fields = await read_form(request)
        token, csrf = fields.get("token", ""), fields.get("csrf", "")
        expected = request.cookies.get(CSRF_COOKIE, "")
        if not expected or not hmac.compare_digest(csrf.encode(), expected.encode()):
            raise HTTPException(403, "the sign-in form expired; load it again")
        if not is_admin_token(token.strip()):
            await asyncio.sleep(0.5)  # a guess costs time
            return RedirectResponse("/dashboard/login?failed=1", 303, headers=PAGE_HEADERS)
        value, _ = dashboard.open_session()
        done = RedirectResponse("/dashboard", 303, headers=PAGE_HEADERS)
        done.set_cookie(SESSION_COOKIE, value, max_age=SESSION_SECONDS, path="/dashboard",
                        httponly=True, secure=secure(request), samesite="strict")  # fmt: skip
        done.delete_cookie(CSRF_COOKIE, path="/dashboard")
        return done

    @app.post("/dashboard/logout", include_in_schema=False)
    async def logout(request: Request) -> Response:
        csrf = (await read_form(request)).get("csrf", "")
        expected = dashboard.session(request)
        if expected is None or not hmac.compare_digest(csrf.encode(), expected.encode()):
            raise HTTPException(403, "not signed in, or a stale form")
        dashboard.close_session(request)
        done = RedirectResponse("/dashboard/login", 303, headers=PAGE_HEADERS)
        done.delete_cookie(SESSION_COOKIE, path="/dashboard")
        return done

    @app.get("/dashboard/static/{name}", include_in_schema=False)
    def asset(name: str) -> Response:
        types = {"live.js": "text/javascript", "style.css": "text/css"}
        if name not in types:
            raise HTTPException(404, "no such file")
        return Response(static.joinpath(name).read_text(), media_type=types[name],
                        headers={"Cache-Control": "max-age=300",
                                 "X-Content-Type-Options": "nosniff"})  # fmt: skip
