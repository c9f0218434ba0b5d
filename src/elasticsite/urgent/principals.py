"""Who calls the urgent services, and how they prove it: per-principal API keys.

Three kinds of principal, each with a key of its own (``esk_`` and 43 URL-safe
characters, shown once when made, stored as its SHA-256 digest):

* ``admin``: a resource administrator, for the resources listed: issues and expires
  tokens for them and reads the audit log of attempts on them;
* ``user``: a person, with an identity on each resource (a Unix user on a cluster, an
  account on a cloud): sees their sessions and submits as that identity only;
* ``resource``: a resource's own submit path (for example the cluster's
  ``elasticsite urgent submit``, which learns the Unix user from the kernel), trusted to
  name the identity that submits on the resources listed.

The token manager needs no key: presenting the token's value is what makes one.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from elasticsite.sqlite import Table

__all__ = ["KEY_PREFIX", "Principal", "Principals", "Role", "key_digest"]

KEY_PREFIX = "esk_"
Role = Literal["admin", "user", "resource"]
_ROLES = ("admin", "user", "resource")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS principals (
    name TEXT PRIMARY KEY,
    key_digest TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    resources TEXT NOT NULL,
    identities TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""


def key_digest(key: str) -> str:
    """What is kept of a key: its SHA-256 (hex)."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """One caller: its name, role, the resources it acts on, and (a user) its identities."""

    name: str
    role: Role
    resources: frozenset[str] = frozenset()
    identities: Mapping[str, str] = field(default_factory=dict)


class Principals(Table):
    """The principals of an urgent store (same file, same connection)."""

    schema = _SCHEMA

    def add(
        self,
        name: str,
        role: str,
        now: float,
        *,
        resources: Sequence[str] = (),
        identities: Mapping[str, str] | None = None,
    ) -> tuple[Principal, str]:
        """Make a principal and its key (returned once; only its digest is kept)."""
        name = name.strip()
        if not name or len(name) > 64 or not all(c.isalnum() or c in "._@-" for c in name):
            raise ValueError("a name is 1-64 letters, digits, '.', '_', '@' or '-'")
        if role not in _ROLES:
            raise ValueError(f"role {role!r}: choose {', '.join(_ROLES)}")
        ids = dict(identities or {})
        if role == "user":
            if not ids:
                raise ValueError("a user needs an identity on at least one resource")
            resources = sorted(ids)
        elif not resources:
            raise ValueError(f"an {role} principal acts on at least one resource")
        for value in (*resources, *ids.values()):
            if not value or len(value) > 128 or any(ord(c) < 33 for c in value):
                raise ValueError("resources and identities are 1-128 visible characters")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        principal = Principal(name, role, frozenset(resources), ids)  # type: ignore[arg-type]
        with self.db.transaction():
            if self.db.execute("SELECT 1 FROM principals WHERE name = ?", (name,)).fetchone():
                raise ValueError(f"a principal named {name!r} exists; remove it first")
            self.db.execute(
                "INSERT INTO principals VALUES (?, ?, ?, ?, ?, ?)",
                (name, key_digest(key), role, json.dumps(sorted(resources)), json.dumps(ids), now),
            )
        return principal, key

    def by_key(self, key: str) -> Principal | None:
        """The principal whose key this is, or None (compared by digest)."""
        if not key.startswith(KEY_PREFIX) or len(key) > 128:
            return None
        return self.by_digest(key_digest(key))

    def by_digest(self, digest: str) -> Principal | None:
        """The principal whose key has this digest, if it is still there: a portal
        session keeps the digest of the key it was opened with, and ends with the key."""
        row = self.db.execute(
            "SELECT name, role, resources, identities FROM principals WHERE key_digest = ?",
            (digest,),
        ).fetchone()
        if row is None:
            return None
        name, role, resources, identities = row
        return Principal(name, role, frozenset(json.loads(resources)), json.loads(identities))

    def remove(self, name: str) -> bool:
        with self.db.transaction():
            return bool(self.db.execute("DELETE FROM principals WHERE name = ?", (name,)).rowcount)

    def names(self) -> list[tuple[str, str, list[str]]]:
        return [
            (n, r, json.loads(res))
            for n, r, res in self.db.execute(
                "SELECT name, role, resources FROM principals ORDER BY name"
            )
        ]
