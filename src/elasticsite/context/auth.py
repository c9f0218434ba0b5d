"""Who is asking: the broker's admin token and the credentials it issued.

Three kinds of caller reach the broker (docs/recontext-api.md): the administrator with
a bearer token, anyone holding a context's key and secret, and a joined node with its
own id and secret. Secrets are compared by SHA-256 digest in constant time, and every
failure, malformed headers included, is the same ``401`` whether or not the context
exists, so one context's callers learn nothing of another.
"""

from __future__ import annotations

import hmac
import logging
import os
import stat
from pathlib import Path
from typing import Literal

from fastapi import HTTPException, Request

from elasticsite.context.store import ContextState, Store, digest, new_secret
from elasticsite.files import private_dir, private_file
from elasticsite.web.credentials import BASIC, BEARER, parse_authorization

__all__ = [
    "TOKEN_ENV",
    "TOKEN_FILE",
    "Authority",
    "BrokerError",
    "Role",
    "load_admin_token",
    "parse_authorization",
]

TOKEN_ENV = "ELASTICSITE_BROKER_TOKEN"
TOKEN_FILE = "admin.token"
_MIN_TOKEN = 16

log = logging.getLogger(__name__)

Role = Literal["admin", "context", "node"]


class BrokerError(Exception):
    """The broker cannot start as configured (message says what to change)."""


def load_admin_token(state_dir: Path, token_file: Path | None = None) -> tuple[str, str]:
    """The admin token and a description of where it came from (never the token).

    Order: ``token_file``, then ``$ELASTICSITE_BROKER_TOKEN``, then ``admin.token`` in
    the state directory, generated (mode 0600) when absent. An ``admin.token`` others
    may read is made the owner's alone, with a warning, like every state file; a
    ``token_file`` others may read (the operator's own file, perhaps shared with a
    group on purpose) is only warned about.
    """
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
            mode = stat.S_IMODE(token_file.stat().st_mode)
        except OSError as exc:
            raise BrokerError(f"cannot read admin token file {token_file}: {exc}") from None
        if mode & 0o077:
            log.warning(
                "%s is mode %04o, readable by others: whoever reads it administers the "
                "broker; chmod 600 it",
                token_file,
                mode,
            )
        source = str(token_file)
    elif os.environ.get(TOKEN_ENV):
        token, source = os.environ[TOKEN_ENV].strip(), f"${TOKEN_ENV}"
    else:
        path = state_dir / TOKEN_FILE
        private_dir(state_dir)
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
            with os.fdopen(fd, "w") as f:
                f.write(new_secret() + "\n")
        else:
            private_file(path)  # tightened (and said) if it was left readable by others
        token, source = path.read_text().strip(), str(path)
    if len(token) < _MIN_TOKEN:
        raise BrokerError(
            f"the admin token from {source} has {len(token)} characters; "
            f"use at least {_MIN_TOKEN} random ones"
        )
    return token, source


def unauthorized(scheme: str = BASIC) -> HTTPException:
    """The one answer to every failed check."""
    return HTTPException(401, "invalid or missing credentials", {"WWW-Authenticate": scheme})


class Authority:
    """Checks callers against the admin token's digest and the store's credentials."""

    def __init__(self, store: Store, admin_token: str) -> None:
        self.store = store
        self._admin = digest(admin_token)

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
        return cred is not None and cred[0] == "bearer" and self.is_admin_token(cred[2])

    def is_admin_token(self, token: str) -> bool:
        """Whether ``token`` is the admin token (compared by digest, in constant time)."""
        return hmac.compare_digest(digest(token), self._admin)

    def admin(self, request: Request) -> None:
        if not self.is_admin(request):
            raise unauthorized(BEARER)

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
            raise unauthorized(BASIC)
        scheme, user, secret = cred
        ctx = self.store.contexts.get(cid)
        if scheme == "bearer":
            if "admin" in allowed and hmac.compare_digest(digest(secret), self._admin):
                return ctx, "admin", ""
            raise unauthorized(BEARER)
        if ctx is not None:
            if user in ctx.members:
                if "node" in allowed and ctx.check_node(user, secret):
                    return ctx, "node", user
            elif "context" in allowed and ctx.check_context(user, secret):
                return ctx, "context", ""
        raise unauthorized(BASIC)

    def node_itself(self, request: Request, cid: str, node_id: str) -> ContextState:
        """The context, if the caller is node ``node_id`` itself; a node that already
        left learns so (404) rather than being told its credential is wrong."""
        cred = self._authorization(request)
        ctx = self.store.contexts.get(cid)
        if cred is not None and cred[0] == "basic" and cred[1] == node_id and ctx is not None:
            if ctx.check_node(node_id, cred[2]):
                return ctx
            if ctx.check_departed(node_id, cred[2]):
                raise HTTPException(404, f"node {node_id} has already left context {cid}")
        raise unauthorized(BASIC)
