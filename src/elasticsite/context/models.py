"""Payloads of the broker's HTTP contract (docs/recontext-api.md), with its field limits.

Input models validate what a node may send; output models describe what the broker
answers and are what the client parses. The broker builds its hot-path answers as
pre-serialised bytes, so the output models here serve the OpenAPI schema and clients.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "ContextCreate",
    "ContextCreated",
    "ContextSummary",
    "Entry",
    "EntryRef",
    "ErrorBody",
    "JoinResult",
    "Members",
    "NodeIn",
    "NodeInfo",
    "SinceAhead",
    "Updates",
]

MAX_BODY = 64 * 1024
"""Largest request body the broker reads (bytes); larger bodies answer 413."""

_SHORT = r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$"
_HOST = r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}(\.[A-Za-z0-9][A-Za-z0-9-]{0,62})*$"
_SSH_KEY = r"^[A-Za-z0-9@._+-]+ [A-Za-z0-9+/]+={0,3}( [^\r\n]*)?$"


def _plain_text(value: str) -> str:
    """Refuse NUL and unpaired surrogates: agents pass fields as argv and environment,
    and the store writes UTF-8; either would fail far from the request that caused it."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no unpaired surrogates)") from None
    return value


def _ip_address(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"{value[:60]!r} is not an IPv4 or IPv6 address") from None


Text = Annotated[str, AfterValidator(_plain_text)]


class ContextCreate(BaseModel):
    """What an administrator sends to create a context."""

    name: Annotated[Text, Field(max_length=128)] = ""


class NodeIn(BaseModel):
    """What a node sends to join or to update its record."""

    short_hostname: Annotated[str, Field(pattern=_SHORT, max_length=63)]
    hostname: Annotated[str, Field(pattern=_HOST, max_length=253)]
    address: Annotated[str, Field(max_length=64, json_schema_extra={"format": "ip-address"})]
    ssh_host_key: Annotated[Text, Field(pattern=_SSH_KEY, max_length=16 * 1024)]
    data: Annotated[Text, Field(max_length=32 * 1024)] = ""

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        return _ip_address(value)


class NodeInfo(BaseModel):
    """One node as the broker reports it."""

    model_config = ConfigDict(frozen=True)

    node_id: str
    short_hostname: str
    hostname: str
    address: str
    ssh_host_key: str
    data: str
    joined_at: float


class Entry(BaseModel):
    """One join or leave in a context's ordered list."""

    id: int
    op: Literal["join", "leave"]
    node: NodeInfo


class Updates(BaseModel):
    """The answer to ``GET /ctx/{id}/updates``."""

    last_id: int
    snapshot: bool
    entries: list[Entry]


class Members(BaseModel):
    """Current membership of a context, in join order."""

    last_id: int
    members: list[NodeInfo]


class ContextCreated(BaseModel):
    """A new context and its credentials (shown only once)."""

    id: str
    name: str
    uri: str
    key: str
    secret: str


class ContextSummary(BaseModel):
    """A context as an administrator lists it."""

    id: str
    name: str
    uri: str
    created_at: float
    members: int
    last_id: int


class JoinResult(BaseModel):
    """A joined node's own credential and the id of its join entry."""

    node_id: str
    node_secret: str
    entry_id: int


class EntryRef(BaseModel):
    """The id of the entry a change was recorded as."""

    entry_id: int


class ErrorBody(BaseModel):
    """Every error answer."""

    detail: str


class SinceAhead(BaseModel):
    """``409``: the caller claims entries the broker never wrote."""

    detail: str
    last_id: int
