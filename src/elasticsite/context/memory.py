"""One context of the broker as it lives in memory: what answers every read.

Each context keeps its recent entries as pre-serialised JSON, its current members
indexed by every name they go by, the digests of its credentials, and cached
answers: thousands of agents long-poll the same few contexts, and each answer must
cost next to nothing. :class:`~elasticsite.context.store.Store` changes it, after
committing each change to SQLite.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Self, overload

from elasticsite.context.admission import JoinBudget
from elasticsite.context.models import ContextPolicy
from elasticsite.context.validation import canonical_address
from elasticsite.web.credentials import digest

__all__ = ["ContextState", "Member", "digest"]

_RESPONSE_CACHE = 64
"""Distinct ``since`` answers kept per context between two changes."""
_RESPONSE_CACHE_BYTES = 64 * 1024 * 1024
"""Bytes of cached answers per context (a snapshot of 10,000 members is a few MiB, and
every agent starting at once asks for it)."""


class _Recorded:
    """A member's field as its record (``info``) has it, read-only, as text."""

    __slots__ = ("key",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name

    @overload
    def __get__(self, member: None, owner: type) -> Self: ...
    @overload
    def __get__(self, member: Member, owner: type) -> str: ...
    def __get__(self, member: Member | None, owner: type) -> str | Self:
        return self if member is None else str(member.info[self.key])


@dataclass(slots=True)
class Member:
    """A current member: its record as JSON, and its pre-serialised join entry."""

    node_id: str
    secret_digest: bytes
    info: dict[str, object]
    info_json: bytes
    join_entry: int
    join_json: bytes

    hostname = _Recorded()
    short_hostname = _Recorded()
    address = _Recorded()
    ssh_host_key = _Recorded()

    @property
    def size(self) -> int:
        return len(self.info_json)

    def names(self) -> tuple[tuple[str, str], ...]:
        """How other members find this one: its index keys in :class:`ContextState`.
        Host names, short names and addresses (canonical) share one namespace."""
        return (
            ("node_id", self.node_id),
            ("name", self.hostname),
            ("name", self.short_hostname),
            ("name", canonical_address(self.address) or self.address),
        )


@dataclass(slots=True)
class ContextState:
    """One context in memory; ``entries[i]`` is the JSON of entry ``first_id + i``."""

    id: str
    name: str
    created_at: float
    key_digest: bytes
    secret_digest: bytes
    last_id: int = 0
    first_id: int = 1
    entries: list[bytes] = field(default_factory=list)
    members: dict[str, Member] = field(default_factory=dict)
    departed: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    cache: dict[int, bytes] = field(default_factory=dict)
    policy: ContextPolicy = field(default_factory=ContextPolicy)
    budget: JoinBudget = field(default_factory=JoinBudget)
    member_bytes: int = 0
    index: dict[tuple[str, str], Member] = field(default_factory=dict)
    """Current members by node id, and by any name: host name, short name, address."""
    challenges: dict[str, tuple[str, float]] = field(default_factory=dict)
    """Replace-on-rejoin challenges: nonce -> (host name, expiry on the broker's clock),
    oldest first."""

    @property
    def member_count(self) -> int:
        return len(self.members)

    def holder(self, kind: str, value: str) -> Member | None:
        return self.index.get((kind, value))

    def add_member(self, member: Member) -> None:
        self.members[member.node_id] = member
        self.member_bytes += member.size
        for key in member.names():
            self.index[key] = member

    def drop_member(self, member: Member) -> None:
        del self.members[member.node_id]
        self.member_bytes -= member.size
        for key in member.names():
            if self.index.get(key) is member:
                del self.index[key]

    def check_context(self, key: str, secret: str) -> bool:
        """Whether ``key``/``secret`` are this context's (constant time)."""
        ok_key = hmac.compare_digest(digest(key), self.key_digest)
        ok_secret = hmac.compare_digest(digest(secret), self.secret_digest)
        return ok_key & ok_secret

    def check_node(self, node_id: str, secret: str) -> bool:
        """Whether ``node_id``/``secret`` are a current member's credential."""
        member = self.members.get(node_id)
        if member is None:
            return False
        return hmac.compare_digest(digest(secret), member.secret_digest)

    def check_departed(self, node_id: str, secret: str) -> bool:
        """Whether the credential belongs to a node that has left (kept as long as its
        leave entry is in the history, so a retried leave learns it already happened)."""
        held = self.departed.get(node_id)
        return held is not None and hmac.compare_digest(digest(secret), held[0])

    def updates_body(self, since: int) -> bytes:
        """The JSON answer for a caller that applied everything up to ``since``.

        ``since`` must not exceed ``last_id``. Answers are cached until the next change,
        since thousands of agents ask the same question at the same moment.
        """
        snapshot = since == 0 or since < self.first_id - 1
        key = -1 if snapshot else since
        body = self.cache.get(key)
        if body is not None:
            return body
        if snapshot:
            parts = [m.join_json for m in self.members.values()]
        else:
            parts = self.entries[since - self.first_id + 1 :]
        body = b'{"last_id":%d,"snapshot":%s,"entries":[%s]}' % (
            self.last_id,
            b"true" if snapshot else b"false",
            b",".join(parts),
        )
        if len(self.cache) >= _RESPONSE_CACHE or (
            sum(map(len, self.cache.values())) + len(body) > _RESPONSE_CACHE_BYTES
        ):
            self.cache.clear()
        if len(body) <= _RESPONSE_CACHE_BYTES // 2:
            self.cache[key] = body
        return body

    def members_body(self) -> bytes:
        body = self.cache.get(-2)
        if body is None:
            body = b'{"last_id":%d,"members":[%s]}' % (
                self.last_id,
                b",".join(m.info_json for m in self.members.values()),
            )
            self.cache[-2] = body
        return body
