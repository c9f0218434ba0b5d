"""Site configuration: a TOML file validated into settings, or one clear error.

A bad file never starts a half-configured manager: :func:`load_config` raises
:class:`ConfigError` whose message names the file and every bad field, e.g.::

    examples/local.toml: clouds[0].max_instances: must be >= 0 (got -3)

A cloud's ``driver`` and the ``[batch] type`` name plug-ins (:mod:`elasticsite.plugins`);
their ``options`` are checked here too, by each plug-in's own model, e.g.::

    site.toml: clouds[0].options.fail_boot: must be a probability in [0, 1] (got 2)
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from elasticsite import plugins
from elasticsite.attributes import InvalidAttribute, Selector
from elasticsite.model import CloudSpec, VMType
from elasticsite.plugins import PluginOptions, Registry
from elasticsite.policies.base import PolicySettings

__all__ = [
    "BatchConfig",
    "CloudConfig",
    "ConfigError",
    "ManagerConfig",
    "PolicyConfig",
    "SiteConfig",
    "VMTypeConfig",
    "explain",
    "load_config",
    "parse_config",
]

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
HOUR = 3600.0
DAY = 86400.0
WEEK = 7 * DAY


class ConfigError(ValueError):
    """The configuration is unusable; the message names the file and the fields."""


class _Strict(BaseModel):
    # Every number is finite: ``interval = inf`` or ``nan`` would pass a ``> 0`` check.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class VMTypeConfig(_Strict):
    name: str = "small"
    cores: int = Field(1, ge=1)
    memory_mb: int = Field(2048, ge=1)


def _registered(registry: Registry[Any], name: str) -> str:
    """``name`` if a plug-in of ``registry`` is published under it (and loads)."""
    try:
        registry.get(name)
    except plugins.UnknownPlugin as exc:
        raise ValueError(str(exc)) from None
    return name


def _plugin_options(model: type[PluginOptions], value: Any, context: dict[str, Any]) -> Any:
    """``value`` (a TOML table) validated by a plug-in's options ``model``.

    Its ValidationError propagates, so each bad option is reported under its own field.
    """
    if isinstance(value, model):
        return value
    if type(value) is PluginOptions:  # the default: no options given
        value = {}
    if not isinstance(value, Mapping):
        raise ValueError("must be a table of options")
    return model.model_validate(dict(value), context=context)


class CloudConfig(_Strict):
    """One cloud: what policies know of it, and how to reach it.

    ``driver`` names a registered cloud driver (:data:`elasticsite.plugins.clouds`);
    ``options`` are validated by that driver's own options model when the file is
    loaded, so a typo or a value out of range is reported before anything starts.
    """

    name: str
    driver: str = Field(plugins.DEFAULT_CLOUD_DRIVER, validate_default=True)
    max_instances: int = Field(10, ge=0)
    price_per_hour: float = Field(0.0, ge=0)
    billing_increment: float = Field(1.0, gt=0, le=31 * DAY, description="seconds; 3600 = hourly")
    boot_time: float = Field(60.0, ge=0, le=DAY, description="estimate, seconds")
    shutdown_time: float = Field(6.0, ge=0, le=DAY, description="estimate, seconds")
    vm_types: list[VMTypeConfig] = Field(default_factory=lambda: [VMTypeConfig()], min_length=1)
    serves: dict[str, list[str]] = Field(
        default_factory=dict,
        description="job attribute -> values; only matching jobs count as this cloud's demand",
    )
    options: SerializeAsAny[PluginOptions] = Field(
        default_factory=PluginOptions, validate_default=True
    )

    @field_validator("serves")
    @classmethod
    def _serves(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        try:
            Selector.of(v)
        except InvalidAttribute as exc:
            raise ValueError(str(exc)) from None
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(
                "must be lower-case letters, digits and '-', starting with a letter "
                "(it becomes part of node names)"
            )
        return v

    @field_validator("driver")
    @classmethod
    def _driver(cls, v: str) -> str:
        return _registered(plugins.clouds, v)

    @field_validator("options", mode="before")
    @classmethod
    def _options(cls, v: Any, info: ValidationInfo) -> Any:
        driver = info.data.get("driver")
        if driver is None:  # the driver is reported instead
            return PluginOptions()
        model = plugins.clouds.get(driver).options
        return _plugin_options(model, v, {"cloud": dict(info.data)})

    def spec(self) -> CloudSpec:
        return CloudSpec(
            name=self.name,
            driver=self.driver,
            max_instances=self.max_instances,
            price_per_hour=self.price_per_hour,
            billing_increment=self.billing_increment,
            boot_time=self.boot_time,
            shutdown_time=self.shutdown_time,
            vm_types=tuple(VMType(v.name, v.cores, v.memory_mb) for v in self.vm_types),
            serves=Selector.of(self.serves),
        )


class PolicyConfig(_Strict):
    """Which policy runs, and every threshold it reads (see :class:`PolicySettings`)."""

    name: str = "bursts"
    steady_up_factor: float = Field(5.0, gt=0)
    steady_down_factor: float = Field(3.0, ge=0)
    steady_min_workers: int = Field(1, ge=0)
    bursts_factor: float = Field(2.0, gt=0)
    dedicated_workers: int = Field(10, ge=0)
    spend_cap_per_hour: float | None = Field(None, ge=0)
    cloud_rule: Literal["cheapest", "fastest", "ordered", "balanced"] = "cheapest"
    billing_margin: float = Field(120.0, ge=0, le=31 * DAY, description="seconds")
    redirect_to: str = Field("cloud", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    provision: str = "on_demand"
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _factors(self) -> PolicyConfig:
        if self.steady_down_factor > self.steady_up_factor:
            raise ValueError(
                f"steady_down_factor ({self.steady_down_factor}) must not exceed "
                f"steady_up_factor ({self.steady_up_factor})"
            )
        return self


class BatchConfig(_Strict):
    """The batch system: ``type`` names a registered one (see :mod:`elasticsite.plugins`).

    Its options go in ``[batch.options]``, or directly in ``[batch]`` (as the embedded
    system's ``scheduler`` always has); either way they are validated by the system's
    own options model when the file is loaded (see ``docs/slurm.md`` and
    ``docs/pbs-htcondor.md``). ``path`` is the embedded batch system's file, which local
    cloud workers join. ``mode`` says who decides when cloud nodes come and go:
    ``external`` (the manager's policy, the papers' design) or ``power_save`` (the batch
    system's power saving asks, through ``elasticsite slurm resume|suspend``), for a
    system that supports it.
    """

    type: str = Field(plugins.DEFAULT_BATCH_SYSTEM, validate_default=True)
    path: str = "batch.db"
    mode: Literal["external", "power_save"] = "external"
    options: SerializeAsAny[PluginOptions] = Field(
        default_factory=PluginOptions, validate_default=True
    )

    @model_validator(mode="wrap")
    @classmethod
    def _inline_options(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """Keys of ``[batch]`` that are not its own are the system's options; a bad one
        is reported where it was written (``batch.scheduler``)."""
        if not isinstance(data, Mapping):
            return handler(data)
        inline = {k: v for k, v in data.items() if k not in cls.model_fields}
        if not inline:
            return handler(data)
        table = data.get("options", {})
        if not isinstance(table, Mapping):
            raise ValueError("options: must be a table of options")
        both = sorted(set(inline) & set(table))
        if both:
            raise ValueError(f"{', '.join(both)}: given both in [batch] and in [batch.options]")
        own = {k: v for k, v in data.items() if k in cls.model_fields}
        try:
            return handler({**own, "options": {**table, **inline}})
        except ValidationError as exc:
            raise _moved(exc, inline) from None

    @field_validator("type")
    @classmethod
    def _type(cls, v: str) -> str:
        return _registered(plugins.batch_systems, v)

    @field_validator("mode")
    @classmethod
    def _mode(cls, v: str, info: ValidationInfo) -> str:
        kind = info.data.get("type")
        if kind is not None:
            modes = plugins.batch_systems.get(kind).modes
            if v not in modes:
                raise ValueError(f"batch type {kind!r} supports {', '.join(modes)} only")
        return v

    @field_validator("options", mode="before")
    @classmethod
    def _options(cls, v: Any, info: ValidationInfo) -> Any:
        kind = info.data.get("type")
        if kind is None:  # the type is reported instead
            return PluginOptions()
        model = plugins.batch_systems.get(kind).options
        return _plugin_options(model, v, {"batch": dict(info.data)})


def _moved(exc: ValidationError, inline: Mapping[str, Any]) -> ValidationError:
    """``exc`` with the errors of inline options located at ``key``, not ``options.key``."""
    details: list[InitErrorDetails] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        if len(loc) > 1 and loc[0] == "options" and loc[1] in inline:
            loc = loc[1:]
        detail = InitErrorDetails(type=err["type"], loc=loc, input=err["input"])
        if "ctx" in err:
            detail["ctx"] = err["ctx"]
        details.append(detail)
    try:
        return ValidationError.from_exception_data(exc.title, details)
    except (KeyError, TypeError, ValueError):  # an error type that cannot be rebuilt
        return exc


class ContextConfig(_Strict):
    """The recontextualization broker the site's workers join (see ``docs/recontext.md``).

    The manager creates one context for the site at its first start (or reuses the one
    it created before), hands its coordinates to every worker in the user data, and
    removes workers it terminates.
    """

    broker: str = Field(description="base URL, e.g. https://head:8443")
    token_file: str | None = Field(
        None, description="file holding the broker's admin token; default $ELASTICSITE_BROKER_TOKEN"
    )
    ca: str | None = Field(None, description="PEM file the broker's certificate is checked against")
    name: str | None = Field(None, description="context name; default: the site id")
    reserved: list[str] = Field(
        default_factory=list,
        description="host names and addresses no worker may take, besides this host's "
        "own names and localhost (e.g. the head node's address)",
    )
    replace_on_rejoin: bool = Field(
        False,
        description="a worker rejoining under its old name with the same SSH host key "
        "replaces its old record (else an administrator removes that first)",
    )

    @field_validator("broker")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.match(r"^https?://[^/\s]+/?$", v):
            raise ValueError("must be a base URL like https://host:8443")
        return v.rstrip("/")


class ManagerConfig(_Strict):
    """The decision loop itself."""

    site_id: str = "elasticsite"
    state_dir: str = "elasticsite-state"
    # Durations, in seconds, bounded so that every wait and deadline stays computable.
    interval: float = Field(10.0, gt=0, le=HOUR)
    launch_threads: int = Field(10, ge=1, le=256)
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

    @field_validator("site_id")
    @classmethod
    def _site(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$", v):
            raise ValueError("must be 1-63 letters, digits, '.', '_' or '-'")
        return v


class SiteConfig(_Strict):
    """A whole site: manager, policy, batch system and clouds."""

    manager: ManagerConfig = Field(default_factory=ManagerConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    batch: BatchConfig = Field(default_factory=BatchConfig)
    clouds: list[CloudConfig] = Field(min_length=1)
    context: ContextConfig | None = None

    @model_validator(mode="after")
    def _unique(self) -> SiteConfig:
        seen: set[str] = set()
        for c in self.clouds:
            if c.name in seen:
                raise ValueError(f"two clouds are named {c.name!r}; names must be unique")
            seen.add(c.name)
        if self.batch.mode == "power_save" and not Path(self.manager.state_dir).is_absolute():
            raise ValueError(
                "manager.state_dir must be an absolute path when batch.mode is 'power_save' "
                f"(slurmctld runs the hooks from its own directory; got {self.manager.state_dir!r})"
            )
        return self

    def state_dir(self, base: Path | None = None) -> Path:
        p = Path(self.manager.state_dir).expanduser()
        return p if p.is_absolute() or base is None else base / p

    def policy_settings(self) -> PolicySettings:
        p = self.policy
        return PolicySettings(
            steady_up_factor=p.steady_up_factor,
            steady_down_factor=p.steady_down_factor,
            steady_min_workers=p.steady_min_workers,
            bursts_factor=p.bursts_factor,
            dedicated_workers=p.dedicated_workers,
            spend_cap_per_hour=p.spend_cap_per_hour,
            cloud_rule=p.cloud_rule,
            billing_margin=p.billing_margin,
            redirect_to=p.redirect_to,
            provision=p.provision,
            stall_timeout=self.manager.stall_timeout,
            params=dict(p.params),
        )

    def cloud_specs(self) -> list[CloudSpec]:
        return [c.spec() for c in self.clouds]


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def explain(exc: ValidationError, source: str, drop: tuple[str, ...] = ()) -> str:
    """One line per bad field, ``source: field.path: what is wrong (got value)``.

    ``drop`` removes location parts that name no field (the tag a tagged union adds).
    Checks that span several fields have no location and name their fields themselves.
    """
    lines = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if p not in drop)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown setting (check its spelling and section)"
        elif (
            "input" in err
            and err["type"] not in ("missing",)
            and not isinstance(err["input"], dict | list)
            and repr(err["input"]) not in msg  # the message quotes it already
        ):
            msg = f"{msg} (got {err['input']!r})"
        lines.append(f"{source}: {_where(loc)}: {msg}" if loc else f"{source}: {msg}")
    return "\n".join(lines)


def parse_config(data: dict[str, Any], source: str = "<config>") -> SiteConfig:
    """Validate already-parsed TOML data."""
    try:
        config = SiteConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(explain(exc, source)) from None
    from elasticsite import policies

    try:
        chosen = policies.get(config.policy.name)
    except policies.UnknownPolicy as exc:
        raise ConfigError(f"{source}: policy.name: {exc}") from None
    if getattr(chosen, "redirects", False):
        try:
            provision = policies.get(config.policy.provision)
        except policies.UnknownPolicy as exc:
            raise ConfigError(f"{source}: policy.provision: {exc}") from None
        if getattr(provision, "redirects", False):
            raise ConfigError(
                f"{source}: policy.provision: {config.policy.provision!r} redirects jobs "
                "itself; name a provisioning policy (on_demand, bursts, core_demand ...)"
            )
        partition = getattr(config.batch.options, "node_partition", None)
        if partition is not None and partition != config.policy.redirect_to:
            raise ConfigError(
                f"{source}: policy.redirect_to: {config.policy.redirect_to!r} is not the "
                f"partition of the cloud workers' nodes (batch.node_partition = {partition!r}):"
                " redirected jobs would never run; make them the same"
            )
    return config


def load_config(path: str | Path) -> SiteConfig:
    """Read and validate a TOML site configuration."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(data, str(path))
