"""Slurm's jobs as :class:`~elasticsite.batch.slurm.SlurmBatch` submits and changes them:
``sbatch``, ``scontrol`` (priority, top, requeue, partition, hold, release, show),
``scancel``, and ``sacct`` for a job slurmctld has forgotten.
"""

from __future__ import annotations

import logging
import re

from elasticsite.batch.base import BatchError, JobDetail, JobRequest, UnknownJob
from elasticsite.batch.slurm_commands import NAME, SlurmCommands
from elasticsite.batch.slurm_jobs import JobReader
from elasticsite.batch.slurm_submit import sbatch_argv
from elasticsite.model import JobState, state_text

__all__ = ["SlurmJobControl"]

log = logging.getLogger("elasticsite.batch.slurm")

_JOB = re.compile(r"\d+(_\d+)?")


class SlurmJobControl(SlurmCommands):
    """The job methods of the batch contract."""

    partition: str | None
    """Where :meth:`submit` sends jobs (Slurm's default partition if None)."""
    _job_reader: JobReader

    def submit(self, request: JobRequest) -> str:
        """``sbatch --parsable --wrap`` (:func:`~.slurm_submit.sbatch_argv`): the job id."""
        out = self._cmd(*sbatch_argv(request, self.partition)).strip()
        job_id = out.split(";", 1)[0].strip()
        if not job_id.isdigit():
            raise BatchError(f"submit: sbatch printed no job id: {out!r}")
        return job_id

    def _job_update(self, verb: str, job_id: str, *argv: str) -> tuple[bool, str]:
        _check_job(job_id)
        ok, out = self._try(*argv)
        if not ok and "configuration not available now" in out:
            # Slurm re-checks the job after the change and finds its partition without a
            # usable node yet (elastic nodes not booted): the change itself was applied.
            log.debug("%s %s: applied; slurm notes: %s", verb, job_id, out)
            ok = True
        if not ok and "Invalid job id" in out:
            raise UnknownJob(f"no job {job_id!r} in slurm")
        if not ok and "already completed" in out.lower():
            raise BatchError(f"{verb}: job {job_id} has already finished")
        return ok, out

    def set_priority(self, job_id: str, priority: int) -> None:
        """Raise (or lower) a job ``priority`` points above its normal Slurm priority.

        Done with ``nice=-priority`` (``scontrol update jobid=X nice=N``), the same knob
        :meth:`submit` turns: ``set_priority(job, 0)`` restores Slurm's own order, and
        the job keeps aging as usual. Negative nice values need a Slurm administrator.
        """
        ok, out = self._job_update(
            "set_priority", job_id, "scontrol", "update", f"jobid={job_id}", f"nice={-priority}"
        )
        if not ok:
            raise BatchError(f"set_priority: job {job_id}: {out}")

    def move_to_front(self, job_id: str) -> None:
        """``scontrol top``; if the job is still not first, a priority above every other.

        ``scontrol top`` only reorders a user's own jobs (same partition, account and
        QOS), so a job of someone else can stay behind: the priority raise covers it.
        A running job: no-op.
        """
        ok, out = self._job_update("move_to_front", job_id, "scontrol", "top", job_id)
        if not ok and "no longer pending" in out:
            return  # running already
        queued, running = self._read_jobs(include_held=True)
        if any(j.id == job_id for j in running):
            return
        ahead = [j for j in queued if j.id != job_id]
        mine = next((j for j in queued if j.id == job_id), None)
        if mine is None:
            raise BatchError(f"move_to_front: job {job_id} is not queued")
        if ahead and queued[0].id != job_id:  # fix its Slurm priority above all others
            top = max(j.priority for j in ahead)
            ok, out = self._job_update(
                "move_to_front", job_id, "scontrol", "update", f"jobid={job_id}",
                f"priority={min(top + 1, 0xFFFFFFFD)}",
            )  # fmt: skip
            if not ok:
                raise BatchError(f"move_to_front: job {job_id}: {out}")

    def preempt(self, job_id: str) -> None:
        """``scontrol requeue``: the running job is killed and queued again. Queued: no-op."""
        ok, out = self._job_update("preempt", job_id, "scontrol", "requeue", job_id)
        if not ok and "is pending" not in out:
            raise BatchError(f"preempt: job {job_id}: {out}")

    def redirect(self, job_id: str, target: str) -> None:
        """``scontrol update jobid=X partition=TARGET``: the pending job moves to the
        cloud's partition (a job already there: no-op). A started job raises UnknownJob."""
        if not NAME.fullmatch(target or ""):
            raise BatchError(f"redirect: {target!r} is not a valid partition name")
        ok, out = self._job_update(
            "redirect", job_id, "scontrol", "update", f"jobid={job_id}", f"partition={target}"
        )
        if ok:
            return
        if "no longer pending" in out or "not pending" in out.lower():
            raise UnknownJob(f"redirect: job {job_id} is no longer queued")
        raise BatchError(f"redirect: job {job_id} to partition {target}: {out}")

    def hold(self, job_id: str) -> None:
        """``scontrol hold``: the pending job waits until released (held already: no-op).
        A started job raises UnknownJob."""
        _check_job(job_id)
        _, running = self._read_jobs(include_held=True)
        if any(j.id == job_id for j in running):  # scontrol would "hold" it, uselessly
            raise UnknownJob(f"hold: job {job_id} is no longer queued")
        ok, out = self._job_update("hold", job_id, "scontrol", "hold", job_id)
        if ok or "already held" in out.lower():
            return
        if "no longer pending" in out or "not pending" in out.lower():
            raise UnknownJob(f"hold: job {job_id} is no longer queued")
        raise BatchError(f"hold: job {job_id}: {out}")

    def release(self, job_id: str) -> None:
        """``scontrol release``: a held job may start again (a job not held: no-op)."""
        ok, out = self._job_update("release", job_id, "scontrol", "release", job_id)
        if not ok and "not held" not in out.lower() and "no longer pending" not in out:
            raise BatchError(f"release: job {job_id}: {out}")

    def cancel(self, job_id: str) -> None:
        """``scancel``: the queued, held or running job ends CANCELLED (Slurm decides
        who may: the job's owner, an operator or root). Cancelled already: no-op; ended
        otherwise: BatchError."""
        job = self.job(job_id)
        if job.state is JobState.CANCELLED:
            return
        if job.state.finished:
            raise BatchError(f"cancel: job {job_id} already ended ({state_text(job)})")
        ok, out = self._try("scancel", job_id)
        if ok:
            return
        if "Invalid job id" in out:
            raise UnknownJob(f"no job {job_id!r} in slurm")
        if "already completing or completed" in out:
            raise BatchError(f"cancel: job {job_id} already ended")
        raise BatchError(f"cancel: job {job_id}: scancel failed: {' '.join(out.split())}")

    def job(self, job_id: str) -> JobDetail:
        """``scontrol show job`` (``--json`` from Slurm 23.02, its text before); a job
        slurmctld no longer holds (``MinJobAge`` after its end) from ``sacct``, where
        accounting is configured. UnknownJob when neither knows it, saying why."""
        _check_job(job_id)
        return self._job_reader.read(job_id)


def _check_job(job_id: str) -> None:
    if not _JOB.fullmatch(str(job_id)):
        raise UnknownJob(f"no job {job_id!r} in slurm (ids are numbers, or ARRAY_TASK)")
