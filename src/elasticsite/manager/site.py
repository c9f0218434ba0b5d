"""Building a running site (batch system, clouds, state store, manager) from its configuration.

The state directory is created for its owner alone (it holds the broker context's
secret). Bad cloud options become one :class:`ConfigError` naming the option; a state
file that cannot be used raises :class:`~elasticsite.files.StateFileError`.

A :class:`Site` also answers what the command line shows of it (:meth:`Site.queue`,
:meth:`Site.status`), whatever its batch system; :func:`request_power` hands Slurm's
power-saving requests to the site's manager.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elasticsite import policies
from elasticsite.batch.base import BatchError, BatchSystem, BatchView
from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.base import CloudDriver
from elasticsite.clouds.local import LocalCloud
from elasticsite.config import BatchConfig, CloudConfig, ConfigError, SiteConfig
from elasticsite.files import private_dir
from elasticsite.manager.loop import Manager
from elasticsite.manager.store import StateStore

if TYPE_CHECKING:
    from elasticsite.manager.context_link import SavedContext
    from elasticsite.manager.store import WorkerRecord
    from elasticsite.model import Job, Transition

__all__ = ["QueueView", "Site", "SiteStatus", "open_site", "request_power"]

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


@dataclass(frozen=True, slots=True)
class QueueView:
    """The site's jobs in the order the batch system would start them, and how many
    jobs are in each state."""

    jobs: list[Job]
    counts: dict[str, int]


@dataclass(frozen=True, slots=True)
class SiteStatus:
    """The manager's view of its site, read from the state store and the batch system.

    The workers come from the store alone, so they are known even when the batch
    system cannot be read: then ``batch_error`` says why and ``job_counts`` is empty.
    """

    workers: list[WorkerRecord]
    job_counts: dict[str, int]
    batch_error: BatchError | None
    context: SavedContext | None
    counters: dict[str, int]
    transitions: list[Transition]


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

    @property
    def lists_finished_jobs(self) -> bool:
        """Whether :meth:`queue` can list finished jobs: only the embedded batch system
        keeps them; others are asked through their own tools."""
        return isinstance(self.batch, LocalBatch)

    def queue(self, *, finished: bool = False) -> QueueView:
        """The queued and running jobs (with ``finished``, every job), and the count per
        state: the embedded system counts every job it keeps, others what one snapshot
        shows.

        Raises :class:`BatchError` when the batch system cannot be read, ValueError for
        ``finished`` where :attr:`lists_finished_jobs` is false.
        """
        if isinstance(self.batch, LocalBatch):
            jobs = self.batch.jobs(None if finished else ["queued", "running"])
            return QueueView(jobs, dict(self.batch.counts()))
        if finished:
            raise ValueError(f"the {self.config.batch.type} batch system keeps no finished jobs")
        view = self.batch.snapshot()
        return QueueView([*view.running, *view.queued], _snapshot_counts(view))

    def status(self, *, events: int = 10) -> SiteStatus:
        """The unfinished workers, the jobs per state, the broker context, the counters
        and the last ``events`` transitions; a batch system that cannot be read is
        reported in the result, not raised."""
        from elasticsite.manager.context_link import saved_context

        workers = self.store.load(include_done=False)
        batch_error = None
        try:
            counts = self._count_jobs()
        except BatchError as exc:
            counts, batch_error = {}, exc
        return SiteStatus(
            workers=workers,
            job_counts=counts,
            batch_error=batch_error,
            context=saved_context(self.store),
            counters=self.store.counters(),
            transitions=self.store.transitions(last=events) if events else [],
        )

    def _count_jobs(self) -> dict[str, int]:
        """Jobs per state, counted as :meth:`queue` counts them."""
        if isinstance(self.batch, LocalBatch):
            return dict(self.batch.counts())
        return _snapshot_counts(self.batch.snapshot())

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


def _snapshot_counts(view: BatchView) -> dict[str, int]:
    """Queued and running jobs of a snapshot, the states with none left out."""
    counts = (("queued", len(view.queued)), ("running", len(view.running)))
    return {state: n for state, n in counts if n}


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


def request_power(
    config: SiteConfig,
    base_dir: Path,
    action: str,
    nodes: Sequence[str],
    *,
    label: str,
    nodelist: str,
) -> None:
    """Hand Slurm's power-saving request (``action`` "resume" or "suspend") for
    ``nodes`` to the manager, and log it as ``label nodelist`` in ``power.log``.

    Under power saving the nodes are queued in the state store and the running manager
    takes them at its next step; in external mode the manager declared these nodes and
    drives them itself, so the request is only acknowledged in the log. Opens nothing
    but the state directory and store (slurmctld waits on this). Raises
    :class:`~elasticsite.files.StateFileError` when either cannot be used.
    """
    # Absolute in power_save mode (the configuration insists); else next to the config.
    state_dir = config.state_dir(base_dir)
    private_dir(state_dir)
    if config.batch.mode == "power_save":
        store = StateStore(state_dir / "manager.db")
        try:
            store.add_power_requests(action, nodes, time.time())
        finally:
            store.close()
    else:
        label += " (external mode: acknowledged, the manager drives these nodes)"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    with open(state_dir / "power.log", "a", encoding="utf-8") as log_file:
        log_file.write(f"{stamp} pid {os.getpid()}: {label} {nodelist} ({len(nodes)} nodes)\n")
