"""Site configuration: a TOML file validated into settings, or one clear error.

A bad file never starts a half-configured manager: :func:`load_config` raises
:class:`ConfigError` whose message names the file and every bad field, e.g.::

    examples/local.toml: clouds[0].max_instances: must be >= 0 (got -3)

A cloud's ``driver`` and the ``[batch] type`` name plug-ins (:mod:`elasticsite.plugins`);
their ``options`` are checked here too, by each plug-in's own model, e.g.::

    site.toml: clouds[0].options.fail_boot: must be a probability in [0, 1] (got 2)
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from elasticsite.clouds.bootstrap import BootstrapConfig
from elasticsite.config.advisor import AdvisorConfig, AdvisorRepository, AdvisorResource
from elasticsite.config.common import ConfigError, Strict, explain
from elasticsite.config.plugged import BatchConfig, CloudConfig, VMTypeConfig
from elasticsite.config.sections import (
    BudgetConfig,
    ContextConfig,
    ManagerConfig,
    PolicyConfig,
    SiteSection,
)
from elasticsite.config.urgent import UrgentConfig
from elasticsite.model import CloudSpec
from elasticsite.policies.base import PolicySettings

__all__ = [
    "AdvisorConfig",
    "AdvisorRepository",
    "AdvisorResource",
    "BatchConfig",
    "BudgetConfig",
    "CloudConfig",
    "ConfigError",
    "ContextConfig",
    "ManagerConfig",
    "PolicyConfig",
    "SiteConfig",
    "SiteSection",
    "UrgentConfig",
    "VMTypeConfig",
    "explain",
    "load_config",
    "parse_config",
]


class SiteConfig(Strict):
    """A whole site: manager, policy, batch system and clouds."""

    site: SiteSection = Field(default_factory=SiteSection)
    """What holds for the whole site (the currency of its clouds' prices)."""
    manager: ManagerConfig = Field(default_factory=ManagerConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    batch: BatchConfig = Field(default_factory=BatchConfig)
    clouds: list[CloudConfig] = Field(min_length=1)
    context: ContextConfig | None = None
    bootstrap: BootstrapConfig | None = None
    """How workers boot from a plain image (``docs/bootstrap.md``); none: the image knows."""
    advisor: AdvisorConfig = Field(default_factory=AdvisorConfig)
    """The deadline advisor's candidates and staging (``docs/advisor.md``)."""
    urgent: UrgentConfig | None = None
    """The urgent services this site's submit path asks (``docs/urgent.md``)."""

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
            urgent_extra_instances=p.urgent_extra_instances,
            urgent_extra_spend_per_hour=p.urgent_extra_spend_per_hour,
            budget=None if p.budget is None else p.budget.budget(),
            cloud_rule=p.cloud_rule,
            billing_margin=p.billing_margin,
            redirect_to=p.redirect_to,
            provision=p.provision,
            rebalance=p.rebalance,
            stall_timeout=self.manager.stall_timeout,
            params=dict(p.params),
        )

    def cloud_specs(self) -> list[CloudSpec]:
        return [c.spec() for c in self.clouds]


def parse_config(data: dict[str, Any], source: str = "<config>") -> SiteConfig:
    """Validate already-parsed TOML data."""
    try:
        config = SiteConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(explain(exc, source)) from None
    from elasticsite import plugins, policies

    try:
        chosen = policies.get(config.policy.name)
    except policies.UnknownPolicy as exc:
        raise ConfigError(f"{source}: policy.name: {exc}") from None
    if getattr(chosen, "owners", False) and not plugins.batch_systems.get(config.batch.type).owners:
        raise ConfigError(
            f"{source}: policy.name: {config.policy.name!r} keeps each VM for the user whose "
            f"share it serves, which batch type {config.batch.type!r} cannot do (no per-user "
            "nodes); use slurm, htcondor or local"
        )
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
