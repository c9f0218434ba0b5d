"""What every Slurm command of :class:`~elasticsite.batch.slurm.SlurmBatch` goes through:
one runner, its output or its error output, and the jobs ``squeue`` lists.

The base of :class:`~.slurm_node_control.SlurmNodeControl` and
:class:`~.slurm_job_control.SlurmJobControl`, whose methods ``SlurmBatch`` gathers.
"""

from __future__ import annotations

import re

from elasticsite.batch.command import CommandError, Runner
from elasticsite.batch.slurm_output import SQUEUE_FORMAT_ARGV, parse_squeue, parse_squeue_format
from elasticsite.model import Job

__all__ = ["NAME", "SlurmCommands"]

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""A node, feature or partition name elasticsite passes to Slurm."""


class SlurmCommands:
    """Runs Slurm's commands through ``_run`` (an argument list, never a shell)."""

    _run: Runner
    jobs_from: str
    """``"format"``: jobs read from ``squeue --format``; ``"json"``: from ``squeue --json``."""
    default_walltime: float
    """The walltime of a job that asked for none."""

    def _cmd(self, *argv: str) -> str:
        return self._run(argv).stdout

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
