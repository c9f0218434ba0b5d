"""Building a running site (batch system, clouds, state store, manager) from its configuration."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticsite import policies
from elasticsite.batch.base import BatchSystem
from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.base import CloudDriver
from elasticsite.clouds.local import LocalCloud
from elasticsite.config import CloudConfig, ConfigError, SiteConfig
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

    def manager(self, **kwargs: Any) -> Manager:
        return Manager(
            config=self.config.manager,
            batch=self.batch,
            clouds=self.clouds,
            specs=self.config.cloud_specs(),
            store=self.store,
            policy=policies.get(self.config.policy.name),
            settings=self.config.policy_settings(),
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
    return LocalCloud(
        name=cfg.name,
        state_dir=state_dir,
        site_id=config.manager.site_id,
        batch_path=batch_path,
        boot_delay=float(opts.get("boot_delay", cfg.boot_time)),
        boot_jitter=float(opts.get("boot_jitter", 0.0)),
        shutdown_delay=float(opts.get("shutdown_delay", cfg.shutdown_time)),
        poll_interval=float(opts.get("poll_interval", 1.0)),
        seed=opts.get("seed"),
        fail_boot=float(opts.get("fail_boot", 0.0)),
        fail_launch=float(opts.get("fail_launch", 0.0)),
        api_delay=float(opts.get("api_delay", 0.0)),
    )


def open_site(config: SiteConfig, base_dir: Path | None = None) -> Site:
    """Open (creating if needed) the state directory and every part of the site."""
    state_dir = config.state_dir(base_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    batch_path = Path(config.batch.path)
    if not batch_path.is_absolute():
        batch_path = state_dir / batch_path
    batch = LocalBatch(
        batch_path,
        scheduler=config.batch.scheduler,
        heartbeat_timeout=config.manager.heartbeat_timeout,
    )
    clouds: dict[str, CloudDriver] = {}
    for cfg in config.clouds:
        clouds[cfg.name] = _local_cloud(cfg, config, state_dir, batch_path)
    store = StateStore(state_dir / "manager.db")
    return Site(config, state_dir, batch, clouds, store)
