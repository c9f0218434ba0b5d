"""Payloads of the broker's HTTP contract (docs/recontext-api.md), with its field limits.

Input models validate what a node may send; output models describe what the broker
answers and are what the client parses. The broker builds its hot-path answers as
pre-serialised bytes, so the output models here serve the OpenAPI schema and clients.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from elasticsite.context import validation
from elasticsite.web.errors import ErrorBody

__all__ = [
    "RESERVED_NAMES",
    "Challenge",
    "ChallengeBody",
    "ContextCreate",
    "ContextCreated",
    "ContextPolicy",
    "ContextSummary",
    "Entry",
    "EntryRef",
    "ErrorBody",
    "HostKeyProof",
    "JoinIn",
    "JoinResult",
    "Members",
    "NodeIn",
    "NodeInfo",
    "SinceAhead",
    "Updates",
]

MAX_BODY = 64 * 1024
"""Largest request body the broker reads (bytes); larger bodies answer 413."""

MAX_DATA = 8 * 1024
"""Largest ``data`` a node may publish (bytes of UTF-8): it is copied to every member."""

RESERVED_NAMES = (
    "localhost",
    "localhost.localdomain",
    "ip6-localhost",
    "ip6-loopback",
    "broadcasthost",
)
"""Names no node may take in any context, on top of those its administrator reserves."""


def _text(value: str) -> str:
    """Free text: NUL, control characters and unpaired surrogates are refused, since
    agents pass fields as argv and environment and the store writes UTF-8."""
    return validation.check_text(value)


def _reserved(value: str) -> str:
    """A reserved name (host name or address), normalised."""
    try:
        return validation.check_address(value)
    except ValueError:
        return validation.check_hostname(value)


Text = Annotated[str, AfterValidator(_text)]
_LABEL = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HostName = Annotated[
    str,
    Field(
        max_length=253,
        json_schema_extra={"format": "hostname", "pattern": f"^{_LABEL}(\\.{_LABEL})*$"},
    ),
    AfterValidator(validation.check_hostname),
]
ShortHostName = Annotated[
    str,
    Field(max_length=63, json_schema_extra={"pattern": f"^{_LABEL}$"}),
    AfterValidator(validation.check_short_hostname),
]
Address = Annotated[
    str,
    Field(max_length=45, json_schema_extra={"format": "ip-address"}),
    AfterValidator(validation.check_address),
]
SshKey = Annotated[str, Field(max_length=4 * 1024), AfterValidator(validation.check_ssh_key)]
Reserved = Annotated[str, Field(max_length=253), AfterValidator(_reserved)]


class ContextPolicy(BaseModel):
    """Who may join a context, and how much it may hold; chosen at its creation.

    ``None`` limits follow the broker's defaults (``elasticsite broker --help``).
    """

    model_config = ConfigDict(extra="forbid")

    domain: HostName | None = Field(
        default=None, description="Host names must lie in this domain (w1.DOMAIN, ...)."
    )
    host_pattern: Annotated[Text, Field(min_length=1, max_length=253)] | None = Field(
        default=None,
        description="Shell-style pattern host names must match (e.g. 'w-*.cloud.example.org').",
    )
    reserved: Annotated[list[Reserved], Field(max_length=64)] = Field(
        default_factory=list,
        description="Names and addresses no node may take (the head node's), besides localhost.",
    )
    bind_address: bool = Field(
        default=False,
        description="A node's address must be the one its join or update came from (no "
        "NAT or proxy between nodes and broker).",
    )
    replace_on_rejoin: bool = Field(
        default=False,
        description="A join with a current member's host name replaces that member when it "
        "presents the same SSH host key and proves it holds its private half, by signing "
        "the broker's challenge (the same machine rejoining); refused otherwise.",
    )
    allow_loopback: bool = Field(
        default=False,
        description="Nodes may publish loopback addresses (127.0.0.0/8, ::1): only for "
        "nodes that all live on the broker's own machine, such as the local cloud's.",
    )
    allow_link_local: bool = Field(
        default=False,
        description="Nodes may publish link-local addresses (169.254.0.0/16, fe80::/10), "
        "which reach only one link and carry no scope id here.",
    )
    max_members: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    join_rate: Annotated[float, Field(gt=0, le=100_000)] | None = Field(
        default=None, description="Sustained joins and record updates per second."
    )
    join_burst: Annotated[int, Field(ge=1, le=1_000_000)] | None = Field(
        default=None, description="Joins and updates allowed at once above the rate."
    )


class ContextCreate(ContextPolicy):
    """What an administrator sends to create a context."""

    name: Annotated[Text, Field(max_length=128)] = ""


class NodeIn(BaseModel):
    """What a node sends to join or to update its record (docs/recontext-api.md)."""

    short_hostname: ShortHostName
    hostname: HostName
    address: Address
    ssh_host_key: SshKey
    data: Annotated[Text, Field(max_length=MAX_DATA)] = ""

    @model_validator(mode="after")
    def _short_is_first_label(self) -> NodeIn:
        if validation.short_of(self.hostname) != self.short_hostname:
            raise ValueError(
                f"short_hostname {self.short_hostname!r} must be the first label of "
                f"hostname {self.hostname!r}"
            )
        if len(self.data.encode("utf-8")) > MAX_DATA:
            raise ValueError(f"data holds more than {MAX_DATA} bytes of UTF-8")
        return self


class HostKeyProof(BaseModel):
    """A signature, by the SSH host key a node publishes, of the broker's challenge
    (docs/recontext-api.md#replacing-a-member-proof-of-the-host-key)."""

    model_config = ConfigDict(extra="forbid")

    nonce: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]
    signature: str = Field(
        min_length=1,
        max_length=4096,  # RSA host keys of up to 24,576 bits
        pattern=r"^[A-Za-z0-9+/]+={0,2}$",
        description="base64 of the signature of the challenge's message",
    )


class JoinIn(NodeIn):
    """A join: the node's record, and the proof a replacing join needs."""

    proof: HostKeyProof | None = Field(
        default=None,
        description="Only to replace a member under replace_on_rejoin, after a 409 "
        "carrying a challenge; never stored or published.",
    )


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


class ContextSummary(ContextPolicy):
    """A context as an administrator lists it, with the rules it was created with."""

    model_config = ConfigDict(extra="ignore")

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


class Challenge(BaseModel):
    """What a node signs with its SSH host key to replace the member holding its name:
    ``nonce`` is single-use and valid ``expires_in`` seconds, for this context and
    host name only."""

    nonce: str
    context_id: str
    hostname: str
    expires_in: float


class ChallengeBody(BaseModel):
    """``409`` to a join that would replace a member without a valid proof."""

    detail: str
    challenge: Challenge


class SinceAhead(BaseModel):
    """``409``: the caller claims entries the broker never wrote."""

    detail: str
    last_id: int
