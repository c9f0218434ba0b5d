"""The recontextualization broker: its contexts, their admission rules and long polls.

:class:`Broker` holds the store, the caller checks (:class:`~elasticsite.context.auth.
Authority`) and the long-poll waiters; the HTTP routes (:mod:`elasticsite.context.routes`)
and the long-poll fast path (:mod:`elasticsite.context.middleware`) both answer through it,
so a route and the fast path cannot disagree.

Long polls wait on an in-memory future per request, registered in a per-context set
and all resolved at once when the context changes; nothing polls the database.

A join that would replace a member (replace-on-rejoin) is answered with a challenge
until it carries a valid proof of the member's host key
(:mod:`elasticsite.context.hostkey`): a nonce for that context and host name, valid
:data:`CHALLENGE_TTL` seconds, used at most once.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from fastapi import HTTPException, Request

from elasticsite.context import hostkey
from elasticsite.context.admission import BrokerLimits, ProofNeeded, Refused, admit
from elasticsite.context.auth import Authority, load_admin_token
from elasticsite.context.models import Challenge, ChallengeBody, HostKeyProof, NodeIn
from elasticsite.context.store import ContextState, Store
from elasticsite.files import private_dir

__all__ = ["CHALLENGE_TTL", "MAX_WAIT", "Broker", "Challenged", "open_broker"]

MAX_WAIT = 60.0
"""Longest long poll a caller may ask for (seconds)."""

_RECORD_OVERHEAD = 64
"""Bytes a member's stored record adds to its fields (node id, join time, keys)."""

CHALLENGE_TTL = 60.0
"""Seconds a replace-on-rejoin challenge may be answered in."""

_MAX_CHALLENGES = 1024
"""Challenges a context keeps at once (the oldest give way; each cost a join's budget)."""


class Challenged(Exception):
    """A join must prove its host key first: the ``409`` answer to send."""

    def __init__(self, body: ChallengeBody) -> None:
        super().__init__(body.detail)
        self.body = body


class Broker:
    """Contexts, their credentials and their waiting long polls."""

    def __init__(
        self,
        store: Store,
        admin_token: str,
        *,
        public_url: str | None = None,
        limits: BrokerLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.auth = Authority(store, admin_token)
        self.public_url = public_url.rstrip("/") if public_url else None
        self.limits = limits or BrokerLimits()
        self.clock = clock
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}

    def waiting(self) -> int:
        """Long polls waiting now, over all contexts."""
        return sum(len(w) for w in self._waiters.values())

    def admit(
        self,
        ctx: ContextState,
        node: NodeIn,
        request: Request,
        *,
        updating: str | None = None,
    ) -> list[str]:
        """The members a join replaces, after the context's admission rules; a refusal
        becomes the HTTP answer it names, a replacement without proof :class:`Challenged`."""
        size = len(node.model_dump_json(exclude={"proof"})) + _RECORD_OVERHEAD
        now = self.clock()
        proof: HostKeyProof | None = getattr(node, "proof", None)
        why = None
        if proof is not None and updating is None:
            why = self._check_proof(ctx, node, proof, now)
        proven = why == ""
        try:
            source = request.client.host if request.client else None
            replaced = admit(
                ctx, node, size, self.limits, now, updating=updating, source=source, proven=proven
            )
        except ProofNeeded as exc:
            detail = f"{exc.detail} ({why})" if why else exc.detail
            challenge = self._challenge(ctx, node.hostname, now)
            raise Challenged(ChallengeBody(detail=detail, challenge=challenge)) from None
        except Refused as exc:
            headers = None
            if exc.retry_after is not None:
                headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
            raise HTTPException(exc.status, exc.detail, headers) from None
        if proof is not None and proven:
            ctx.challenges.pop(proof.nonce, None)  # used up by the join it admits
        return replaced

    def _check_proof(self, ctx: ContextState, node: NodeIn, proof: HostKeyProof, now: float) -> str:
        """Why ``proof`` does not answer a live challenge of ``ctx`` for ``node``'s host
        name with its host key, or an empty string if it does."""
        held = ctx.challenges.get(proof.nonce)
        if held is None or held[0] != node.hostname:
            return "the proof's nonce is no current challenge for this host name"
        if now >= held[1]:
            del ctx.challenges[proof.nonce]
            return "the challenge expired"
        data = hostkey.message(proof.nonce, ctx.id, node.hostname)
        if not hostkey.verify(node.ssh_host_key, data, proof.signature):
            return "the signature does not verify with the SSH host key presented"
        return ""

    def _challenge(self, ctx: ContextState, hostname: str, now: float) -> Challenge:
        """A new single-use challenge of ``ctx`` for ``hostname``."""
        pending = ctx.challenges
        while pending:
            oldest = next(iter(pending))
            if pending[oldest][1] > now and len(pending) < _MAX_CHALLENGES:
                break
            del pending[oldest]
        nonce = secrets.token_urlsafe(32)
        pending[nonce] = (hostname, now + CHALLENGE_TTL)
        return Challenge(
            nonce=nonce, context_id=ctx.id, hostname=hostname, expires_in=CHALLENGE_TTL
        )

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

    async def updates(self, ctx: ContextState, since: int, wait: float) -> bytes | None:
        """The answer to a reader of ``ctx`` that applied everything up to ``since``
        (not beyond the context's last entry), after waiting up to ``wait`` seconds for
        news; None if the context was deleted meanwhile (its credentials are gone)."""
        if since == ctx.last_id and wait > 0:
            await self.wait(ctx.id, wait)
            if self.store.contexts.get(ctx.id) is not ctx:
                return None
        return ctx.updates_body(since)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def open_broker(
    state_dir: Path,
    *,
    admin_token: str | None = None,
    public_url: str | None = None,
    history: int = 10_000,
    limits: BrokerLimits | None = None,
) -> Broker:
    """The broker whose state lives in ``state_dir`` (created if needed)."""
    private_dir(state_dir)
    token = admin_token if admin_token is not None else load_admin_token(state_dir)[0]
    store = Store(state_dir / "broker.sqlite3", history=history)
    return Broker(store, token, public_url=public_url, limits=limits)
