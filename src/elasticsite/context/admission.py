"""Who may join a context, under which name, and how fast: the broker's admission rules.

A node holding a context's key can only ever speak for itself. Its record must not
collide with any name of another current member: host names, short host names and
addresses share one namespace (each is how other nodes find and trust a member, and
a script or resolver may read one as the other), addresses compared in canonical
form. It must avoid the reserved names (``localhost``, the head node's, the
broker's own), publish a loopback or link-local address only where the context
allows it, fit the context's domain or pattern when it has one, and the context
must have room and join budget left.

A clash with a current member is refused unless the context opted into
*replace-on-rejoin*, the joining node presents the same SSH host key as the member
it would replace, and it proves it holds that key's private half by signing the
broker's challenge (:mod:`elasticsite.context.hostkey`): the same machine coming back
after losing its credential. Nothing else lets one node remove or rename another.

Everything here is pure: the caller passes the time, and whether the join carried a
valid proof.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Protocol

from elasticsite.context import validation
from elasticsite.context.limits import BrokerLimits
from elasticsite.context.models import RESERVED_NAMES, ContextPolicy, NodeIn

__all__ = ["BrokerLimits", "Holder", "JoinBudget", "ProofNeeded", "Refused", "View", "admit"]


class Refused(Exception):
    """A join or update the rules refuse: ``status`` and a one-line ``detail``."""

    def __init__(self, status: int, detail: str, *, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.retry_after = retry_after


class ProofNeeded(Refused):
    """A join that may replace members once it proves it holds their host key."""

    def __init__(self, detail: str, replacing: list[str]) -> None:
        super().__init__(409, detail)
        self.replacing = replacing


@dataclass
class JoinBudget:
    """A token bucket: ``rate`` joins a second, ``burst`` at once."""

    tokens: float = -1.0
    stamp: float = 0.0

    def take(self, now: float, rate: float, burst: int) -> float:
        """0 if a join may go ahead now (and count it), else the seconds to wait."""
        if self.tokens < 0:
            self.tokens, self.stamp = float(burst), now
        self.tokens = min(float(burst), self.tokens + max(0.0, now - self.stamp) * rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / rate


class Holder(Protocol):
    """What admission needs to know of a current member."""

    @property
    def node_id(self) -> str: ...
    @property
    def hostname(self) -> str: ...
    @property
    def short_hostname(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def ssh_host_key(self) -> str: ...
    @property
    def size(self) -> int: ...


class View(Protocol):
    """A context as admission sees it: its rules, budget and indexed members."""

    @property
    def policy(self) -> ContextPolicy: ...
    @property
    def budget(self) -> JoinBudget: ...
    @property
    def member_count(self) -> int: ...
    @property
    def member_bytes(self) -> int: ...
    def holder(self, kind: str, value: str) -> Holder | None:
        """The current member whose ``kind`` is ``value``, if any: ``node_id``, or
        ``name`` for any of its host name, short host name and canonical address."""
        ...


def _reserved(policy: ContextPolicy, limits: BrokerLimits) -> set[str]:
    """Reserved addresses (canonical), host names, and the short forms of those
    host names."""
    names: set[str] = set()
    for name in (*RESERVED_NAMES, *limits.reserved, *policy.reserved):
        address = validation.canonical_address(name)
        if address is not None:
            names.add(address)
        else:
            names.add(name.lower())
            names.add(validation.short_of(name.lower()))
    return names


def _names(node: NodeIn) -> tuple[tuple[str, str], ...]:
    """The record's fields that name it, each with its (canonical) value."""
    address = validation.canonical_address(node.address) or node.address
    return (
        ("hostname", node.hostname),
        ("short_hostname", node.short_hostname),
        ("address", address),
    )


def _check_names(node: NodeIn, policy: ContextPolicy, limits: BrokerLimits) -> None:
    reserved = _reserved(policy, limits)
    for field_name, value in _names(node):
        if value in reserved:
            raise Refused(422, f"{field_name}: {value!r} is reserved in this context")
    scope = validation.local_scope(node.address)
    allowed = {"loopback": policy.allow_loopback, "link-local": policy.allow_link_local}
    if scope is not None and not allowed[scope]:
        option = "allow_" + scope.replace("-", "_")
        raise Refused(
            422,
            f"address: {node.address} is a {scope} address, which this context does not "
            f"take (its {option} is off)",
        )
    if policy.domain is not None and not node.hostname.endswith("." + policy.domain):
        raise Refused(
            422, f"hostname: {node.hostname!r} is not in this context's domain {policy.domain}"
        )
    if policy.host_pattern is not None and not fnmatch.fnmatchcase(
        node.hostname, policy.host_pattern.lower()
    ):
        raise Refused(
            422,
            f"hostname: {node.hostname!r} does not match this context's pattern "
            f"{policy.host_pattern!r}",
        )


def admit(
    view: View,
    node: NodeIn,
    size: int,
    limits: BrokerLimits,
    now: float,
    *,
    updating: str | None = None,
    source: str | None = None,
    proven: bool = False,
) -> list[str]:
    """Check a join (or, with ``updating``, a member's new record) against the rules.

    ``size`` is the bytes the record will take; ``source`` the address the request
    came from (checked under ``bind_address``); ``proven`` whether the join carried
    a valid proof of its host key. Returns the ids of the members the join replaces
    (only under replace-on-rejoin, and only once proven: else :class:`ProofNeeded`);
    raises :class:`Refused` otherwise. The join budget is spent only by an admitted
    change, or by a join answered with a challenge.
    """
    policy = view.policy
    _check_names(node, policy, limits)
    if policy.bind_address and node.address != validation.canonical_address(source):
        raise Refused(
            422,
            f"address: {node.address} is not the address this request came from "
            f"({source or 'unknown'}), as this context requires",
        )
    key = validation.key_material(node.ssh_host_key)
    replaced: dict[str, Holder] = {}
    for kind, value in _names(node):
        member = view.holder("name", value)
        if member is None or member.node_id == updating or member.node_id in replaced:
            continue
        same_machine = validation.key_material(member.ssh_host_key) == key
        if updating is None and policy.replace_on_rejoin and same_machine:
            replaced[member.node_id] = member
            continue
        raise Refused(
            409,
            f"{kind}: {value!r} is held by a current member (node {member.node_id}); "
            "an administrator must remove it first",
        )
    count = view.member_count - len(replaced)
    total = view.member_bytes - sum(m.size for m in replaced.values())
    if updating is not None:
        current = view.holder("node_id", updating)
        total -= current.size if current is not None else 0
    max_members = policy.max_members or limits.max_members
    if updating is None and count >= max_members:
        raise Refused(409, f"the context is full: it holds its limit of {max_members} members")
    if total + size > limits.max_member_bytes:
        raise Refused(
            409, f"the context is full: its members' records reach {limits.max_member_bytes} bytes"
        )
    wait = view.budget.take(
        now, policy.join_rate or limits.join_rate, policy.join_burst or limits.join_burst
    )
    if wait > 0:
        raise Refused(
            429, f"too many joins in this context; retry in {wait:.1f} s", retry_after=wait
        )
    if replaced and not proven:  # a challenge costs a join's budget too
        kind, value = next((k, v) for k, v in _names(node) if view.holder("name", v) is not None)
        raise ProofNeeded(
            f"{kind}: {value!r} is held by a current member with this SSH host key; sign "
            "the challenge with its private key to replace it",
            list(replaced),
        )
    return list(replaced)
