"""The ``sbatch`` command line of a job request: every value checked before Slurm sees it.

One task with ``cores`` CPUs and the walltime in whole minutes, the command wrapped
(``--wrap``, shell-quoted). The request's ``partition``, ``qos``, ``account`` and
``features`` attributes become ``--partition``, ``--qos``, ``--account`` and
``--constraint``; its priority a negative ``--nice``. A request for another user (the
urgent gate's) gets ``--uid`` and an ``--export`` of its own environment when running
as root, and is refused otherwise: a job never runs as whoever happens to submit it,
nor with their environment.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence

from elasticsite import attributes
from elasticsite.attributes import PARTITION
from elasticsite.batch.base import BatchError, JobRequest, checked_command
from elasticsite.batch.identity import checked_submitter, job_environment

__all__ = ["as_user", "sbatch_argv"]

_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,&|:()\[\]*-]{0,255}")
"""A partition list, QOS, account or constraint expression as sbatch takes it."""
_SUBMIT_FLAGS = (
    (PARTITION, "--partition"),
    (attributes.QOS, "--qos"),
    (attributes.ACCOUNT, "--account"),
    (attributes.FEATURES, "--constraint"),
)


def sbatch_argv(request: JobRequest, partition: str | None = None) -> list[str]:
    """The ``sbatch --parsable`` command for ``request`` (``partition``: the default)."""
    argv = checked_command(request)
    sbatch = [
        "sbatch", "--parsable", "--ntasks=1", f"--cpus-per-task={request.cores}",
        f"--time={max(1, math.ceil(request.walltime / 60.0))}",
        "--output=/dev/null", f"--job-name={_job_name(argv)}",
    ]  # fmt: skip
    wanted = dict(request.attributes)
    if partition:
        wanted.setdefault(PARTITION, partition)
    for key, flag in _SUBMIT_FLAGS:
        value = wanted.get(key)
        if value:
            if not _VALUE.fullmatch(value):
                raise BatchError(f"submit: {key} {value!r} is not a valid Slurm {key}")
            sbatch.append(f"{flag}={value}")
    if request.priority:
        sbatch.append(f"--nice={-request.priority}")
    sbatch += as_user(request.user)
    return [*sbatch, "--wrap", shlex.join(argv)]


def as_user(user: str) -> list[str]:
    """The sbatch flags that make the job run as ``user`` (none for the caller itself):
    ``--uid``, and ``--export`` of the job's own environment only (sbatch would pass
    on the submitter's). Refused unless this runs as root
    (:func:`~elasticsite.batch.identity.checked_submitter`)."""
    runs_as = checked_submitter(user)
    if runs_as is None:
        return []
    env = job_environment(runs_as, {})
    if any("," in value for value in env.values()):
        raise BatchError(f"submit: {user}'s home or shell holds a comma, which --export cannot")
    return [f"--uid={runs_as.name}", "--export=" + ",".join(f"{k}={v}" for k, v in env.items())]


def _job_name(argv: Sequence[str]) -> str:
    base = argv[0].rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", base)[:40] or "job"
