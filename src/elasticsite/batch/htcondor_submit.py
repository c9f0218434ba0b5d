"""An HTCondor job for another user: ``condor_submit`` run as that user.

The Python bindings submit as the process that calls them, so the job would belong to
(and run as) the submitter. A job for another user — the urgent gate's, running as
root — is handed to ``runuser -u USER -- condor_submit -terse`` instead, its submit
description on stdin, in an environment holding nothing of the submitter's but
``CONDOR_CONFIG``: the schedd sees that user, and runs the job as them. Anyone but
root is refused before (:mod:`elasticsite.batch.identity`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from elasticsite.batch.base import BatchError
from elasticsite.batch.command import CommandResult, run
from elasticsite.batch.identity import run_as

__all__ = ["condor_submit_argv", "description_text", "submit_as"]

_TERSE = re.compile(r"^\s*(\d+)\.\d+\s*-\s*\d+\.\d+\s*$", re.MULTILINE)
"""What ``condor_submit -terse`` prints: ``CLUSTER.PROC - CLUSTER.PROC``."""


def description_text(description: Mapping[str, str]) -> str:
    """``description`` as ``condor_submit`` reads it: one ``key = value`` line each,
    then ``queue``. A line break in a key or value (which would start a command of its
    own) is refused."""
    lines = []
    for key, value in description.items():
        if any(c in f"{key}{value}" for c in "\r\n\x00"):
            raise BatchError(f"submit: {key} = {value!r}: a line break or NUL cannot be sent")
        lines.append(f"{key} = {value}")
    return "\n".join([*lines, "queue", ""])


def condor_submit_argv(user: str, collector: str | None, schedd: str | None) -> list[str]:
    """``condor_submit -terse`` (at ``schedd`` of pool ``collector`` when named), as
    ``user``."""
    argv = ["condor_submit", "-terse"]
    if schedd:
        argv += ["-name", schedd]
    if collector:
        argv += ["-pool", collector]
    return run_as(user, argv, keep=("CONDOR_CONFIG",))


def submit_as(
    user: str,
    description: Mapping[str, str],
    collector: str | None = None,
    schedd: str | None = None,
    runner: Callable[..., CommandResult] = run,
) -> int:
    """Submit ``description`` as ``user``; the new job's cluster id."""
    result = runner(
        condor_submit_argv(user, collector, schedd), input=description_text(description)
    )
    found = _TERSE.search(result.stdout)
    if found is None:
        raise BatchError(
            f"condor_submit printed {result.stdout.strip()!r}, expected CLUSTER.PROC - CLUSTER.PROC"
        )
    return int(found.group(1))
