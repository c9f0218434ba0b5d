"""What a portal's pages are given: who is signed in, and the portal they render in.

:class:`Pages` is the interface the administrators' pages (:mod:`.portal_admin`) use of
the portal (:class:`~.portal.Portal` is one), so they are written against it and not
against the portal's module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse

from elasticsite.urgent.refusals import principal_subject, token_subject
from elasticsite.urgent.routes import UrgentService
from elasticsite.web.pages import PAGE_HEADERS

__all__ = ["PORTAL", "Pages", "Visitor", "redirect"]

PORTAL = "/urgent/portal"


@dataclass(frozen=True, slots=True)
class Visitor:
    """Who a portal session belongs to: ``kind`` admin, user or manager."""

    kind: str
    name: str
    csrf: str
    token_id: str = ""
    resources: tuple[str, ...] = ()
    """An administrator's resources."""
    identities: tuple[tuple[str, str], ...] = ()
    """A user's identity on each resource."""
    key_digest: str = ""
    """The digest of the key an administrator or a user signed in with."""

    @property
    def subject(self) -> str:
        """Whom the visitor's refused requests count against."""
        if self.kind == "manager":
            return token_subject(self.token_id)
        return principal_subject(self.name)


def redirect(path: str) -> RedirectResponse:
    """A redirect to ``path`` under the portal, with the pages' headers."""
    return RedirectResponse(PORTAL + path, 303, headers=PAGE_HEADERS)


class Pages(Protocol):
    """The portal as its pages see it: its service, its visitors, its pages and forms."""

    @property
    def service(self) -> UrgentService:
        """The urgent services the portal shows."""

    def visitor(self, request: Request) -> Visitor | None:
        """Who is signed in, or None."""

    def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        """Template ``name`` rendered with ``context``."""

    async def form(self, request: Request, kind: str | None = None) -> tuple[Visitor, dict]:
        """The signed-in visitor (of ``kind``) and their CSRF-checked form, or a refusal."""
