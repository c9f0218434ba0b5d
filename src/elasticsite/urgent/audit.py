"""The urgent audit log: one row per attempt or change, read filtered, newest first.

Every submit-filter decision, every change to a token, its team or a resource's policy
map, and every refused request (a wrong credential, a request beyond the caller's
rights) is a row: when, what, by whom, on which resource and identity, the outcome and
why, and the source address. Requests held back by the rate limit are not a row each:
they add to the ``count`` of one row per subject and window (:mod:`.refusals`). No row
holds a key's or a token's value.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypedDict, Unpack

from elasticsite.sqlite import Connection

__all__ = ["SCHEMA", "AuditRecord", "Which", "migrate", "read", "write"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    action TEXT NOT NULL,
    actor TEXT NOT NULL,
    token_id TEXT NOT NULL,
    resource TEXT NOT NULL,
    identity TEXT NOT NULL,
    urgency TEXT NOT NULL,
    ok INTEGER NOT NULL,
    reason TEXT NOT NULL,
    source TEXT NOT NULL,
    count INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS audit_at ON audit(at);
CREATE INDEX IF NOT EXISTS audit_who ON audit(identity, at);
DROP INDEX IF EXISTS audit_source;
DROP INDEX IF EXISTS audit_refused_who;
DROP INDEX IF EXISTS audit_refused_source
"""
_COLUMNS = (
    "seq, at, action, actor, token_id, resource, identity, urgency, ok, reason, source, count"
)


def migrate(db: Connection) -> None:
    """Bring a log written by an older version up to date: its rows stood for one
    request each. (The refusal counts it was indexed for now live in ``strikes``.)"""
    with db.transaction():
        columns = {row[1] for row in db.execute("PRAGMA table_info(audit)")}
        if "count" not in columns:
            db.execute("ALTER TABLE audit ADD COLUMN count INTEGER NOT NULL DEFAULT 1")


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audited event: an attempt, a refusal, or a change to a token."""

    seq: int
    at: float
    action: str
    actor: str
    token_id: str
    resource: str
    identity: str
    urgency: str
    ok: bool
    reason: str
    source: str
    count: int = 1
    """How many requests the row stands for (more than one: requests held back)."""

    def visible_to(self, actor: str, resources: frozenset[str] | set[str]) -> bool:
        """Whether the administrator ``actor`` of ``resources`` may read it: what
        happened on their resources, their own changes, and refusals tied to no
        resource (wrong credentials, sources held back), which concern them all."""
        if self.resource:
            return self.resource in resources
        return not self.ok or self.actor == actor


def write(
    db: Connection, now: float, action: str, actor: str, token_id: str, *, resource: str = "",
    identity: str = "", urgency: str = "", ok: bool, reason: str = "", source: str = "",
) -> int:  # fmt: skip
    """Add a row (inside the caller's transaction); its sequence number."""
    cursor = db.execute(
        "INSERT INTO audit (at, action, actor, token_id, resource, identity, urgency, ok, "
        "reason, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (now, action, actor, token_id, resource, identity, urgency, int(ok), reason, source),
    )
    return int(cursor.lastrowid or 0)


class Which(TypedDict, total=False):
    """Which rows to read: those of a resource, of an identity, that went through or
    not, since a time; ``limit`` of them at most (500 unless said)."""

    resource: str | None
    identity: str | None
    ok: bool | None
    since: float | None
    limit: int


def read(db: Connection, **which: Unpack[Which]) -> Iterator[AuditRecord]:
    """The log, newest first, filtered."""
    resource, identity = which.get("resource"), which.get("identity")
    ok, since, limit = which.get("ok"), which.get("since"), which.get("limit", 500)
    where: list[str] = []
    args: list[object] = []
    for column, value in (("resource", resource), ("identity", identity)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    if ok is not None:
        where.append("ok = ?")
        args.append(int(ok))
    if since is not None:
        where.append("at >= ?")
        args.append(since)
    sql = f"SELECT {_COLUMNS} FROM audit" + (" WHERE " + " AND ".join(where) if where else "")
    for row in db.execute(sql + " ORDER BY seq DESC LIMIT ?", (*args, limit)):
        seq, at, action, actor, tid, res, ident, urg, okay, reason, src, count = row
        yield AuditRecord(seq, at, action, actor, tid, res, ident, urg, bool(okay), reason, src,
                          count)  # fmt: skip
