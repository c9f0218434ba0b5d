"""Building a running site (batch system, clouds, state store, manager) from its configuration.

The batch system and each cloud driver are plug-ins found by name
(:mod:`elasticsite.plugins`), built from the options the configuration validated. The
state directory is created for its owner alone (it holds the broker context's secret).
What a plug-in refuses as it starts becomes one :class:`ConfigError`; a state file that
cannot be used raises :class:`~elasticsite.files.StateFileError`. Opened to be read
(``create=False``, what ``status``, ``queue``, ``job`` and ``cancel`` do), a site
creates nothing: with no state yet, :class:`NoSiteState` says where it looked.

A :class:`Site` also answers what the command line shows of it (:meth:`Site.queue`,
:meth:`Site.status`, :meth:`Site.job`) and cancels jobs (:meth:`Site.cancel`),
whatever its batch system; :func:`request_power` hands Slurm's power-saving requests
to the site's manager.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from elasticsite import plugins, policies
from elasticsite.batch.base import BatchError, BatchSystem, BatchView, JobDetail
from elasticsite.clouds.base import CloudDriver
from elasticsite.config import CloudConfig, ConfigError, SiteConfig
from elasticsite.files import StateFileError, private_dir
from elasticsite.manager.loop import Manager
from elasticsite.manager.store import StateStore
from elasticsite.model import JobState

if TYPE_CHECKING:
    from elasticsite.manager.context_link import SavedContext
    from elasticsite.manager.spending import SpendingView
    from elasticsite.manager.store import WorkerRecord
    from elasticsite.model import Job, Transition

__all__ = [
    "Cancelled",
    "NoSiteState",
    "QueueView",
    "Site",
    "SiteStatus",
    "open_site",
    "request_power",
]

log = logging.getLogger(__name__)


class NoSiteState(LookupError):
    """The site has no state where its configuration puts it: its manager never ran
    there and no job was submitted. ``state_dir`` is where it looked."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(f"no site state at {state_dir}")
        self.state_dir = state_dir


@dataclass(frozen=True, slots=True)
class QueueView:
    """The site's jobs in the order the batch system would start them, and how many
    jobs are in each state."""

    jobs: list[Job]
    counts: dict[str, int]
    unservable: dict[str, str] = field(default_factory=dict)
    """Queued jobs the manager found no cloud can run, and why (its last known marks)."""


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
    clouds: dict[str, dict[str, object]]
    """Clouds with a health record (closed, or failing): kind, reason, until when."""
    spending: SpendingView
    """What the site has spent, per cloud and in the budget's period, and the budget."""
    unservable: dict[str, tuple[str, float]] = field(default_factory=dict)
    """Queued jobs no cloud can run as of the manager's last step: id -> (why, since)."""
    cloud_errors: dict[str, dict[str, object]] = field(default_factory=dict)
    """Each cloud's last error: when, what was done, its kind and the API call."""


@dataclass(frozen=True, slots=True)
class Cancelled:
    """What cancelling one job did: ``before`` is the state it was in (and ``node``
    where it ran), ``already`` true when it was cancelled before."""

    job_id: str
    before: JobDetail
    already: bool = False


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
        told = plugins.batch_systems.get(batch.type).userdata
        more = {} if told is None else told(batch.options, batch.mode)
        return {"batch": batch.type, **more}

    @property
    def lists_finished_jobs(self) -> bool:
        """Whether :meth:`queue` can list finished jobs: only a batch system that keeps
        them (the embedded one); others are asked through their own tools."""
        return plugins.batch_systems.get(self.config.batch.type).ledger is not None

    def queue(self, *, finished: bool = False) -> QueueView:
        """The queued and running jobs (with ``finished``, every job), and the count per
        state: the embedded system counts every job it keeps, others what one snapshot
        shows.

        Raises :class:`BatchError` when the batch system cannot be read, ValueError for
        ``finished`` where :attr:`lists_finished_jobs` is false.
        """
        marks = {job: why for job, (why, _) in self.store.unservable().items()}
        ledger = plugins.batch_systems.get(self.config.batch.type).ledger
        if ledger is not None:
            return QueueView(*ledger(self.batch, finished), marks)
        if finished:
            raise ValueError(f"the {self.config.batch.type} batch system keeps no finished jobs")
        view = self.batch.snapshot()
        return QueueView([*view.running, *view.queued], _snapshot_counts(view), marks)

    def status(self, *, events: int = 10, now: float | None = None) -> SiteStatus:
        """The unfinished workers, the jobs per state, the broker context, the counters,
        the last ``events`` transitions and the money spent by ``now``; a batch system
        that cannot be read is reported in the result, not raised."""
        from elasticsite.manager.context_link import saved_context
        from elasticsite.manager.spending import spending_view

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
            clouds=self.store.cloud_health(),
            spending=spending_view(
                self.store,
                self.config.cloud_specs(),
                self.config.policy_settings().budget,
                self.config.site.currency,
                time.time() if now is None else now,
            ),
            unservable=self.store.unservable(),
            cloud_errors=self.store.cloud_errors(),
        )

    def job(self, job_id: str) -> JobDetail:
        """What the batch system tells of one job, with the manager's worker whose node
        ran it and, on the embedded cloud, that worker's log. Raises
        :class:`~elasticsite.batch.base.UnknownJob` (or another BatchError)."""
        job = self.batch.job(job_id)
        if not job.node:
            return job
        record = next(
            (r for r in self.store.load(include_done=True) if r.worker.node == job.node), None
        )
        if record is None:
            return job
        log_path = job.worker_log
        cloud = next((c for c in self.config.clouds if c.name == record.worker.cloud), None)
        kept = None if cloud is None else plugins.clouds.get(cloud.driver).worker_log
        if not log_path and kept is not None:
            log_path = str(kept(self.state_dir, record.worker.id))
        return dataclasses.replace(job, worker=record.worker.id, worker_log=log_path)

    def cancel(self, job_id: str) -> Cancelled:
        """Cancel one queued, held or running job (the batch system's rules say whose).
        Raises :class:`~elasticsite.batch.base.UnknownJob`, or a BatchError saying why
        not (it ended already, the batch system refused)."""
        before = self.batch.job(job_id)
        self.batch.cancel(job_id)
        return Cancelled(job_id, before, already=before.state is JobState.CANCELLED)

    def _count_jobs(self) -> dict[str, int]:
        """Jobs per state, counted as :meth:`queue` counts them."""
        ledger = plugins.batch_systems.get(self.config.batch.type).ledger
        if ledger is not None:
            return ledger(self.batch, False)[1]
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

            context = ContextLink(
                self.config.context,
                self.store,
                self.config.manager.site_id,
                loopback_workers=any(
                    plugins.clouds.get(c.driver).loopback for c in self.config.clouds
                ),
            )
            try:
                userdata.update(context.ensure())
            except ContextError as exc:
                context.close()
                raise ConfigError(f"context: broker {self.config.context.broker}: {exc}") from None
        if self.config.manager.metrics_port and "metrics" not in kwargs:
            from elasticsite.manager.exporter import ManagerMetrics

            kwargs["metrics"] = ManagerMetrics(
                self.config.cloud_specs(),
                self.config.policy.spend_cap_per_hour,
                currency=self.config.site.currency,
                budget=self.config.policy_settings().budget,
            )
        if self.config.manager.history_interval and "observers" not in kwargs:
            from elasticsite.history.samples import HistoryWriter

            kwargs["observers"] = [
                HistoryWriter(
                    self.state_dir / "manager.db",
                    self.config.cloud_specs(),
                    self.config.policy.spend_cap_per_hour,
                    every=self.config.manager.history_interval,
                    currency=self.config.site.currency,
                    budget=self.config.policy_settings().budget,
                    busy_timeout=self.store.timeout,
                )
            ]
        from elasticsite.manager.job_log import FailedJobLog

        # one log line per failed job, naming where its stderr is
        kwargs["observers"] = [*kwargs.get("observers", ()), FailedJobLog(self.batch, time.time)]
        if self.config.advisor.record and "recorder" not in kwargs:
            from elasticsite.history.observations import store_path
            from elasticsite.history.recorder import Recorder

            kwargs["recorder"] = Recorder(
                store_path(self.state_dir), resource=self.config.manager.site_id
            )
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
            currency=self.config.site.currency,
            **kwargs,
        )


def _snapshot_counts(view: BatchView) -> dict[str, int]:
    """Queued and running jobs of a snapshot, the states with none left out."""
    counts = (("queued", len(view.queued)), ("running", len(view.running)))
    return {state: n for state, n in counts if n}


def _cloud(cfg: CloudConfig, site: plugins.SiteInfo) -> CloudDriver:
    """The cloud's driver, built by its plug-in from the options the configuration
    validated; what the driver refuses as it starts is a :class:`ConfigError`."""
    try:
        plugin = plugins.clouds.get(cfg.driver)
        return plugin.create(cfg.options, cfg, site)
    except (plugins.UnknownPlugin, TypeError, ValueError) as exc:
        raise ConfigError(f"clouds.{cfg.name}: {exc}") from None


def _batch(config: SiteConfig, site: plugins.SiteInfo) -> BatchSystem:
    """The batch system, built by its plug-in from the options the configuration
    validated; what it refuses as it starts (no bindings, a server that does not
    answer) is a :class:`ConfigError`, an unusable state file a :class:`StateFileError`."""
    try:
        plugin = plugins.batch_systems.get(config.batch.type)
        batch: BatchSystem = plugin.create(config.batch.options, site)
    except StateFileError:
        raise
    except (plugins.UnknownPlugin, BatchError, TypeError, ValueError) as exc:
        raise ConfigError(f"batch ({config.batch.type}): {exc}") from None
    return batch


def _missing(path: Path) -> bool:
    """Whether ``path`` is not there; one that cannot be looked at (a directory without
    rights) is there, and opening it says why it cannot be used."""
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


def open_site(config: SiteConfig, base_dir: Path | None = None, *, create: bool = True) -> Site:
    """Open (creating if needed) the state directory and every part of the site.

    Without ``create``, to read the site and act on its jobs: nothing is created, and
    no cloud driver is built (``clouds`` is empty); a site with no state store raises
    :class:`NoSiteState`, and on the embedded batch system one with no queue file too.
    """
    state_dir = config.state_dir(base_dir).resolve()
    batch_path = Path(config.batch.path)
    if not batch_path.is_absolute():
        batch_path = state_dir / batch_path
    if create:
        private_dir(state_dir)
    elif _missing(state_dir / "manager.db") or (
        config.batch.type == "local" and _missing(batch_path)
    ):
        raise NoSiteState(state_dir)
    site = plugins.SiteInfo(config.manager.site_id, state_dir, batch_path, config)
    batch = _batch(config, site)
    clouds = {cfg.name: _cloud(cfg, site) for cfg in config.clouds} if create else {}
    store = StateStore(state_dir / "manager.db")
    return Site(config, state_dir, batch, clouds, store)


def request_power(
    config: SiteConfig,
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
    state_dir = private_dir(config.state_dir())  # absolute, as loaded from its file
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
