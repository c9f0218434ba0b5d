"""The site's log line for every job that failed, naming where its stderr is.

A step observer of the manager (:class:`FailedJobLog`): after each step it learns which
jobs failed since the last, and logs one WARNING each, ``job 12 failed (exit 127:
command not found) on w-3; its stderr: /var/lib/.../jobs/12/stderr``, with the job
and node ids for ``--log-format json``. It never raises into the loop (the manager
logs an observer's error and goes on).

The embedded batch system says which jobs failed since a given time in one query. For
the others, a job that left the queue or stopped running since the last step is
looked up (``BatchSystem.job``), at most :data:`LOOKUPS_PER_STEP` per step so a busy
cluster's thousand completions cost no more than that; the rest are counted in one
line, not lost in silence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from elasticsite.batch.base import BatchError, BatchSystem, JobDetail, UnknownJob
from elasticsite.batch.local import LocalBatch
from elasticsite.logs import ids
from elasticsite.model import JobState, state_text

if TYPE_CHECKING:
    from elasticsite.manager.report import StepReport

__all__ = ["LOOKUPS_PER_STEP", "FailedJobLog", "failure_line"]

log = logging.getLogger("elasticsite.jobs")

LOOKUPS_PER_STEP = 50
"""Jobs that left the snapshot looked up per step on batch systems other than the
embedded one."""
_OVERLAP = 60.0
"""Seconds the embedded system's query reaches back before the last one (a job ended
in another process may be written with a slightly earlier time)."""


def failure_line(job: JobDetail) -> str:
    """``job 12 failed (exit 127: command not found) on w-3; its stderr: PATH``."""
    where = f" on {job.node}" if job.node else ""
    stderr = job.stderr or "not said by the batch system"
    return f"job {job.id} {state_text(job)}{where}; its stderr: {stderr}"


class FailedJobLog:
    """Logs each job that failed once; called with every step's report."""

    def __init__(self, batch: BatchSystem, clock: Callable[[], float]) -> None:
        self.batch = batch
        self.clock = clock
        self.since = clock()
        self.logged: dict[str, float] = {}
        """Jobs logged, with their end, until they are older than the query reaches."""
        self.seen: set[str] = set()
        """Jobs queued or running at the last step (the other batch systems)."""

    def __call__(self, report: StepReport) -> None:
        if isinstance(self.batch, LocalBatch):
            self._embedded()
        elif report.snapshot is not None:
            now_seen = {j.id for j in (*report.snapshot.queued, *report.snapshot.running)}
            gone, self.seen = self.seen - now_seen, now_seen
            self._look_up(sorted(gone))

    def _embedded(self) -> None:
        assert isinstance(self.batch, LocalBatch)
        now = self.clock()
        for job in self.batch.failed_since(self.since - _OVERLAP):
            if job.id not in self.logged:
                self.logged[job.id] = job.finished_at or now
                self._log(job)
        self.since = now
        cutoff = now - 2 * _OVERLAP
        self.logged = {k: at for k, at in self.logged.items() if at >= cutoff}

    def _look_up(self, gone: list[str]) -> None:
        for job_id in gone[:LOOKUPS_PER_STEP]:
            try:
                job = self.batch.job(job_id)
            except UnknownJob:
                continue  # the batch system keeps no record of it
            except BatchError as exc:
                log.debug("cannot tell how job %s ended: %s", job_id, exc)
                continue
            if job.state is JobState.FAILED:
                self._log(job)
        if len(gone) > LOOKUPS_PER_STEP:
            log.info(
                "%d more jobs left the queue this step; not looked up (see `elasticsite "
                "job ID` for one of them)",
                len(gone) - LOOKUPS_PER_STEP,
            )

    @staticmethod
    def _log(job: JobDetail) -> None:
        log.warning("%s", failure_line(job), extra=ids(job=job.id, node=job.node))
