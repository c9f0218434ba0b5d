"""Warm standby: urgent drills that test each policy and feed the advisor's history.

A drill is a real urgent job, small and harmless (``true`` by default), submitted on a
resource and given one elevated-priority policy exactly as an urgent job would be
(:func:`elasticsite.batch.urgency.elevate`). It proves the policy still works there, and its
allocation delay (submitted to started) and execution delay (started to finished)
become observations of source ``drill`` in the advisor's history, under that resource
and policy, so the advisor's bounds for urgent runs rest on fresh measurements.

A preemption drill preempts like the real thing (volunteers first): run it where the
owners agreed to that. A drill whose job does not start within its start timeout, or
does not finish within its timeout, is cancelled and reported (with why, if cancelling
it failed), and nothing is recorded for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from elasticsite.batch.base import BatchError, BatchSystem, JobRequest
from elasticsite.batch.urgency import BATCH_POLICIES, elevate
from elasticsite.history.observations import Observation

__all__ = ["DrillResult", "drill"]


@dataclass(frozen=True, slots=True)
class DrillResult:
    resource: str
    policy: str
    job_id: str
    allocation: float | None = None
    execution: float | None = None
    preempted: int = 0
    error: str = ""

    def observations(self, at: float) -> list[Observation]:
        """What the advisor learns from it (nothing from a failed drill)."""
        if self.error or self.allocation is None or self.execution is None:
            return []
        trial = f"drill-{self.resource}-{self.job_id}"
        ref, res, pol = self.job_id, self.resource, self.policy
        return [
            Observation(phase="allocation", resource=res, value=self.allocation,
                        at=at - self.execution, source="drill", policy=pol, ref=ref,
                        trial=trial),
            Observation(phase="execution", resource=res, value=self.execution, at=at,
                        source="drill", policy=pol, ref=ref, trial=trial),
        ]  # fmt: skip


def drill(
    batch: BatchSystem,
    resource: str,
    policy: str,
    command: Sequence[str] = ("true",),
    *,
    cores: int = 1,
    walltime: float = 300.0,
    timeout: float = 3600.0,
    start_timeout: float | None = None,
    poll: float = 1.0,
    user: str = "",
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    on_submitted: Callable[[str], None] | None = None,
) -> DrillResult:
    """Submit one drill job with ``policy`` and follow it to its end: given up (and
    cancelled) when it has not started ``start_timeout`` seconds after it was submitted
    (default: ``timeout``), or not finished after ``timeout``. ``on_submitted`` is told
    the job's id once it is queued."""
    if policy not in BATCH_POLICIES:
        raise ValueError(f"policy {policy!r}: a drill tests {', '.join(BATCH_POLICIES)}")
    attrs = {"urgency": "drill", "drill": "yes", "requeue": "no"}
    asked = clock()
    job_id = batch.submit(JobRequest(list(command), cores, walltime, user, attributes=attrs))
    if on_submitted is not None:
        on_submitted(job_id)
    try:
        done = elevate(batch, job_id, cores, policy)
    except BatchError as exc:
        why = f"elevating it failed: {exc}; " + _cancel(batch, job_id)
        return DrillResult(resource, policy, job_id, error=why)
    started: float | None = None
    deadline = asked + timeout
    start_by = asked + (timeout if start_timeout is None else min(timeout, start_timeout))
    while clock() < (deadline if started is not None else start_by):
        view = batch.snapshot()
        running = next((j for j in view.running if j.id == job_id), None)
        queued = any(j.id == job_id for j in view.queued)
        if running is not None and started is None:
            started = running.started_at or clock()
        if running is None and not queued:  # gone: it ran (perhaps between two polls)
            end = clock()
            began, finished = _times(batch, job_id)
            started = began or started or end
            finished = finished or end
            return DrillResult(resource, policy, job_id, max(0.0, started - asked),
                               max(0.0, finished - started), len(done.preempted))  # fmt: skip
        sleep(poll)
    if started is None:
        why = f"did not start within {start_by - asked:g} s; "
    else:
        why = f"did not finish within {timeout:g} s; "
    return DrillResult(resource, policy, job_id, preempted=len(done.preempted),
                       error=why + _cancel(batch, job_id))  # fmt: skip


def _times(batch: BatchSystem, job_id: str) -> tuple[float | None, float | None]:
    """When a finished job started and ended, where the batch system still knows."""
    find = getattr(batch, "job", None)  # the embedded batch system keeps finished jobs
    if find is None:
        return None, None
    try:
        job = find(job_id)
    except BatchError:
        return None, None
    return job.started_at, job.finished_at


def _cancel(batch: BatchSystem, job_id: str) -> str:
    """Cancel the drill's job; what became of it, as the drill's message ends."""
    try:
        batch.cancel(job_id)
    except BatchError as exc:
        return f"cancelling it failed: {exc}"
    return "cancelled"
