"""The bodies the urgent services take and give, validated at the boundary.

Names and identities are 1-128 visible characters; urgencies are red, orange or
yellow; unknown fields, infinities and NaN are refused. Token values appear in one
body only, :class:`TokenIssued`, the answer to issuing a token.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AuditOut",
    "AuthenticateIn",
    "AuthenticateOut",
    "CompensationIn",
    "MemberIn",
    "Name",
    "TimeLeft",
    "TokenIn",
    "TokenIssued",
    "TokenOut",
    "UrgencyName",
    "UserInfo",
]

UrgencyName = Literal["red", "orange", "yellow"]
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[^\x00-\x20\x7f]+$")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TokenIn(_Model):
    resources: list[Name] = Field(min_length=1, max_length=32)
    max_urgency: UrgencyName
    session_seconds: float = Field(gt=0, le=30 * 86400)
    label: str = Field("", max_length=200)


class TokenOut(_Model):
    id: str
    label: str
    resources: list[str]
    max_urgency: UrgencyName
    session_seconds: float
    state: Literal["issued", "active", "expired", "revoked"]
    issued_at: float
    activated_at: float | None
    expires_at: float | None
    seconds_left: float | None
    members: dict[str, dict[str, str]]


class TokenIssued(TokenOut):
    token: str = Field(description="the token's value: shown this once, never stored")


class MemberIn(_Model):
    name: Name
    identities: dict[Name, Name] = Field(min_length=1, max_length=32)


class TimeLeft(_Model):
    state: Literal["issued", "active", "expired", "revoked"]
    seconds_left: float | None


class AuthenticateIn(_Model):
    resource: Name
    urgency: UrgencyName
    identity: Name | None = Field(None, description="a resource's submit path names it")


class AuthenticateOut(_Model):
    ok: bool
    token_id: str | None
    reason: str
    compensation: bool = Field(
        False, description="a single-use compensation session: the job runs next-to-run"
    )
    policy: str | None = Field(
        None, description="the policy the resource's administrators map this urgency to"
    )


class CompensationIn(_Model):
    resource: Name
    identity: Name


class AuditOut(_Model):
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
    count: int = Field(description="requests the row stands for: more than one when held back")


class UserInfo(_Model):
    name: str
    identities: dict[str, str]
    sessions: list[TokenOut]
