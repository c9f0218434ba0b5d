"""Sections whose ``options`` belong to a plug-in: clouds, the batch system and the policy.

Each plug-in's own options model validates its table when the file is loaded, and a bad
option is reported under its own field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import (
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
from elasticsite.config.common import DAY, NAME, Strict
from elasticsite.config.sections import BudgetConfig
from elasticsite.model import CloudSpec, VMType, WasteEstimate
from elasticsite.plugins import PluginOptions, Registry
from elasticsite.policies.base import (
    CloudRule,
    PolicySettings,
    options_model,
    with_options,
)
from elasticsite.policies.base import registry as policy_registry

__all__ = ["BatchConfig", "CloudConfig", "PolicyConfig", "VMTypeConfig"]


class VMTypeConfig(Strict):
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


def _chosen_options(
    registry: Registry[Any], section: str, key: str, value: Any, info: ValidationInfo
) -> Any:
    """``value`` validated by the options model of the ``registry`` plug-in that the
    section's ``key`` field names; the section itself is in the validation context."""
    name = info.data.get(key)
    if name is None:  # that field's own error is reported instead
        return PluginOptions()
    model = registry.get(name).options
    return _plugin_options(model, value, {**(info.context or {}), section: dict(info.data)})


class _InlineOptions(Strict):
    """A section whose keys that are not its own are its plug-in's options; a bad one is
    reported where it was written (``batch.scheduler``, ``policy.steady_up_factor``)."""

    _section: ClassVar[str]

    @model_validator(mode="wrap")
    @classmethod
    def _inline_options(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return _inline(cls, cls._section, data, handler)


class CloudConfig(Strict):
    """One cloud: what policies know of it, and how to reach it.

    ``driver`` names a registered cloud driver (:data:`elasticsite.plugins.clouds`);
    ``options`` are validated by that driver's own options model when the file is
    loaded, so a typo or a value out of range is reported before anything starts.
    """

    name: str
    driver: str = Field(plugins.DEFAULT_CLOUD_DRIVER, validate_default=True)
    max_instances: int = Field(10, ge=0)
    quota: int | None = Field(
        None, ge=0, description="the provider's limit on instances; urgent bursts stop there"
    )
    volunteer: bool = Field(
        False, description="offer this site's workers there as targets of urgent policies"
    )
    price_per_hour: float = Field(0.0, ge=0)
    billing_increment: float = Field(1.0, gt=0, le=31 * DAY, description="seconds; 3600 = hourly")
    boot_time: float = Field(60.0, ge=0, le=DAY, description="estimate, seconds")
    shutdown_time: float = Field(6.0, ge=0, le=DAY, description="estimate, seconds")
    waste_estimate: WasteEstimate = Field(
        "observed",
        description="observed: policies weigh the boot and shutdown times seen so far "
        "(boot_time and shutdown_time until then); fixed: boot_time and shutdown_time",
    )
    vm_types: list[VMTypeConfig] = Field(default_factory=lambda: [VMTypeConfig()], min_length=1)
    serves: dict[str, list[str]] = Field(
        default_factory=dict,
        description="job attribute -> values; only matching jobs count as this cloud's demand",
    )
    spot: bool = Field(False, description="spot/preemptible capacity the cloud may take back")
    spot_price_cap: float | None = Field(
        None, gt=0, description="most a spot instance may cost per hour; default on-demand's"
    )
    options: SerializeAsAny[PluginOptions] = Field(
        default_factory=PluginOptions, validate_default=True
    )

    @model_validator(mode="after")
    def _spot(self) -> CloudConfig:
        if self.spot_price_cap is not None and not self.spot:
            raise ValueError(f"cloud {self.name}: spot_price_cap is set but spot is not")
        return self

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
        if not NAME.match(v):
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
        return _chosen_options(plugins.clouds, "cloud", "driver", v, info)

    def spec(self) -> CloudSpec:
        return CloudSpec(
            name=self.name,
            driver=self.driver,
            max_instances=self.max_instances,
            quota=self.quota,
            volunteer=self.volunteer,
            price_per_hour=self.price_per_hour,
            billing_increment=self.billing_increment,
            boot_time=self.boot_time,
            shutdown_time=self.shutdown_time,
            waste_estimate=self.waste_estimate,
            vm_types=tuple(VMType(v.name, v.cores, v.memory_mb) for v in self.vm_types),
            serves=Selector.of(self.serves),
            images=tuple(
                (v.name, image) for v in self.vm_types if (image := self.options.image_of(v.name))
            ),
            spot=self.spot,
            spot_price_cap=self.spot_price_cap,
        )


class BatchConfig(_InlineOptions):
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

    _section = "batch"
    type: str = Field(plugins.DEFAULT_BATCH_SYSTEM, validate_default=True)
    path: str = "batch.db"
    mode: Literal["external", "power_save"] = "external"
    options: SerializeAsAny[PluginOptions] = Field(
        default_factory=PluginOptions, validate_default=True
    )

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
        return _chosen_options(plugins.batch_systems, "batch", "type", v, info)


class PolicyConfig(_InlineOptions):
    """Which policy runs, the limits every policy obeys, and the policy's own options.

    ``name`` names a registered policy (:func:`elasticsite.policies.get`). Its options
    go directly in ``[policy]`` (as the built-in policies' thresholds always have) or in
    ``[policy.options]``, and are validated by the policy's own options model, joined
    with the built-in policies' (:func:`elasticsite.policies.base.options_model`).
    """

    _section = "policy"
    name: str = Field("bursts", validate_default=True)
    spend_cap_per_hour: float | None = Field(None, ge=0)
    urgent_extra_instances: int = Field(
        0, ge=0, description="workers urgent jobs may add past the clouds' max_instances"
    )
    urgent_extra_spend_per_hour: float = Field(
        0.0, ge=0, description="spend per hour urgent jobs may add past spend_cap_per_hour"
    )
    budget: BudgetConfig | None = None
    cloud_rule: CloudRule = "cheapest"
    billing_margin: float = Field(120.0, ge=0, le=31 * DAY, description="seconds")
    options: SerializeAsAny[PluginOptions] = Field(
        default_factory=PluginOptions, validate_default=True
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _registered(policy_registry, v)

    @field_validator("options", mode="before")
    @classmethod
    def _options(cls, v: Any, info: ValidationInfo) -> Any:
        name = info.data.get("name")
        if name is None:  # the name is reported instead
            return PluginOptions()
        context = {**(info.context or {}), "policy": dict(info.data)}  # with the base dir
        return _plugin_options(options_model(name), v, context)

    def settings(self, **more: Any) -> PolicySettings:
        """What the policy is given: the limits above and the policy's validated options
        (:func:`~elasticsite.policies.base.with_options`); ``more`` adds the rest
        (``stall_timeout``)."""
        budget = None if self.budget is None else self.budget.budget()
        own = {k: getattr(self, k) for k in _LIMITS}
        return with_options(self.options, **own, budget=budget, **more)


_LIMITS = (
    "spend_cap_per_hour",
    "urgent_extra_instances",
    "urgent_extra_spend_per_hour",
    "cloud_rule",
    "billing_margin",
)
"""The limits of ``[policy]`` every policy obeys, as :class:`PolicySettings` names them."""


def _inline(
    cls: type[Strict], section: str, data: Any, handler: ValidatorFunctionWrapHandler
) -> Any:
    """``data`` validated with its keys that are not ``cls``'s own moved into its
    ``options`` table; a bad one is reported where it was written."""
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
        raise ValueError(f"{', '.join(both)}: given both in [{section}] and in [{section}.options]")
    own = {k: v for k, v in data.items() if k in cls.model_fields}
    try:
        return handler({**own, "options": {**table, **inline}})
    except ValidationError as exc:
        raise _moved(exc, inline) from None


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
