"""The embedded batch system as the ``local`` batch system: its options and its factory.

Apart from :mod:`elasticsite.batch.local` so that worker processes, which import
that module, never load pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from elasticsite.batch.local import LocalBatch
from elasticsite.model import JobState
from elasticsite.plugins import BatchPlugin, PluginOptions

if TYPE_CHECKING:
    from elasticsite.batch.base import BatchSystem
    from elasticsite.model import Job
    from elasticsite.plugins import SiteInfo

__all__ = ["LocalBatchOptions", "plugin"]


class LocalBatchOptions(PluginOptions):
    """The embedded batch system's options, written in ``[batch]`` itself (as they
    always were) or in ``[batch.options]``. Its file is the site's ``[batch] path``,
    which local cloud workers join too."""

    scheduler: Literal["fcfs", "easy"] = "easy"
    node_partition: str = Field("", pattern=r"^[A-Za-z0-9_-]*$", max_length=64)
    """The partition of the cloud workers' nodes; ``""`` (the default): every job may
    run on them. Set it (e.g. ``"cloud"``) to run only jobs submitted or redirected
    there on cloud workers, and the rest on the site's own nodes."""


def _create(options: LocalBatchOptions, site: SiteInfo) -> LocalBatch:
    return LocalBatch(
        site.batch_path,
        scheduler=options.scheduler,
        heartbeat_timeout=site.config.manager.heartbeat_timeout,
        node_partition=options.node_partition,
    )


UNFINISHED = (JobState.QUEUED, JobState.HELD, JobState.REQUEUED, JobState.RUNNING)
"""What is listed without ``finished``: every job still to run or running."""


def _ledger(batch: BatchSystem, finished: bool) -> tuple[list[Job], dict[str, int]]:
    """Every job the embedded system keeps (without ``finished``, the unfinished
    ones), and the count in every state."""
    assert isinstance(batch, LocalBatch), batch
    return batch.jobs(None if finished else UNFINISHED), dict(batch.counts())


def _cloud_partition(options: LocalBatchOptions) -> str:
    return options.node_partition


plugin = BatchPlugin(LocalBatchOptions, _create, ledger=_ledger, cloud_partition=_cloud_partition)
"""The ``local`` entry point of ``elasticsite.batch``."""
