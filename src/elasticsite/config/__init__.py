"""Site configuration: a TOML file validated into settings, or one clear error.

A bad file never starts a half-configured manager: :func:`load_config` raises
:class:`ConfigError` whose message names the file and every bad field, e.g.::

    examples/local.toml: clouds[0].max_instances: must be >= 0 (got -3)

A file or directory the configuration names (``state_dir``, a key, a certificate, a
credentials file) is taken relative to the configuration file's directory, whatever
directory a command runs in (:data:`elasticsite.plugins.FilePath`).

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
from elasticsite.config.plugged import BatchConfig, CloudConfig, PolicyConfig, VMTypeConfig
from elasticsite.config.sections import BudgetConfig, ContextConfig, ManagerConfig, SiteSection
from elasticsite.config.urgent import UrgentConfig
from elasticsite.model import CloudSpec
from elasticsite.plugins import BASE_DIR
from elasticsite.policies.base import PolicySettings
from elasticsite.policies.redirect import RedirectOptions

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

    @model_validator(mode="before")
    @classmethod
    def _manager(cls, data: Any) -> Any:
        """A file without ``[manager]`` gets one validated like any other, so its default
        ``state_dir`` is taken from the file's directory too."""
        if isinstance(data, dict) and "manager" not in data:
            return {**data, "manager": {}}
        return data

    @model_validator(mode="after")
    def _unique(self) -> SiteConfig:
        seen: set[str] = set()
        for c in self.clouds:
            if c.name in seen:
                raise ValueError(f"two clouds are named {c.name!r}; names must be unique")
            seen.add(c.name)
        if self.batch.mode == "power_save" and not Path(self.manager.state_dir).is_absolute():
            # Only without a file to take it from: slurmctld runs the hooks elsewhere.
            raise ValueError(
                "manager.state_dir must be an absolute path when batch.mode is 'power_save' "
                f"(slurmctld runs the hooks from its own directory; got {self.manager.state_dir!r})"
            )
        return self

    def state_dir(self, base: Path | None = None) -> Path:
        """The state directory: as loaded from a file, absolute already; else relative
        to ``base`` (when given)."""
        p = Path(self.manager.state_dir).expanduser()
        return p if p.is_absolute() or base is None else base / p

    def policy_settings(self) -> PolicySettings:
        """What the policy decides with: ``[policy]`` and the manager's stall timeout."""
        return self.policy.settings(stall_timeout=self.manager.stall_timeout)

    def cloud_specs(self) -> list[CloudSpec]:
        return [c.spec() for c in self.clouds]


def parse_config(
    data: dict[str, Any], source: str = "<config>", base_dir: Path | None = None
) -> SiteConfig:
    """Validate already-parsed TOML data; relative paths in it are taken from
    ``base_dir`` when given (else left relative, to whatever directory uses them)."""
    context = {BASE_DIR: base_dir} if base_dir is not None else None
    try:
        config = SiteConfig.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(explain(exc, source)) from None
    from elasticsite import plugins, policies

    try:
        chosen = policies.get(config.policy.name)
    except policies.UnknownPolicy as exc:
        raise ConfigError(f"{source}: policy.name: {exc}") from None
    if chosen.owners and not plugins.batch_systems.get(config.batch.type).owners:
        raise ConfigError(
            f"{source}: policy.name: {config.policy.name!r} keeps each VM for the user whose "
            f"share it serves, which batch type {config.batch.type!r} cannot do (no per-user "
            "nodes); use slurm, htcondor or local"
        )
    if chosen.redirects:
        own = policies.options_of(config.policy_settings(), RedirectOptions)
        try:
            provision = policies.get(own.provision)
        except policies.UnknownPolicy as exc:
            raise ConfigError(f"{source}: policy.provision: {exc}") from None
        if provision.redirects:
            raise ConfigError(
                f"{source}: policy.provision: {own.provision!r} redirects jobs "
                "itself; name a provisioning policy (on_demand, bursts, core_demand ...)"
            )
        said = plugins.batch_systems.get(config.batch.type).cloud_partition
        partition = None if said is None else said(config.batch.options)
        if partition is not None and partition != own.redirect_to:
            raise ConfigError(
                f"{source}: policy.redirect_to: {own.redirect_to!r} is not the "
                f"partition of the cloud workers' nodes ({partition!r}, as [batch] sets it):"
                " redirected jobs would never run; make them the same"
            )
    return config


def load_config(path: str | Path) -> SiteConfig:
    """Read and validate a TOML site configuration; the paths it names are taken from
    its directory."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(data, str(path), path.absolute().parent)
