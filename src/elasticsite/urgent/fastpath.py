"""The submit filter's fast path: ``POST /urgent/authenticate`` answered beneath FastAPI.

Every urgent submission on every resource asks this, so it must cost little. A
well-formed request from a user or resource key that may ask is answered here, by the
same functions as the documented route (:func:`~.routes.submitting_identity`,
:func:`~.routes.authenticated`: one audited decision). Anything else (no or a wrong
key, a body that does not validate, an identity the caller may not claim) is passed,
body and all, to the route, which gives the contract's error answers. Nothing is
audited twice: the decision is taken only once the request is known to be answered
here.
"""

from __future__ import annotations

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from elasticsite.urgent.routes import UrgentService, authenticated, submitting_identity
from elasticsite.urgent.schemas import AuthenticateIn
from elasticsite.web.credentials import parse_authorization

__all__ = ["AuthenticateFastPath"]

PATH = "/urgent/authenticate"
MAX_BODY = 8192


class AuthenticateFastPath:
    """ASGI middleware: the happy path of the urgent submit filter."""

    def __init__(self, app: ASGIApp, service: UrgentService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more and size <= MAX_BODY:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay(b"".join(chunks), message, receive), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
        body = b"".join(chunks)
        answer = None if more else self._answer(scope, body)
        if answer is None:
            await self.app(scope, _replay(body, None, receive, more), send)
            return
        status, payload = answer
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(payload)).encode())]  # fmt: skip
        if status == 429:
            headers.append((b"retry-after", b"60"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    def _answer(self, scope: Scope, body: bytes) -> tuple[int, bytes] | None:
        header = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value.decode("latin-1")
        cred = parse_authorization(header)
        if cred is None or cred[0] != "bearer":
            return None
        with self.service.lock:
            who = self.service.principals.by_key(cred[2])
        if who is None:
            return None
        try:
            request = AuthenticateIn.model_validate_json(body)
        except ValidationError:
            return None
        identity = submitting_identity(who, request)
        if identity is None:
            return None
        client = scope.get("client")
        return authenticated(self.service, request, identity, client[0] if client else "")


def _replay(body: bytes, pending: Message | None, receive: Receive, more: bool = False) -> Receive:
    """A ``receive`` that gives back what was read, then reads on."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": more}
        if pending is not None:
            return pending
        return await receive()

    return again
