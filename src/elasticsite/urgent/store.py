"""Tokens, team members and the audit log of every urgent attempt, in one SQLite file.

Every change is one transaction, so a crash never leaves a half-issued token or a
member on one resource of two. Token values are never stored: a token is found by the
digest of the value presented (:func:`~.tokens.digest`). Times come from the caller
(``now``), so sessions expire under an injected clock in tests exactly as they do live.

:meth:`UrgentStore.authenticate` is the submit filter: it finds the active sessions in
which the identity is a team member on the resource, says yes if one allows the
urgency, and otherwise gives the most telling reason. It writes every attempt to the
audit log, successful or not. Refusals are counted per subject (:mod:`.refusals`):
after ``max_failures`` refusals of one identity on one resource within
``failure_window`` seconds, that identity's further attempts there are held back
unexamined until the window has passed; other identities are not affected.
:meth:`UrgentStore.refuse` audits the other refusals (a wrong credential, a request
beyond the caller's rights) the same way, against the subjects the caller names.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

from elasticsite.sqlite import Connection, connect
from elasticsite.urgent.audit import SCHEMA as _AUDIT
from elasticsite.urgent.audit import AuditRecord, Which, migrate, read, write
from elasticsite.urgent.refusals import SCHEMA as _REFUSALS
from elasticsite.urgent.refusals import Refusals, identity_subject
from elasticsite.urgent.tokens import (
    Refusal,
    Token,
    TokenState,
    Urgency,
    authorize,
    check_identities,
    digest,
    new_token,
)

__all__ = ["COMPENSATION", "HELD_BACK", "RATE_LIMITED", "AuditRecord", "UrgentStore"]

RATE_LIMITED = "too many refused attempts; wait before trying again"
HELD_BACK = "rate limited"
"""The action of the audit row that counts the requests held back for one subject in
one window (its ``count``), instead of one row each."""
COMPENSATION = "compensation"
"""The label of a single-use next-to-run token given to the owner of a preempted job."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    digest TEXT NOT NULL UNIQUE,
    resources TEXT NOT NULL,
    max_urgency INTEGER NOT NULL,
    session_seconds REAL NOT NULL,
    issued_at REAL NOT NULL,
    issued_by TEXT NOT NULL,
    label TEXT NOT NULL,
    activated_at REAL,
    expires_at REAL,
    revoked_at REAL,
    single_use INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS members (
    token_id TEXT NOT NULL REFERENCES tokens(id),
    name TEXT NOT NULL,
    resource TEXT NOT NULL,
    identity TEXT NOT NULL,
    PRIMARY KEY (token_id, name, resource)
);
CREATE INDEX IF NOT EXISTS members_identity ON members(resource, identity);
"""


class UrgentStore:
    """The urgent-computing state of a site (or of a group of resources)."""

    def __init__(
        self, path: str | Path, *, max_failures: int = 10, failure_window: float = 300.0
    ) -> None:
        # NORMAL in WAL mode: a committed change survives the process dying at any point;
        # only an operating-system crash or power loss can take the last ones back.
        self.db: Connection = connect(
            Path(path), synchronous="NORMAL", busy_timeout=30.0, check_same_thread=False
        )
        self.db.create(";".join((_SCHEMA, _AUDIT, _REFUSALS)))
        migrate(self.db)
        self.refusals = Refusals(self.db, max_failures=max_failures, window=failure_window)

    @property
    def max_failures(self) -> int:
        """Refusals of one subject within the window before it is held back."""
        return self.refusals.max_failures

    @max_failures.setter
    def max_failures(self, value: int) -> None:
        self.refusals.max_failures = value

    @property
    def failure_window(self) -> float:
        return self.refusals.window

    def close(self) -> None:
        self.db.close()

    # -- tokens ---------------------------------------------------------------------

    def issue(
        self,
        resources: Sequence[str],
        max_urgency: Urgency,
        session_seconds: float,
        now: float,
        *,
        issued_by: str,
        label: str = "",
    ) -> tuple[Token, str]:
        """A new token for ``resources``; returns it and its value, shown only now."""
        value = new_token()
        token = Token(
            id=secrets.token_hex(4),
            digest=digest(value),
            resources=frozenset(resources),
            max_urgency=max_urgency,
            session_seconds=float(session_seconds),
            issued_at=now,
            issued_by=issued_by,
            label=label,
        )
        with self.db.transaction():
            self.db.execute(
                "INSERT INTO tokens (id, digest, resources, max_urgency, session_seconds, "
                "issued_at, issued_by, label) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (token.id, token.digest, json.dumps(sorted(token.resources)),
                 int(max_urgency), token.session_seconds, now, issued_by, label),
            )  # fmt: skip
            self._audit(now, "issue", issued_by, token.id, ok=True)
        return token, value

    def _token(self, row: tuple[Any, ...]) -> Token:
        tid, dig, resources, urgency, seconds, issued_at, by, label, act, exp, rev, once = row
        token = Token(tid, dig, frozenset(json.loads(resources)), Urgency(urgency), seconds,
                      issued_at, by, label, activated_at=act, expires_at=exp,
                      revoked_at=rev, single_use=bool(once))  # fmt: skip
        for name, resource, identity in self.db.execute(
            "SELECT name, resource, identity FROM members WHERE token_id = ? ORDER BY name",
            (tid,),
        ):
            token.members.setdefault(name, {})[resource] = identity
        return token

    def get(self, token_id: str) -> Token | None:
        row = self.db.execute("SELECT * FROM tokens WHERE id = ?", (token_id,)).fetchone()
        return None if row is None else self._token(row)

    def by_value(self, value: str) -> Token | None:
        """The token whose value is ``value`` (any typing of it), or None."""
        try:
            d = digest(value)
        except ValueError:
            return None
        row = self.db.execute("SELECT * FROM tokens WHERE digest = ?", (d,)).fetchone()
        return None if row is None else self._token(row)

    def tokens(self, resources: Sequence[str] | None = None) -> list[Token]:
        """Every token, or those naming one of ``resources`` (an administrator's)."""
        out = [self._token(r) for r in self.db.execute("SELECT * FROM tokens ORDER BY issued_at")]
        if resources is not None:
            out = [t for t in out if t.resources & set(resources)]
        return out

    def compensate(
        self, resource: str, identity: str, now: float, *, actor: str, days: float = 7.0
    ) -> Token:
        """A single-use session for the owner of a job an urgent one preempted: their next
        similar job on ``resource`` runs next-to-run. Active at once; nobody holds a value."""
        token, _ = self.issue([resource], Urgency.YELLOW, days * 86400, now, issued_by=actor,
                              label=COMPENSATION)  # fmt: skip
        with self.db.transaction():
            self.db.execute("UPDATE tokens SET single_use = 1 WHERE id = ?", (token.id,))
            self.db.execute("INSERT INTO members VALUES (?, ?, ?, ?)",
                            (token.id, identity, resource, identity))  # fmt: skip
            current = self._existing(token.id)
            current.activate(now)
            self._save_times(current)
            self._audit(now, "compensate", actor, token.id, resource=resource,
                        identity=identity, ok=True)  # fmt: skip
        return self._existing(token.id)

    def _save_times(self, token: Token) -> None:
        self.db.execute(
            "UPDATE tokens SET activated_at = ?, expires_at = ?, revoked_at = ? WHERE id = ?",
            (token.activated_at, token.expires_at, token.revoked_at, token.id),
        )

    def activate(self, token: Token, now: float, actor: str) -> Token:
        """Start the token's session (the token manager's right)."""
        with self.db.transaction():
            current = self.get(token.id)
            assert current is not None
            current.activate(now)
            self._save_times(current)
            self._audit(now, "activate", actor, token.id, ok=True)
        return current

    def expire(self, token_id: str, now: float, actor: str) -> Token:
        """End the token's use now (an administrator's right): no session can start or go on."""
        with self.db.transaction():
            token = self._existing(token_id)
            if token.state(now) in (TokenState.ISSUED, TokenState.ACTIVE):
                token.expires_at = now
                self._save_times(token)
            self._audit(now, "expire", actor, token_id, ok=True)
        return token

    def revoke(self, token_id: str, now: float, actor: str) -> Token:
        with self.db.transaction():
            token = self._existing(token_id)
            if token.revoked_at is None:
                token.revoked_at = now
                self._save_times(token)
            self._audit(now, "revoke", actor, token_id, ok=True)
        return token

    def _existing(self, token_id: str) -> Token:
        token = self.get(token_id)
        if token is None:
            raise KeyError(token_id)
        return token

    # -- team members ---------------------------------------------------------------

    def add_member(
        self, token_id: str, name: str, identities: Mapping[str, str], now: float, actor: str
    ) -> Token:
        """Add (or update) a team member, at any time, even during a session."""
        name = name.strip()
        if not name or len(name) > 128 or any(ord(c) < 32 for c in name):
            raise ValueError("a member's name must be 1-128 printable characters")
        with self.db.transaction():
            token = self._existing(token_id)
            ids = check_identities(token.resources, identities)
            self.db.execute("DELETE FROM members WHERE token_id = ? AND name = ?",
                            (token_id, name))  # fmt: skip
            self.db.executemany(
                "INSERT INTO members VALUES (?, ?, ?, ?)",
                [(token_id, name, r, i) for r, i in sorted(ids.items())],
            )
            self._audit(now, "add member", actor, token_id, identity=name, ok=True)
        return self._existing(token_id)

    def remove_member(self, token_id: str, name: str, now: float, actor: str) -> Token:
        with self.db.transaction():
            self._existing(token_id)
            gone = self.db.execute("DELETE FROM members WHERE token_id = ? AND name = ?",
                                   (token_id, name)).rowcount  # fmt: skip
            if not gone:
                raise KeyError(name)
            self._audit(now, "remove member", actor, token_id, identity=name, ok=True)
        return self._existing(token_id)

    def sessions_of(self, resource: str | None, identity: str, now: float) -> list[Token]:
        """The tokens in which ``identity`` is a member (on ``resource``, or any), active
        first (a team member's view: their sessions, without the token values)."""
        sql = "SELECT DISTINCT token_id FROM members WHERE identity = ?"
        args: list[object] = [identity]
        if resource is not None:
            sql += " AND resource = ?"
            args.append(resource)
        found = [self._existing(tid) for (tid,) in self.db.execute(sql, args).fetchall()]
        return sorted(found, key=lambda t: (t.state(now) is not TokenState.ACTIVE, t.issued_at))

    # -- the submit filter ----------------------------------------------------------

    def authenticate(
        self, resource: str, identity: str, urgency: Urgency, now: float, source: str = ""
    ) -> tuple[Token | None, str | None]:
        """The session allowing ``identity`` to submit at ``urgency`` on ``resource``, or
        None and why not; audited either way. Refusals count against this identity on
        this resource, whoever asks and from wherever."""
        subject = identity_subject(resource, identity)
        with self.db.transaction():
            if self.held_back(now, [subject], actor=identity, resource=resource,
                              identity=identity, source=source):  # fmt: skip
                return None, RATE_LIMITED
            candidates = self.sessions_of(resource, identity, now)
            best: Refusal | None = Refusal.NO_SESSION
            chosen: Token | None = None
            # A session of the group's own token before a compensation one, which is spent.
            candidates.sort(key=lambda t: t.single_use)
            for token in candidates:
                why = authorize(token, resource, identity, urgency, now)
                if why is None:
                    chosen, best = token, None
                    break
                if _rank(why) > _rank(best):
                    best = why
            reason = None if best is None else best.value
            if chosen is not None and chosen.single_use:
                chosen.expires_at = now + 1e-6  # used once: gone for the next request
                self._save_times(chosen)
            self._audit(now, "authenticate", identity, chosen.id if chosen else "",
                        resource=resource, identity=identity, urgency=urgency.label,
                        ok=chosen is not None, reason=reason or "", source=source)  # fmt: skip
            if chosen is None:
                self.refusals.strike([subject], now)
            return chosen, reason

    def held_back(
        self, now: float, subjects: Sequence[str], *, actor: str = "", token_id: str = "",
        resource: str = "", identity: str = "", source: str = "",
    ) -> bool:  # fmt: skip
        """Whether one of ``subjects`` has had too many refusals lately to be heard now;
        if so, the request is counted into that subject's rate-limit row of this window
        (one row a window, however many requests: the log cannot be flooded)."""
        subject = self.refusals.blocked(subjects, now)  # a read: no write lock unless held
        if subject is None:
            return False
        with self.db.transaction():
            seq = self.refusals.held_row(subject, now)
            if seq is not None:
                self.db.execute("UPDATE audit SET count = count + 1 WHERE seq = ?", (seq,))
                return True
            row = {"resource": resource, "identity": identity, "source": source}
            seq = self._audit(now, HELD_BACK, actor, token_id, ok=False, reason=RATE_LIMITED, **row)
            self.refusals.hold(subject, seq, now)
            return True

    def refuse(
        self, now: float, subjects: Sequence[str], action: str, reason: str, *, actor: str = "",
        token_id: str = "", resource: str = "", identity: str = "", source: str = "",
    ) -> bool:  # fmt: skip
        """Audit a refused request and count it against ``subjects`` (a wrong credential:
        its source; a request beyond a principal's rights: the principal). True if one
        of them was held back already: then the request only adds to the count of its
        window's rate-limit row."""
        with self.db.transaction():
            if self.held_back(now, subjects, actor=actor, token_id=token_id, resource=resource,
                              identity=identity, source=source):  # fmt: skip
                return True
            self._audit(now, action, actor, token_id, resource=resource, identity=identity,
                        ok=False, reason=reason, source=source)  # fmt: skip
            self.refusals.strike(subjects, now)
            return False

    # -- the audit log --------------------------------------------------------------

    def record(self, now: float, action: str, actor: str, token_id: str = "", *,
               source: str = "") -> None:  # fmt: skip
        """Audit something that went through (a sign-in), in a transaction of its own."""
        with self.db.transaction():
            self._audit(now, action, actor, token_id, ok=True, source=source)

    def _audit(
        self, now: float, action: str, actor: str, token_id: str, *, resource: str = "",
        identity: str = "", urgency: str = "", ok: bool, reason: str = "", source: str = "",
    ) -> int:  # fmt: skip
        row = {"resource": resource, "identity": identity, "urgency": urgency, "source": source}
        return write(self.db, now, action, actor, token_id, ok=ok, reason=reason, **row)

    def audit(self, **which: Unpack[Which]) -> Iterator[AuditRecord]:
        """The audit log, newest first, filtered (:func:`.audit.read`)."""
        return read(self.db, **which)


_ORDER = [Refusal.NO_SESSION, Refusal.NOT_MEMBER, Refusal.RESOURCE, Refusal.NOT_ACTIVE,
          Refusal.REVOKED, Refusal.EXPIRED, Refusal.URGENCY]  # fmt: skip


def _rank(why: Refusal | None) -> int:
    """How much a refusal tells: a session that exists but forbids the urgency says
    more than one that has expired, which says more than none at all."""
    return -1 if why is None else _ORDER.index(why)
