"""The embedded batch system's jobs as users and the manager see and change them.

:class:`JobControl` holds what is done to one job (hold, release, priorities, move to
the front, preempt, redirect, cancel) and what is read of jobs (every job, one job's
detail, the count per state, the failures since some time);
:class:`~elasticsite.batch.local.LocalBatch` inherits it with the worker side
(:class:`~elasticsite.batch.local_workers.WorkerEndpoints`) and provides the
connection and the scheduling pass these use. Every public method raises
:class:`~elasticsite.batch.base.BatchError` only.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from elasticsite import attributes
from elasticsite.batch.base import PREEMPTED, BatchError, JobDetail, UnknownJob
from elasticsite.batch.identity import group_of, is_own, own_account
from elasticsite.batch.local_schema import (
    FINISHED,
    HELD_STATE,
    JOB_COLUMNS,
    STATES,
    checked_partition,
    job_from_row,
    job_key,
    job_state,
)
from elasticsite.batch.local_workers import WorkerEndpoints, translated
from elasticsite.jobs import Job, JobState

__all__ = ["JobControl"]

_REQUEUE = "UPDATE jobs SET state = 'queued', node = NULL, started_at = NULL, pid = NULL"


class JobControl(WorkerEndpoints):
    """What is done to and read of jobs; see the module docstring."""

    # -- changing one job --------------------------------------------------------------

    def _job_state(self, tx: sqlite3.Connection, job_id: str) -> tuple[int, str]:
        key = job_key(job_id)
        row = tx.execute("SELECT state FROM jobs WHERE id = ?", (key,)).fetchone()
        if row is None:
            raise UnknownJob(f"no job {job_id!r} in the local batch system")
        return key, row[0]

    @translated
    def hold(self, job_id: str) -> None:
        """Keep a queued job from starting; held already: no-op; running or over: UnknownJob."""
        with self._tx(write=True) as tx:
            key, state = self._job_state(tx, job_id)
            if state not in ("queued", HELD_STATE):
                raise UnknownJob(f"hold: job {job_id} is no longer queued ({state})")
            tx.execute("UPDATE jobs SET state = ? WHERE id = ?", (HELD_STATE, key))

    @translated
    def release(self, job_id: str) -> None:
        """Let a held job start again (a pass runs); a job not held: no-op."""
        with self._tx(write=True) as tx:
            key, state = self._job_state(tx, job_id)
            if state == HELD_STATE:
                tx.execute("UPDATE jobs SET state = 'queued' WHERE id = ?", (key,))
                self._pass(tx, self.clock())

    @translated
    def set_priority(self, job_id: str, priority: int) -> None:
        """Change a job's priority (higher runs first); finished jobs refuse."""
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise BatchError(f"set_priority: priority must be an integer, got {priority!r}")
        with self._tx(write=True) as tx:
            key, state = self._job_state(tx, job_id)
            if state in FINISHED:
                raise BatchError(f"set_priority: job {job_id} is already {state}")
            tx.execute("UPDATE jobs SET priority = ? WHERE id = ?", (priority, key))
            self._pass(tx, self.clock())

    @translated
    def move_to_front(self, job_id: str) -> None:
        """Put a queued job ahead of every other, whatever their priority. Running: no-op."""
        with self._tx(write=True) as tx:
            key, state = self._job_state(tx, job_id)
            if state in FINISHED:
                raise BatchError(f"move_to_front: job {job_id} is already {state}")
            if state == "queued":
                tx.execute(
                    "UPDATE jobs SET front = (SELECT MAX(front) FROM jobs) + 1 WHERE id = ?",
                    (key,),
                )
                self._pass(tx, self.clock())

    @translated
    def preempt(self, job_id: str) -> None:
        """Put a running job back in the queue (requeued, reason ``preempted``); its
        worker sees it gone and kills it."""
        with self._tx(write=True) as tx:
            key, state = self._job_state(tx, job_id)
            if state in FINISHED:
                raise BatchError(f"preempt: job {job_id} is already {state}")
            if state == "running":
                tx.execute(f"{_REQUEUE}, reason = ? WHERE id = ?", (PREEMPTED, key))
                self._pass(tx, self.clock())

    @translated
    def redirect(self, job_id: str, target: str) -> None:
        """Move a queued job to partition ``target`` (and start it if a node there is
        free). Already there: no-op; running or finished: UnknownJob."""
        checked_partition("redirect", target)
        with self._tx(write=True) as tx:
            key, state = self._job_state(tx, job_id)
            if state != "queued":
                raise UnknownJob(f"redirect: job {job_id} is no longer queued ({state})")
            part, text = tx.execute(
                "SELECT partition, attributes FROM jobs WHERE id = ?", (key,)
            ).fetchone()
            if part == target:
                return
            attrs = json.loads(text)
            if target:
                attrs[attributes.PARTITION] = target
            else:
                attrs.pop(attributes.PARTITION, None)
            tx.execute(
                "UPDATE jobs SET partition = ?, attributes = ? WHERE id = ?",
                (target, json.dumps(attrs, sort_keys=True), key),
            )
            self._pass(tx, self.clock())

    @translated
    def cancel(self, job_id: str) -> None:
        """Remove a queued, held or running job (its worker sees it gone and kills it);
        cancelling a cancelled job is a no-op, a completed or failed one a BatchError.
        Another user's job only from root, as it was submitted."""
        with self._tx(write=True) as tx:
            key, state = self._job_state(tx, job_id)
            if state == "cancelled":
                return
            if state in FINISHED:
                raise BatchError(f"cancel: job {job_id} already ended ({state})")
            (user,) = tx.execute("SELECT user FROM jobs WHERE id = ?", (key,)).fetchone()
            me = own_account()
            if not is_own(user) and os.geteuid() != 0:
                raise BatchError(
                    f"cancel: job {job_id} is {user}'s; only root may cancel another "
                    f"user's job (this runs as {me})"
                )
            now = self.clock()
            tx.execute(
                "UPDATE jobs SET state = 'cancelled', finished_at = ?, reason = ? WHERE id = ?",
                (now, f"by {me}", key),
            )
            if state == "running":
                self._pass(tx, now)

    # -- reading jobs ------------------------------------------------------------------

    @translated
    def jobs(self, states: Iterable[JobState | str] | None = None) -> list[Job]:
        """Every job (or those in ``states``), oldest first, with their times."""
        query = f"SELECT {JOB_COLUMNS} FROM jobs"
        wanted = None if states is None else {JobState(s) for s in states}
        words: set[str] = set()
        if wanted is not None:
            words = {w for w, s in STATES.items() if s in wanted}
            if JobState.REQUEUED in wanted:
                words.add("queued")
            if not words:
                return []
            query += f" WHERE state IN ({', '.join('?' * len(words))})"
        with self._tx(write=False) as tx:
            rows = tx.execute(query + " ORDER BY id", sorted(words)).fetchall()
        found = [job_from_row(r) for r in rows]
        return found if wanted is None else [j for j in found if j.state in wanted]

    @translated
    def job(self, job_id: str) -> JobDetail:
        """One job by id: its state, how it ended, its attempts, and where its files
        are (the worker recorded its working directory and its own log)."""
        with self._tx(write=False) as tx:
            row = tx.execute(
                f"SELECT {JOB_COLUMNS}, workdir, worker_log, pid FROM jobs WHERE id = ?",
                (job_key(job_id),),
            ).fetchone()
        if row is None:
            raise UnknownJob(f"no job {job_id!r} in the local batch system")
        *columns, workdir, worker_log, pid = row
        job = job_from_row(columns)
        notes = []
        if not workdir and job.attempts:
            notes.append("its worker recorded no working directory (an older worker?)")
        stdout = stderr = ""
        if workdir:
            stderr = str(Path(workdir) / "stderr")
            # a job that could not start has no stdout, only the worker's note on stderr
            if pid is not None or job.state is not JobState.FAILED:
                stdout = str(Path(workdir) / "stdout")
        native = columns[6] if job.state is JobState.UNKNOWN else ""  # else our own words
        return JobDetail.of(
            job, native_state=native, group=group_of(job.user), stdout=stdout,
            stderr=stderr, directory=workdir, worker_log=worker_log, notes=tuple(notes),
        )  # fmt: skip

    @translated
    def counts(self) -> dict[str, int]:
        """Number of jobs in each state (every state present, zeros included; ``unknown``
        only when some job is)."""
        result = {s.value: 0 for s in JobState if s is not JobState.UNKNOWN}
        with self._tx(write=False) as tx:
            for word, requeued, n in tx.execute(
                "SELECT state, attempt > 0, COUNT(*) FROM jobs GROUP BY state, attempt > 0"
            ):
                state = job_state(word, requeued).value
                result[state] = result.get(state, 0) + n
        return result

    @translated
    def failed_since(self, since: float) -> list[JobDetail]:
        """The jobs that failed at or after ``since``, oldest end first (what the
        manager logs, one line each)."""
        with self._tx(write=False) as tx:
            ids = [
                str(i)
                for (i,) in tx.execute(
                    "SELECT id FROM jobs WHERE state = 'failed' AND finished_at >= ? "
                    "ORDER BY finished_at, id",
                    (since,),
                )
            ]
        return [self.job(i) for i in ids]
