"""The administrators' portal: resources and their policy maps, tokens, the audit log.

An administrator sees and acts on their own resources only, as over REST: tokens that
name one of them, the audit records of attempts on them. A new token's value is shown
once, on the page that answers the issuing form, and never again.
"""

from __future__ import annotations

import time

from fastapi import FastAPI, Request
from fastapi.responses import Response

from elasticsite.decision import URGENCIES
from elasticsite.urgent.portal_visitor import PORTAL, Pages, Visitor, redirect
from elasticsite.urgent.resources import POLICIES
from elasticsite.urgent.routes import refused
from elasticsite.urgent.tokens import Urgency, show

__all__ = ["install"]

MAX_SESSION_HOURS = 30 * 24


def install(app: FastAPI, portal: Pages) -> None:
    """Mount the administrators' pages on ``app``, rendered by ``portal``."""
    service = portal.service

    def admin(request: Request) -> Visitor | None:
        v = portal.visitor(request)
        return v if v is not None and v.kind == "admin" else None

    def admin_page(v: Visitor, status: int = 200, **extra: object) -> Response:
        now = service.clock()
        with service.lock:
            tokens = service.store.tokens(list(v.resources))
            maps = {r: service.resources.of(r) for r in v.resources}
        rows = [(t, t.state(now).value, t.time_left(now)) for t in tokens]
        rows.sort(key=lambda r: -r[0].issued_at)
        return portal.page("admin.html.j2", status, v=v, tokens=rows, maps=maps,
                           urgencies=URGENCIES, policies=POLICIES, **extra)  # fmt: skip

    @app.get(PORTAL + "/admin", include_in_schema=False)
    def main(request: Request) -> Response:
        v = admin(request)
        return redirect("/login") if v is None else admin_page(v)

    @app.post(PORTAL + "/admin/tokens", include_in_schema=False)
    async def issue(request: Request) -> Response:
        v, fields = await portal.form(request, "admin")
        chosen = [r for r in v.resources if fields.get(f"r:{r}") == "on"]
        try:
            if not chosen:
                raise ValueError("choose at least one of your resources")
            urgency = Urgency.parse(fields.get("max_urgency", ""))
            hours = float(fields.get("hours", ""))
            if not 0 < hours <= MAX_SESSION_HOURS:
                raise ValueError(f"a session lasts more than 0 and at most {MAX_SESSION_HOURS} h")
            label = fields.get("label", "").strip()[:200]
        except ValueError as exc:
            return admin_page(v, 422, error=str(exc))
        now = service.clock()
        with service.lock:
            token, value = service.store.issue(chosen, urgency, hours * 3600, now,
                                               issued_by=v.name, label=label)  # fmt: skip
        return admin_page(v, 201, issued=token, value=show(value))

    @app.post(PORTAL + "/admin/tokens/{token_id}/expire", include_in_schema=False)
    async def expire(token_id: str, request: Request) -> Response:
        v, _ = await portal.form(request, "admin")
        with service.lock:
            token = service.store.get(token_id)
            if token is None or not token.resources & set(v.resources):
                raise refused(request, 404, "no such token among your resources", [v.subject],
                              actor=v.name, token_id=token_id)  # fmt: skip
            service.store.expire(token_id, service.clock(), v.name)
        return redirect("/admin")

    @app.post(PORTAL + "/admin/resources/{resource}", include_in_schema=False)
    async def set_map(resource: str, request: Request) -> Response:
        v, fields = await portal.form(request, "admin")
        if resource not in v.resources:
            raise refused(request, 403, f"not an administrator of {resource}", [v.subject],
                          actor=v.name, resource=resource)  # fmt: skip
        mapping = {u: fields[u] for u in URGENCIES if fields.get(u)}
        try:
            with service.lock:
                service.resources.set(resource, mapping, service.clock(), v.name)
        except ValueError as exc:
            return admin_page(v, 422, error=str(exc))
        return redirect("/admin")

    @app.get(PORTAL + "/admin/audit", include_in_schema=False)
    def audit(
        request: Request,
        resource: str = "",
        identity: str = "",
        outcome: str = "",
        hours: str = "",
    ) -> Response:
        v = admin(request)
        if v is None:
            return redirect("/login")
        error = ""
        if resource and resource not in v.resources:
            error, resource = f"not an administrator of {resource}", ""
        try:
            since = service.clock() - float(hours) * 3600 if hours else None
        except ValueError:
            error, since = "hours must be a number", None
        ok = {"ok": True, "refused": False}.get(outcome)
        with service.lock:
            rows = [
                r
                for r in service.store.audit(
                    resource=resource or None,
                    identity=identity.strip() or None,
                    ok=ok,
                    since=since,
                    limit=2000,
                )
                if r.visible_to(v.name, set(v.resources))
            ][:500]
        return portal.page("audit.html.j2", v=v, rows=rows, error=error,
                           f={"resource": resource, "identity": identity, "outcome": outcome,
                              "hours": hours}, now=time.time())  # fmt: skip
