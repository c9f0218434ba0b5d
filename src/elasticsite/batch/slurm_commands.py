"""What every Slurm command of :class:`~elasticsite.batch.slurm.SlurmBatch` goes through:
one runner, its output or its error output, and the jobs ``squeue`` lists.

The base of :class:`~.slurm_node_control.SlurmNodeControl` and
:class:`~.slurm_job_control.SlurmJobControl`, whose methods ``SlurmBatch`` gathers.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from elasticsite.batch.command import CommandError, Runner
from elasticsite.batch.slurm_output import SQUEUE_FORMAT_ARGV, parse_squeue, parse_squeue_format
from elasticsite.model import Job

__all__ = ["NAME", "SlurmCommands"]

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""A node, feature or partition name elasticsite passes to Slurm."""


_BUSY = ("Socket timed out on send/recv operation", "Unable to contact slurm controller")
"""What a Slurm command says when slurmctld did not answer in time (or at all)."""


def _reads(argv: Sequence[str]) -> bool:
    """Whether Slurm command ``argv`` only reads (a try again changes nothing)."""
    return argv[0] in ("squeue", "sinfo", "sacct") or tuple(argv[:2]) == ("scontrol", "show")


def _busy(output: str) -> bool:
    return any(message in output for message in _BUSY)


class SlurmCommands:
    """Runs Slurm's commands through ``_run`` (an argument list, never a shell)."""

    _run: Runner
    jobs_from: str
    """``"format"``: jobs read from ``squeue --format``; ``"json"``: from ``squeue --json``."""
    default_walltime: float
    """The walltime of a job that asked for none."""

    read_retry_delays: tuple[float, ...] = (1.0, 2.0)
    """Seconds before each further try of a read that slurmctld was too busy to answer."""

    def _cmd(self, *argv: str) -> str:
        for delay in self.read_retry_delays:
            try:
                return self._run(argv).stdout
            except CommandError as exc:
                # A busy slurmctld (its MessageTimeout passed) answers a read a moment
                # later; a change is not tried again: it may have been applied.
                if not _reads(argv) or not _busy(exc.output):
                    raise
            time.sleep(delay)
        return self._run(argv).stdout  # the last try: its error is the caller's

    def _try(self, *argv: str) -> tuple[bool, str]:
        """Run a command; (True, output) or (False, its error output)."""
        try:
            return True, self._cmd(*argv)
        except CommandError as exc:
            return False, exc.output

    def _read_jobs(self, include_held: bool) -> tuple[list[Job], list[Job]]:
        """The queued and the running jobs, from one ``squeue``."""
        if self.jobs_from == "json":
            text = self._cmd("squeue", "--json")
            return parse_squeue(text, self.default_walltime, include_held)
        text = self._cmd(*SQUEUE_FORMAT_ARGV)
        return parse_squeue_format(text, self.default_walltime, include_held)
