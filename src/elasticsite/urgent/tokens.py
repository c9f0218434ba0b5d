"""Right-of-way tokens and urgent sessions: pure rules, no clock read, no I/O.

A token is what a resource's administrators agree to with an urgent-computing group
beforehand: the resources that honour it, the highest urgency it allows (red =
critical, orange = high, yellow = medium), how long a session lasts once started, and
the team members allowed to submit (each with their identity on each resource: a Unix
user on a cluster, an account on a cloud). Its value is 16 characters drawn from a
cryptographic source in an alphabet without look-alikes; only its SHA-256 digest is
ever stored, so a copy of the store lets nobody start a session.

Life: ``issued`` -> ``active`` (the session's clock starts at activation) ->
``expired`` when the session's time is up, or ``revoked`` by an administrator at any
point. :func:`authorize` is the one rule that says whether a member may submit at an
urgency on a resource now, and why not.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "ALPHABET",
    "TOKEN_LENGTH",
    "Refusal",
    "Token",
    "TokenState",
    "Urgency",
    "authorize",
    "digest",
    "new_token",
    "normalize",
    "show",
]

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
"""32 symbols, without the look-alikes 0/O and 1/I: 5 bits each, 80 bits a token."""
TOKEN_LENGTH = 16


def new_token() -> str:
    """A fresh token value from the operating system's cryptographic source."""
    return "".join(secrets.choice(ALPHABET) for _ in range(TOKEN_LENGTH))


def normalize(text: str) -> str:
    """A token as typed (any case, with spaces or dashes between groups) in canonical
    form; ``ValueError`` if it cannot be one."""
    value = "".join(ch for ch in text.upper() if ch not in " -\t")
    if len(value) != TOKEN_LENGTH or any(ch not in ALPHABET for ch in value):
        raise ValueError(
            f"a token is {TOKEN_LENGTH} characters of {ALPHABET} (dashes and spaces allowed)"
        )
    return value


def show(token: str) -> str:
    """``ABCD-EFGH-JKLM-NPQR``: how a token is printed for people to copy."""
    return "-".join(token[i : i + 4] for i in range(0, TOKEN_LENGTH, 4))


def digest(token: str) -> str:
    """What is stored of a token: the SHA-256 of its canonical form (hex)."""
    return hashlib.sha256(normalize(token).encode()).hexdigest()


class Urgency(enum.IntEnum):
    """How urgent a request is; a higher value outranks a lower one."""

    YELLOW = 1
    """medium"""
    ORANGE = 2
    """high"""
    RED = 3
    """critical"""

    @classmethod
    def parse(cls, text: str) -> Urgency:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"urgency {text!r}: choose red, orange or yellow") from None

    @property
    def label(self) -> str:
        return self.name.lower()


class TokenState(enum.StrEnum):
    ISSUED = "issued"
    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"


class Refusal(enum.StrEnum):
    """Why an urgent request was refused (the audit log keeps these words)."""

    NO_SESSION = "no active session"
    NOT_ACTIVE = "the session has not been started"
    EXPIRED = "the session has expired"
    REVOKED = "the token was revoked"
    RESOURCE = "resource not in the token"
    URGENCY = "urgency above the token's maximum"
    NOT_MEMBER = "not a team member on this resource"


@dataclass(slots=True)
class Token:
    """One right-of-way token as stored (its digest, never its value).

    ``members`` maps a member's name to their identity on each resource. ``expires_at``
    is set when the session starts (activation time plus ``session_seconds``), or when
    an administrator expires the token.
    """

    id: str
    digest: str
    resources: frozenset[str]
    max_urgency: Urgency
    session_seconds: float
    issued_at: float
    issued_by: str
    label: str = ""
    members: dict[str, dict[str, str]] = field(default_factory=dict)
    activated_at: float | None = None
    expires_at: float | None = None
    revoked_at: float | None = None
    single_use: bool = False
    """A compensation token: its session ends with the first request it lets through."""

    def __post_init__(self) -> None:
        if not self.resources:
            raise ValueError("a token must name at least one resource")
        if not 0 < self.session_seconds <= 30 * 86400:
            raise ValueError("a session lasts more than 0 s and at most 30 days")

    def state(self, now: float) -> TokenState:
        if self.revoked_at is not None:
            return TokenState.REVOKED
        if self.expires_at is not None and now >= self.expires_at:
            return TokenState.EXPIRED
        if self.activated_at is not None:
            return TokenState.ACTIVE
        return TokenState.ISSUED

    def time_left(self, now: float) -> float | None:
        """Seconds left in an active session (None when none is active)."""
        if self.state(now) is not TokenState.ACTIVE or self.expires_at is None:
            return None
        return self.expires_at - now

    def activate(self, now: float) -> None:
        """Start the session; only an issued token can be started, once."""
        state = self.state(now)
        if state is not TokenState.ISSUED:
            raise ValueError(f"token {self.id} is {state.value}; only an issued token starts")
        self.activated_at = now
        self.expires_at = now + self.session_seconds

    def identity(self, member: str, resource: str) -> str | None:
        return self.members.get(member, {}).get(resource)

    def member_on(self, resource: str, identity: str) -> str | None:
        """The member whose identity on ``resource`` is ``identity``, if any."""
        for name, ids in self.members.items():
            if ids.get(resource) == identity:
                return name
        return None


def check_identities(resources: frozenset[str], identities: Mapping[str, str]) -> dict[str, str]:
    """A member's identities, each on a resource of the token and well formed."""
    out = {}
    for resource, identity in identities.items():
        if resource not in resources:
            raise ValueError(f"resource {resource!r} is not in the token")
        ident = identity.strip()
        if not ident or len(ident) > 128 or any(ord(c) < 32 or c == "\x7f" for c in ident):
            raise ValueError(f"identity on {resource!r} must be 1-128 printable characters")
        out[resource] = ident
    if not out:
        raise ValueError("a member needs an identity on at least one resource of the token")
    return out


def authorize(
    token: Token | None, resource: str, identity: str, urgency: Urgency, now: float
) -> Refusal | None:
    """Whether ``identity`` may submit at ``urgency`` on ``resource`` now under
    ``token`` (the active session it belongs to, if any): None, or why not."""
    if token is None:
        return Refusal.NO_SESSION
    state = token.state(now)
    if state is TokenState.REVOKED:
        return Refusal.REVOKED
    if state is TokenState.EXPIRED:
        return Refusal.EXPIRED
    if state is TokenState.ISSUED:
        return Refusal.NOT_ACTIVE
    if resource not in token.resources:
        return Refusal.RESOURCE
    if urgency > token.max_urgency:
        return Refusal.URGENCY
    if token.member_on(resource, identity) is None:
        return Refusal.NOT_MEMBER
    return None
