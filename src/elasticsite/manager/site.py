"""Building a running site (batch system, clouds, state store, manager) from its configuration.

The state directory is created for its owner alone (it holds the broker context's
secret). Bad cloud options become one :class:`ConfigError` naming the option; a state
file that cannot be used raises :class:`~elasticsite.files.StateFileError`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticsite import policies
from elasticsite.batch.base import BatchError, BatchSystem
from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.base import CloudDriver
from elasticsite.clouds.local import LocalCloud
from elasticsite.config import BatchConfig, CloudConfig, ConfigError, SiteConfig
from elasticsite.files import private_dir
from elasticsite.manager.loop import Manager
from elasticsite.manager.store import StateStore

__all__ = ["Site", "open_site"]

log = logging.getLogger(__name__)

_LOCAL_OPTIONS = {
    "boot_delay",
    "boot_jitter",
    "shutdown_delay",
    "poll_interval",
    "seed",
    "fail_boot",
    "fail_launch",
    "api_delay",
}


@dataclass
class Site:
    """The parts of one configured site, opened on its state directory."""

    config: SiteConfig
    state_dir: Path
    batch: BatchSystem
    clouds: dict[str, CloudDriver]
    store: StateStore

    def userdata(self) -> dict[str, str]:
        """What every worker is told at launch about joining the batch system."""
        batch = self.config.batch
        if batch.type != "slurm":
            return {"batch": batch.type}
        return {
            "batch": "slurm",
            # External mode adds dynamic nodes; power saving starts declared CLOUD nodes.
            "slurm_node_mode": "cloud" if batch.mode == "power_save" else "dynamic",
            "slurm_feature": str(getattr(self.batch, "node_feature", "elastic")),
        }

    def manager(self, **kwargs: Any) -> Manager:
        """The site's manager; with a broker configured, its context is ensured first.

        Raises :class:`ConfigError` when the broker cannot be reached or refuses.
        """
        userdata = self.userdata()
        context = None
        if self.config.context is not None:
            from elasticsite.context.client import ContextError
            from elasticsite.manager.context_link import ContextLink

            context = ContextLink(self.config.context, self.store, self.config.manager.site_id)
            try:
                userdata.update(context.ensure())
            except ContextError as exc:
                context.close()
                raise ConfigError(f"context: broker {self.config.context.broker}: {exc}") from None
        return Manager(
            config=self.config.manager,
            batch=self.batch,
            clouds=self.clouds,
            specs=self.config.cloud_specs(),
            store=self.store,
            policy=policies.get(self.config.policy.name),
            settings=self.config.policy_settings(),
            userdata={**userdata, **kwargs.pop("userdata", {})},
            context=context,
            power_save=self.config.batch.mode == "power_save",
            **kwargs,
        )


def _local_cloud(
    cfg: CloudConfig, config: SiteConfig, state_dir: Path, batch_path: Path
) -> LocalCloud:
    unknown = set(cfg.options) - _LOCAL_OPTIONS
    if unknown:
        raise ConfigError(
            f"clouds.{cfg.name}.options: unknown option(s) {', '.join(sorted(unknown))} "
            f"for the local driver (known: {', '.join(sorted(_LOCAL_OPTIONS))})"
        )
    opts = cfg.options

    def number(key: str, default: float, low: float, high: float, what: str) -> float:
        """Option ``key`` as a finite float in [low, high]."""
        value = opts.get(key, default)
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not low <= value <= high:
            raise ConfigError(f"clouds.{cfg.name}.options.{key}: must be {what} (got {value!r})")
        return float(value)

    def seconds(key: str, default: float) -> float:
        return number(key, default, 0.0, 86400.0, "a number of seconds in [0, 86400]")

    seed = opts.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ConfigError(f"clouds.{cfg.name}.options.seed: must be an integer (got {seed!r})")
    checked = {
        "boot_delay": seconds("boot_delay", cfg.boot_time),
        "boot_jitter": seconds("boot_jitter", 0.0),
        "shutdown_delay": seconds("shutdown_delay", cfg.shutdown_time),
        "poll_interval": number("poll_interval", 1.0, 0.001, 3600.0, "in [0.001, 3600] s"),
        "fail_boot": number("fail_boot", 0.0, 0.0, 1.0, "a probability in [0, 1]"),
        "fail_launch": number("fail_launch", 0.0, 0.0, 1.0, "a probability in [0, 1]"),
        "api_delay": seconds("api_delay", 0.0),
    }
    try:
        return LocalCloud(
            name=cfg.name,
            state_dir=state_dir,
            site_id=config.manager.site_id,
            batch_path=batch_path,
            seed=seed,
            **checked,
        )
    except (TypeError, ValueError) as exc:  # whatever the driver itself refuses
        raise ConfigError(f"clouds.{cfg.name}.options: {exc}") from None


def _batch(config: SiteConfig, batch_path: Path) -> BatchSystem:
    """The configured batch system; adapters validate their own options."""
    cfg: BatchConfig = config.batch
    if cfg.type == "local":
        return LocalBatch(
            batch_path,
            scheduler=cfg.scheduler,
            heartbeat_timeout=config.manager.heartbeat_timeout,
        )
    if cfg.type == "slurm":
        from elasticsite.batch import slurm

        factory: Any = slurm.SlurmBatch.from_options
    elif cfg.type == "pbs":
        from elasticsite.batch import pbs

        factory = pbs.PbsBatch.from_options
    else:
        from elasticsite.batch import htcondor

        factory = htcondor.CondorBatch.from_options
    try:
        batch: BatchSystem = factory(cfg.options)
    except (BatchError, ValueError, TypeError) as exc:
        raise ConfigError(f"batch.options: {exc}") from None
    return batch


def open_site(config: SiteConfig, base_dir: Path | None = None) -> Site:
    """Open (creating if needed) the state directory and every part of the site."""
    state_dir = private_dir(config.state_dir(base_dir).resolve())
    batch_path = Path(config.batch.path)
    if not batch_path.is_absolute():
        batch_path = state_dir / batch_path
    batch = _batch(config, batch_path)
    clouds: dict[str, CloudDriver] = {}
    for cfg in config.clouds:
        clouds[cfg.name] = _local_cloud(cfg, config, state_dir, batch_path)
    store = StateStore(state_dir / "manager.db")
    return Site(config, state_dir, batch, clouds, store)
