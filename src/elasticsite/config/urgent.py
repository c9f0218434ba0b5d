"""The ``[urgent]`` section: how this site's submit path reaches the urgent services, and
what each urgency earns a job here. See ``docs/urgent.md``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from elasticsite.config.common import Strict, base_url
from elasticsite.plugins import FilePath

__all__ = ["UrgentConfig"]

Policy = Literal["priority", "next_to_run", "preemption"]
Urgency = Literal["red", "orange", "yellow"]
DEFAULT_POLICIES: dict[Urgency, Policy] = {
    "red": "preemption",
    "orange": "next_to_run",
    "yellow": "priority",
}


class UrgentConfig(Strict):
    """Where the urgent services are, this site's name in tokens, its key, its policies."""

    server: str = Field(description="https URL of the server that serves /urgent")
    resource: str = Field("", description="this site's name in tokens (default: the site id)")
    ca: FilePath | None = Field(
        None, description="PEM file the server's certificate is checked with"
    )
    key_file: FilePath = Field(description="file holding this resource's key (esk_...), mode 0600")
    socket: FilePath | None = Field(
        None,
        description="the urgent gate's Unix socket (elasticsite urgent gate): users submit "
        "through it, as the Unix user the kernel reports, without reading key_file",
    )
    policies: dict[Urgency, Policy] = Field(
        default_factory=lambda: dict(DEFAULT_POLICIES),
        description="the elevated-priority policy each urgency gets here",
    )

    @field_validator("server")
    @classmethod
    def _server(cls, v: str) -> str:
        return base_url(v, "the server's base URL, like https://head:8443")
