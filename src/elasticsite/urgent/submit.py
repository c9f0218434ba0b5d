"""An urgent submission on a batch resource: authenticate, submit, elevate, compensate.

This is the resource's submit path (``elasticsite urgent submit``). With the resource's
key it asks the urgent services whether the submitting identity may run at the
urgency asked, here, now; refused, nothing is submitted and the reason is returned.
Allowed, the job is submitted to run as that identity (never as the submit path's own
account: :mod:`elasticsite.batch.identity`) and given the policy the resource's
administrators mapped the urgency to on the server if that is a batch policy, else the
site's own ``[urgent] policies``; a compensation session always gets next-to-run. The
owner of every job preemption stopped is given a compensation session at once.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from elasticsite.batch.base import BatchError, BatchSystem, JobRequest
from elasticsite.batch.identity import checked_submitter
from elasticsite.batch.urgency import BATCH_POLICIES, elevate
from elasticsite.config.urgent import UrgentConfig

__all__ = ["Submitted", "UrgentRefused", "read_key", "submit_urgent"]


class UrgentRefused(Exception):
    """The urgent services said no (or could not be asked); the message says why."""


@dataclass(slots=True)
class Submitted:
    """What an urgent submission did."""

    job_id: str
    policy: str
    token_id: str
    preempted: list[str] = field(default_factory=list)
    compensated: list[str] = field(default_factory=list)
    note: str = ""


def read_key(path: Path) -> str:
    """The resource's key from ``path``, which only its owner may read."""
    try:
        mode = path.stat().st_mode
        key = path.read_text().strip()
    except OSError as exc:
        raise UrgentRefused(f"{path}: {exc.strerror or exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UrgentRefused(f"{path}: the key file must be readable by its owner only (0600)")
    return key


def submit_urgent(
    batch: BatchSystem,
    config: UrgentConfig,
    resource: str,
    request: JobRequest,
    urgency: str,
    client: httpx.Client,
) -> Submitted:
    """Authenticate ``request.user`` for ``urgency`` on ``resource``; submit and elevate.

    A job for another user than this process's is refused before anything is asked
    unless this process may submit it to run as that user (it runs as root): no session
    is spent on a job that could only run as the submit path's own account."""
    try:
        checked_submitter(request.user)
    except BatchError as exc:
        raise UrgentRefused(str(exc)) from None
    key = read_key(Path(config.key_file))
    headers = {"Authorization": f"Bearer {key}"}
    body = {"resource": resource, "urgency": urgency, "identity": request.user}
    try:
        r = client.post("/urgent/authenticate", json=body, headers=headers)
    except httpx.HTTPError as exc:
        raise UrgentRefused(f"cannot reach the urgent services at {config.server}: {exc}") from None
    if r.status_code != 200:
        detail = r.json().get("detail", r.text) if r.headers.get("content-type", "").startswith(
            "application/json") else r.text  # fmt: skip
        raise UrgentRefused(f"the urgent services answered {r.status_code}: {detail}")
    answer = r.json()
    if not answer["ok"]:
        raise UrgentRefused(answer["reason"])
    mapped = answer.get("policy")
    if answer.get("compensation"):
        policy = "next_to_run"
    elif mapped in BATCH_POLICIES:  # the resource's administrators' map comes first
        policy = mapped
    else:
        policy = config.policies[urgency]  # type: ignore[index]
    attributes = {**request.attributes, "urgency": urgency}
    job_id = batch.submit(JobRequest(request.command, request.cores, request.walltime,
                                     request.user, request.priority, attributes))  # fmt: skip
    elevated = elevate(batch, job_id, request.cores, policy)
    done = Submitted(job_id, policy, answer["token_id"], note=elevated.note)
    for job in elevated.preempted:
        done.preempted.append(job.id)
        if not job.user:
            continue
        c = client.post("/urgent/compensation", headers=headers,
                        json={"resource": resource, "identity": job.user})  # fmt: skip
        if c.status_code == 201:
            done.compensated.append(job.user)
    return done
