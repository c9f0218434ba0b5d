"""The sections of a site file that name no plug-in: site, budget, context and manager."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from elasticsite.config.common import DAY, HOUR, WEEK, Strict, base_url
from elasticsite.plugins import FilePath
from elasticsite.spend import Budget, Period

__all__ = ["BudgetConfig", "ContextConfig", "ManagerConfig", "SiteSection"]


class SiteSection(Strict):
    """What holds for the whole site: the currency its clouds' prices are in."""

    currency: str = Field("USD", description="ISO 4217 code of the clouds' prices")

    @field_validator("currency")
    @classmethod
    def _code(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Z]{3}", v):
            raise ValueError(f"must be a three-letter currency code such as USD or EUR (got {v!r})")
        return v


class BudgetConfig(Strict):
    """Money the site may spend per calendar period in UTC (``docs/operations.md``)."""

    amount: float = Field(gt=0, description="in the site's currency")
    period: Period = "month"
    urgent_extra: float = Field(
        0.0, ge=0, description="what launches for urgent jobs may add past the amount"
    )

    @model_validator(mode="before")
    @classmethod
    def _table(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(
                'must be a table like { amount = 500, period = "month" } '
                f"(periods: day, week, month; got {value!r})"
            )
        return value

    def budget(self) -> Budget:
        return Budget(self.amount, self.period, self.urgent_extra)


class ContextConfig(Strict):
    """The recontextualization broker the site's workers join (see ``docs/recontext.md``).

    The manager creates one context for the site at its first start (or reuses the one
    it created before), hands its coordinates to every worker in the user data, and
    removes workers it terminates.
    """

    broker: str = Field(description="base URL, e.g. https://head:8443")
    token_file: FilePath | None = Field(
        None, description="file holding the broker's admin token; default $ELASTICSITE_BROKER_TOKEN"
    )
    ca: FilePath | None = Field(
        None, description="PEM file the broker's certificate is checked against"
    )
    name: str | None = Field(None, description="context name; default: the site id")
    reserved: list[str] = Field(
        default_factory=list,
        description="host names and addresses no worker may take, besides this host's "
        "own names and localhost (e.g. the head node's address)",
    )
    replace_on_rejoin: bool = Field(
        False,
        description="a worker rejoining under its old name with the same SSH host key, "
        "proven by signing the broker's challenge, replaces its old record (else an "
        "administrator removes that first)",
    )

    @field_validator("broker")
    @classmethod
    def _url(cls, v: str) -> str:
        return base_url(v, "a base URL like https://host:8443")


class ManagerConfig(Strict):
    """The decision loop itself."""

    site_id: str = "elasticsite"
    state_dir: FilePath = Field("elasticsite-state", validate_default=True)
    """Relative: to the configuration file's directory, like every path it names."""
    # Durations, in seconds, bounded so that every wait and deadline stays computable.
    interval: float = Field(10.0, gt=0, le=HOUR)
    launch_threads: int = Field(10, ge=1, le=256)
    describe_timeout: float | None = Field(
        None,
        gt=0,
        le=HOUR,
        description="seconds a step waits for the clouds' describes (default: the interval, "
        "at least 5); a cloud that misses it is not sensed that step",
    )
    stall_timeout: float = Field(600.0, gt=0, le=WEEK)
    heartbeat_timeout: float = Field(60.0, gt=0, le=DAY)
    max_attempts: int = Field(5, ge=1)
    retry_backoff: float = Field(
        5.0, gt=0, le=DAY, description="first retry delay, doubled per try"
    )
    retry_backoff_max: float = Field(300.0, gt=0, le=WEEK)
    capacity_cooldown: float = Field(
        300.0, ge=0, le=WEEK, description="seconds a cloud rests after a capacity refusal"
    )
    protect_after: int = Field(
        3, ge=0, description="boot failures in a row that protect a cloud (0: never)"
    )
    protect_cooldown: float = Field(1800.0, ge=0, le=WEEK)
    on_shutdown: Literal["leave", "drain"] = "leave"
    shutdown_timeout: float = Field(3600.0, gt=0, le=WEEK)
    history_interval: float = Field(
        60.0, ge=0, le=DAY, description="seconds between dashboard history samples (0: off)"
    )
    metrics_port: int = Field(
        0, ge=0, le=65535, description="serve Prometheus /metrics on this port (0: off)"
    )
    metrics_address: str = Field(
        "127.0.0.1", description="address the metrics listener binds (an IP address)"
    )

    @field_validator("metrics_address")
    @classmethod
    def _address(cls, v: str) -> str:
        import ipaddress

        try:
            ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"must be an IP address (got {v!r})") from None
        return v

    @field_validator("site_id")
    @classmethod
    def _site(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$", v):
            raise ValueError("must be 1-63 letters, digits, '.', '_' or '-'")
        return v
