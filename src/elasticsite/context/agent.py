"""The recontextualization agent: keeps one node in step with its context's membership.

The agent joins the context named in its user data, then loops: it asks the broker
for the entries it has not applied yet (long polling by default, or every
``period`` seconds as in paper 001), applies them in order by running the
administrator's scripts (``init/`` once ever, ``add/`` per node joined, ``delete/``
per node departed, ``restart/`` once after each batch) and records its progress.

Restart semantics. Progress is recorded after every entry (one synced line
appended to a journal; the whole state file is rewritten atomically, temporary
file + fsync + rename, only when the journal grows as long as the membership), so
a crash loses at most the entry being applied, whose scripts run again after the
restart: scripts must be idempotent, and the shipped ones are. Entries saved as
applied are never run again. Restart scripts run once after a batch; a crash
before they finish runs them again at the next start. A snapshot is applied as a
diff against the known members, and until it is complete the state asks for a new
snapshot (``since=0``), so a crash in the middle only finishes the diff.
``init/`` runs once per state file, before the first join.
"""

from __future__ import annotations

import contextlib
import logging
import random
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from types import FrameType
from typing import Any, Protocol

from elasticsite.context.agent_config import (
    USERDATA_ENV,
    AgentSettings,
    ContextRef,
    Identity,
    configure,
    discover_identity,
    load_userdata,
)
from elasticsite.context.agent_state import AgentError, AgentState
from elasticsite.context.applying import DEFAULT_SCRIPTS, SCRIPT_KINDS, ScriptRunner, Step, plan
from elasticsite.context.client import ContextError, split_context_uri
from elasticsite.context.hostkey import host_key_candidates, sign_challenge
from elasticsite.context.models import JoinResult, Updates

__all__ = [
    "DEFAULT_SCRIPTS",
    "SCRIPT_KINDS",
    "USERDATA_ENV",
    "Agent",
    "AgentError",
    "AgentSettings",
    "AgentState",
    "Backoff",
    "BrokerLink",
    "ContextRef",
    "Identity",
    "ScriptRunner",
    "Step",
    "configure",
    "discover_identity",
    "load_userdata",
    "plan",
    "run_agent",
]

log = logging.getLogger(__name__)


class BrokerLink(Protocol):
    """What the agent needs from the broker: :class:`~elasticsite.context.client.NodeClient`.

    Methods raise :class:`~elasticsite.context.client.ContextError` (``status`` None
    when the broker gave no answer). Updates, update and leave use the node
    credential held in ``node_id``/``node_secret`` once set, the context's before.
    """

    node_id: str | None
    node_secret: str | None

    def join(self, node: Mapping[str, Any]) -> JoinResult: ...
    def update(self, node: Mapping[str, Any]) -> int: ...
    def leave(self) -> int: ...
    def updates(self, since: int, wait: float = 0) -> Updates: ...


def _retryable(exc: ContextError) -> bool:
    """No answer, or the broker's own failure: worth trying again later."""
    return exc.status is None or exc.status >= 500


# --- retrying ------------------------------------------------------------------------


class Backoff:
    """Exponential delays, capped, with jitter so a fleet does not retry in step."""

    def __init__(
        self, base: float = 0.5, cap: float = 30.0, rng: random.Random | None = None
    ) -> None:
        self.base = base
        self.cap = cap
        self.attempts = 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        """The next delay: uniform in [d/2, d], d = min(cap, base * 2**attempts)."""
        ceiling = min(self.cap, self.base * 2**self.attempts)
        self.attempts = min(self.attempts + 1, 62)
        return self._rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempts = 0


# --- the agent -----------------------------------------------------------------------


class _Interrupted(BaseException):
    """Raised by the signal handler to cut a network wait or a sleep short."""


class Agent:
    """One node's agent. :meth:`run` returns the process exit code."""

    journal_slack = 100
    """Journal lines allowed beyond the membership's size before a full rewrite."""

    def __init__(
        self,
        settings: AgentSettings,
        link: BrokerLink,
        *,
        sleep: Callable[[float], None] = time.sleep,
        backoff: Backoff | None = None,
    ) -> None:
        self.settings = settings
        self.link = link
        self.state = AgentState.load(settings.state, settings.context.uri)
        link.node_id, link.node_secret = self.state.node_id, self.state.node_secret
        self.runner = ScriptRunner(
            settings.scripts,
            context_uri=settings.context.uri,
            root=settings.root,
            self_hostname=settings.identity.hostname,
            timeout=settings.script_timeout,
            strict=settings.strict,
        )
        self._sleep = sleep
        self._backoff = backoff or Backoff()
        self._stop = False
        self._interruptible = False
        self._journaled = 0

    # -- signals

    def request_stop(self, signum: int = signal.SIGTERM, _frame: FrameType | None = None) -> None:
        """Signal handler: stop after the current entry; cut a wait short at once."""
        log.info("received %s: stopping", signal.Signals(signum).name)
        self._stop = True
        if self._interruptible:
            self._interruptible = False
            raise _Interrupted

    @contextlib.contextmanager
    def _waiting(self) -> Iterator[None]:
        """A stretch (network wait, sleep) that a stop request may interrupt."""
        if self._stop:
            raise _Interrupted
        self._interruptible = True
        try:
            yield
        finally:
            self._interruptible = False

    def _pause(self, seconds: float) -> None:
        if seconds > 0:
            with self._waiting():
                self._sleep(seconds)

    def _retry_later(self, what: str, exc: ContextError) -> None:
        delay = self._backoff.next()
        log.warning("%s: %s; retrying in %.1f s", what, exc.detail, delay)
        self._pause(delay)

    # -- main loop

    def run(self) -> int:
        """Join, then apply updates until stopped (or caught up, with ``once``)."""
        handlers = {s: signal.signal(s, self.request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            try:
                self._start()
                self._loop()
            except _Interrupted:
                pass
            if self.state.restart_pending:
                self._restart()
        finally:
            for s, h in handlers.items():
                signal.signal(s, h)
        if self._stop and self.settings.leave and not self.settings.once:
            self._leave()
        return 0

    def _start(self) -> None:
        if not self.state.init_done:
            log.info("first start: running init scripts")
            self.runner.run("init")
            self.state.init_done = True
            self._save()
        if self.state.restart_pending:  # the last run stopped before its restart scripts
            self._restart()
        self._ensure_joined()

    def _loop(self) -> None:
        s = self.settings
        while not self._stop:
            started = time.monotonic()
            wait = 0.0 if (s.period > 0 or s.once) else s.wait
            updates = self._fetch(wait)
            if updates.entries:
                self._apply(updates)
            elif s.once:
                return
            if s.period > 0:
                self._pause(s.period - (time.monotonic() - started))
            elif not updates.entries and time.monotonic() - started < wait / 2:
                self._pause(min(1.0, wait))  # a long poll answered early and empty: no spin

    def _fetch(self, wait: float) -> Updates:
        """One updates request, retried until it answers; handles 401 and 409."""
        while True:
            try:
                with self._waiting():
                    updates = self.link.updates(self.state.last_id, wait)
                self._backoff.reset()
                return updates
            except ContextError as exc:
                if _retryable(exc):
                    self._retry_later("broker unavailable", exc)
                elif exc.status == 401:
                    log.warning("broker refused this node's credential: joining again")
                    self._forget_node()
                    self._ensure_joined()
                elif exc.status == 409:
                    log.warning("broker has no entry %d: resynchronising", self.state.last_id)
                    self.state.last_id = 0
                    self._save()
                else:
                    raise AgentError(f"broker refused the updates request: {exc}") from None

    def _forget_node(self) -> None:
        self.state.node_id = self.state.node_secret = None
        self.state.joined_as = None
        self.link.node_id = self.link.node_secret = None
        self._save()

    def _ensure_joined(self) -> None:
        """Join, or update our record if our identity changed since we joined."""
        body = self.settings.identity.body()
        proof: dict[str, str] | None = None
        while self.state.node is None or self.state.joined_as != body:
            try:
                with self._waiting():
                    if self.state.node is None:
                        signed = body if proof is None else {**body, "proof": proof}
                        result: JoinResult | None = self.link.join(signed)
                    else:
                        self.link.update(body)
                        result = None
            except ContextError as exc:
                was_signed, proof = proof is not None, self._prove(exc)
                if proof is not None and not was_signed:
                    continue  # our old record holds our name: prove we hold its host key
                if _retryable(exc) or exc.status in (409, 429):
                    # 409: a current member holds our name (an administrator may remove
                    # it); 429: the context's join budget is spent for now.
                    self._retry_later("cannot join yet", exc)
                elif exc.status == 401 and self.state.node is not None:
                    self._forget_node()  # removed meanwhile: join afresh
                elif exc.status == 401:
                    raise AgentError(
                        f"broker refused the context key/secret for {self.settings.context.uri}"
                        " (context deleted, or wrong user data)"
                    ) from None
                else:
                    raise AgentError(f"broker refused this node's record: {exc.detail}") from None
                continue
            if result is not None:
                self.state.node_id, self.state.node_secret = result.node_id, result.node_secret
                self.link.node_id, self.link.node_secret = result.node_id, result.node_secret
                log.info(
                    "joined %s as node %s (entry %d)",
                    self.settings.context.uri,
                    result.node_id,
                    result.entry_id,
                )
            else:
                log.info("updated this node's record: its identity changed")
            self.state.joined_as = body
            self._save()
            self._backoff.reset()

    def _prove(self, exc: ContextError) -> dict[str, str] | None:
        """Our answer to the challenge of a ``409`` to our join, if it carries one and
        our host key's private half is at hand."""
        challenge = exc.challenge
        if exc.status != 409 or challenge is None or self.state.node is not None:
            return None
        s = self.settings
        ours = (split_context_uri(s.context.uri)[1], s.identity.hostname)
        if (challenge.context_id, challenge.hostname) != ours:
            return None  # we sign for our own context and name only
        keys = s.host_keys or host_key_candidates(s.root)
        proof = sign_challenge(challenge, s.identity.ssh_host_key, keys)
        return proof.model_dump() if proof is not None else None

    def _apply(self, updates: Updates) -> None:
        """Apply one answer, saving after every step, then run the restart scripts."""
        steps = plan(self.state.members, updates)
        if updates.snapshot:
            log.info(
                "applying a snapshot of %d members (%d changes)", len(updates.entries), len(steps)
            )
            # Until the diff is complete, a restart asks for a new snapshot.
            self._record({"last_id": 0})
        for step in steps:
            self.runner.run(step.op, step)
            change: dict[str, Any] = {"restart_pending": True}
            if step.op == "add":
                change["add"] = step.node.model_dump()
            else:
                change["delete"] = step.node.node_id
            if not updates.snapshot:
                change["last_id"] = step.entry_id
            self._record(change)
            log.info("applied entry %d: %s %s", step.entry_id, step.op, step.node.hostname)
            if self._stop and not updates.snapshot:
                return  # run() runs the restart scripts for what was applied
        last = updates.last_id if updates.snapshot else updates.entries[-1].id
        if last != self.state.last_id:
            self._record({"last_id": last})
        if steps:
            self._restart()

    def _restart(self) -> None:
        self.runner.run("restart")
        self._record({"restart_pending": False})

    def _record(self, change: dict[str, Any]) -> None:
        """Journal one change; rewrite the whole state once the journal has grown
        as long as the membership (so the cost per entry stays constant)."""
        self.state.record(self.settings.state, change)
        self._journaled += 1
        if self._journaled > self.journal_slack + len(self.state.members):
            self._save()

    def _leave(self) -> None:
        if self.state.node is None:
            return
        try:
            self.link.leave()
        except ContextError as exc:
            if exc.status != 404:
                log.warning("could not leave the context: %s", exc.detail)
                return
        log.info("left %s", self.settings.context.uri)
        self._forget_node()

    def _save(self) -> None:
        self.state.save(self.settings.state)
        self._journaled = 0


def run_agent(settings: AgentSettings) -> int:
    """Run the agent against the real broker until stopped; returns the exit code."""
    from elasticsite.context.client import NodeClient

    c = settings.context
    try:
        link = NodeClient(c.uri, c.key, c.secret, ca=c.ca_pem)
    except ContextError as exc:
        raise AgentError(exc.detail) from None
    with link:
        return Agent(settings, link).run()
