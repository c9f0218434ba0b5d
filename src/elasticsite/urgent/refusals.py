"""Refused attempts counted per subject, and the rate limit they set.

A refusal counts against each *subject* it is about, and only against those: the
network a wrong credential came from (an IPv4 address; an IPv6 /64; an IPv4-mapped
IPv6 address counts as its IPv4 address), the identity a submission names on a
resource, the principal whose key was used, the token its manager holds. After
``max_failures`` refusals of one subject within ``window`` seconds, that subject is
held back until the oldest of them leaves the window; nobody else is. Nothing is
pooled: a refusal with no identity counts against its source alone.

A request held back is not a new refusal: it adds nothing to the count, so a flood
never prolongs its own block. The requests held back for one
subject within one window share one audit row, whose ``count`` goes up, so a flood
writes one row a window (:meth:`Refusals.held_row`, :meth:`Refusals.hold`).

Every table here is in the urgent store's file and changed inside the store's
transactions; strikes older than the window are dropped as new ones come.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable

from elasticsite.sqlite import Connection

__all__ = [
    "SCHEMA",
    "Refusals",
    "identity_subject",
    "principal_subject",
    "source_subject",
    "token_subject",
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS strikes (
    subject TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS strikes_subject ON strikes(subject, at);
CREATE INDEX IF NOT EXISTS strikes_at ON strikes(at);
CREATE TABLE IF NOT EXISTS held (
    subject TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    since REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS held_since ON held(since)
"""


def source_subject(host: str) -> str:
    """The subject a wrong credential from ``host`` counts against: its IPv4 address,
    or its IPv6 /64 (one site's or one customer's usual share), an IPv4-mapped IPv6
    address as the IPv4 address it is. A host that is no address (a Unix socket's
    peer) counts as itself; no host at all, as one unknown source."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return "source " + (host[:128] or "?")
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return f"source {address.ipv4_mapped}"
        return f"source {ipaddress.IPv6Network((int(address) >> 64 << 64, 64))}"
    return f"source {address}"


def identity_subject(resource: str, identity: str) -> str:
    """The subject of a submission: this identity on this resource, whoever asks."""
    return "identity " + json.dumps([resource, identity], ensure_ascii=False)


def principal_subject(name: str) -> str:
    """The subject of a refused request made with a principal's key."""
    return "principal " + name


def token_subject(token_id: str) -> str:
    """The subject of a refused request made with a token's value (its manager)."""
    return "token " + token_id


class Refusals:
    """The strikes of a store: how many refusals each subject had lately."""

    def __init__(self, db: Connection, *, max_failures: int, window: float) -> None:
        self.db = db
        self.max_failures = max_failures
        self.window = window

    def blocked(self, subjects: Iterable[str], now: float) -> str | None:
        """The first of ``subjects`` held back now, or None."""
        since = now - self.window
        for subject in subjects:
            # Bounded: no more than max_failures rows are read, however many there are.
            (n,) = self.db.execute(
                "SELECT COUNT(*) FROM (SELECT 1 FROM strikes WHERE subject = ? AND at >= ? "
                "LIMIT ?)",
                (subject, since, self.max_failures),
            ).fetchone()
            if n >= self.max_failures:
                return subject
        return None

    def strike(self, subjects: Iterable[str], now: float) -> None:
        """Count one refusal against each of ``subjects``."""
        self.db.executemany("INSERT INTO strikes VALUES (?, ?)", [(s, now) for s in subjects])
        self.db.execute("DELETE FROM strikes WHERE at < ?", (now - self.window,))

    def held_row(self, subject: str, now: float) -> int | None:
        """The audit row counting the requests held back for ``subject`` in the current
        window, if one was started."""
        row = self.db.execute(
            "SELECT seq FROM held WHERE subject = ? AND since >= ?", (subject, now - self.window)
        ).fetchone()
        return None if row is None else int(row[0])

    def hold(self, subject: str, seq: int, now: float) -> None:
        """Audit row ``seq`` counts the requests held back for ``subject`` from now on,
        for one window."""
        self.db.execute("DELETE FROM held WHERE since < ?", (now - self.window,))
        self.db.execute(
            "INSERT INTO held VALUES (?, ?, ?) ON CONFLICT (subject) DO UPDATE SET "
            "seq = excluded.seq, since = excluded.since",
            (subject, seq, now),
        )
