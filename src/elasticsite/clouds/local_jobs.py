"""A local worker's job processes: whom each runs as, where, with what, and their end.

A job runs as the user it was submitted for (:mod:`elasticsite.batch.identity`):

- the worker's own job (no user, or the worker's account) runs as the worker, in
  ``<jobs-dir>/<id>/`` of the site's private state directory (``<state_dir>/jobs/<id>/``),
  where its ``stdout`` and ``stderr`` go;
- another user's job, on a worker running as root, runs with that user's uid, gid and
  groups in ``~USER/elasticsite-jobs/<site>/<id>/`` (0700), which the job's process
  creates itself, as the user, before the command starts: nothing of the site's is
  ever written or opened for it. Its ``stdout`` and ``stderr`` go there, the user's;
- another user's job on a worker that is not root does not start (exit code 126): it
  would run as the worker.

A job that cannot start (a command not found: exit code 127; any other reason: 126)
ends at once; why is in the worker's log and in ``<jobs-dir>/<id>/stderr``. Either way
the worker records the job's directory in the batch file (``elasticsite job`` shows
it).

Every job gets a clean, explicit environment (:func:`~elasticsite.batch.identity.
job_environment`: ``PATH``, ``HOME``, ``USER``, ``LOGNAME``, ``SHELL``, ``LANG`` and
``ELASTICSITE_JOB_ID``, ``ELASTICSITE_NODE``, ``ELASTICSITE_CORES``), stdin from
``/dev/null``, no other open file of the worker, its own process group, and dies with
its worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from elasticsite.batch.base import COMMAND_CANNOT_RUN, COMMAND_NOT_FOUND, BatchError
from elasticsite.batch.identity import Account, account, is_own, job_environment, this_account
from elasticsite.batch.local_schema import Assignment

__all__ = [
    "CANNOT_RUN",
    "NOT_FOUND",
    "USER_JOBS_DIR",
    "WALLTIME_GRACE",
    "JobLauncher",
    "JobRun",
    "Refused",
    "job_preexec",
    "kill",
]

log = logging.getLogger("elasticsite.worker")

WALLTIME_GRACE = 1.0
"""Seconds a job may overrun its walltime before it is killed."""
CANNOT_RUN, NOT_FOUND = 126, 127
"""Exit codes of a job that could not start, as a shell reports them."""
USER_JOBS_DIR = "elasticsite-jobs"
"""Another user's jobs run in ``~USER/elasticsite-jobs/<site>/<id>/``."""
_SITE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_OUTPUT_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW


@dataclass(slots=True)
class JobRun:
    """A job process this worker started."""

    job_id: str
    attempt: int
    cores: int
    proc: subprocess.Popen[bytes]
    deadline: float
    """``time.monotonic()`` after which the job has overrun its walltime."""
    workdir: str = ""
    """Where it runs, its ``stdout`` and ``stderr`` in it."""


@dataclass(frozen=True, slots=True)
class Refused:
    """A job that could not start: its exit code (126 or 127), why, and the directory
    whose ``stderr`` says so."""

    code: int
    reason: str
    workdir: str


def job_preexec(parent: int, mask: set[int | signal.Signals]) -> Callable[[], None]:
    """What runs in a child process before exec: restore the signal mask and, on
    Linux, ask to be killed with the worker (as jobs die with a crashed VM)."""
    prctl = None
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (ImportError, OSError, AttributeError):
            prctl = None
    sigkill = int(signal.SIGKILL)

    def preexec() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if prctl is not None:
            prctl(1, sigkill)  # PR_SET_PDEATHSIG (after the uid changed, which clears it)
            if os.getppid() != parent:
                os._exit(1)

    return preexec


def _as_user_preexec(base: Callable[[], None], job_dir: str) -> Callable[[], None]:
    """``base``, then, already as the job's user: make the job's directory, enter it and
    send stdout and stderr to files there. A failure is told on the worker's stderr (its
    log) and the job does not start."""

    def preexec() -> None:
        base()
        try:
            os.makedirs(job_dir, mode=0o700, exist_ok=True)
            os.chdir(job_dir)
            for fd, name in ((1, "stdout"), (2, "stderr")):
                opened = os.open(name, _OUTPUT_FLAGS, 0o600)
                os.dup2(opened, fd)
                os.close(opened)
        except OSError as exc:
            os.write(2, f"elasticsite: cannot use {job_dir}: {exc.strerror or exc}\n".encode())
            raise

    return preexec


class JobLauncher:
    """Starts the jobs of one worker, whose node is ``node`` on site ``site``."""

    def __init__(self, jobs_dir: Path, node: str, site: str, preexec: Callable[[], None]) -> None:
        self.jobs_dir = jobs_dir
        self.node = node
        self.site = site if _SITE_NAME.fullmatch(site) else "site"
        self.preexec = preexec
        self.me = this_account()

    def user_job_dir(self, acct: Account, job_id: str) -> Path:
        """Where a job of ``acct``'s (not the worker's) runs."""
        return Path(acct.home) / USER_JOBS_DIR / self.site / job_id

    def start(self, a: Assignment) -> JobRun | Refused:
        """Start ``a``: its run, or why it could not start."""
        job_vars = {"ELASTICSITE_JOB_ID": a.job_id, "ELASTICSITE_NODE": self.node,
                    "ELASTICSITE_CORES": str(a.cores)}  # fmt: skip
        workdir = str(self.jobs_dir / a.job_id)
        try:
            if is_own(a.user):
                proc = self._own(a, job_vars)
            elif self.me.uid != 0:
                why = f"it is {a.user}'s, and this worker runs as {self.me.name}, not as root"
                return self._failed(a, CANNOT_RUN, COMMAND_CANNOT_RUN, why)
            else:
                acct = account(a.user)
                workdir = str(self.user_job_dir(acct, a.job_id))
                proc = self._as_user(a, acct, job_vars)
        except BatchError as exc:  # no such user any more
            return self._failed(a, CANNOT_RUN, COMMAND_CANNOT_RUN, str(exc))
        except (OSError, subprocess.SubprocessError) as exc:
            if isinstance(exc, FileNotFoundError):
                code, reason = NOT_FOUND, f"{COMMAND_NOT_FOUND} ({a.argv[0]})"
            else:
                code, reason = CANNOT_RUN, COMMAND_CANNOT_RUN
            return self._failed(a, code, reason, f"cannot start {a.argv!r}: {exc}")
        log.info("%s: started job %s (pid %d%s): %s", self.node, a.job_id, proc.pid,
                 f", as {a.user}" if a.user else "", a.argv)  # fmt: skip
        deadline = time.monotonic() + a.walltime + WALLTIME_GRACE
        return JobRun(a.job_id, a.attempt, a.cores, proc, deadline, workdir)

    def _own(self, a: Assignment, job_vars: dict[str, str]) -> subprocess.Popen[bytes]:
        """The worker's own job, in ``<jobs-dir>/<id>/``."""
        job_dir = self.jobs_dir / a.job_id
        job_dir.mkdir(parents=True, exist_ok=True)
        with open(job_dir / "stdout", "wb") as out, open(job_dir / "stderr", "wb") as err:
            return subprocess.Popen(
                a.argv, cwd=job_dir, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                env=job_environment(self.me, job_vars), close_fds=True, process_group=0,
                preexec_fn=self.preexec,
            )  # fmt: skip

    def _as_user(
        self, a: Assignment, acct: Account, job_vars: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        """Another user's job, as that user, in their own directory."""
        job_dir = str(self.user_job_dir(acct, a.job_id))
        return subprocess.Popen(
            a.argv, stdin=subprocess.DEVNULL, env=job_environment(acct, job_vars),
            user=acct.uid, group=acct.gid, extra_groups=list(acct.groups),
            close_fds=True, process_group=0, preexec_fn=_as_user_preexec(self.preexec, job_dir),
        )  # fmt: skip

    def _failed(self, a: Assignment, code: int, reason: str, why: str) -> Refused:
        """Report a job that could not start, in the log and in the site's copy of its
        stderr (``<jobs-dir>/<id>/stderr``, for the operators)."""
        job_dir = self.jobs_dir / a.job_id
        log.warning("%s: job %s cannot start: %s (see %s)", self.node, a.job_id, why,
                    job_dir / "stderr")  # fmt: skip
        with contextlib.suppress(OSError):
            job_dir.mkdir(parents=True, exist_ok=True)
            (job_dir / "stderr").write_text(f"elasticsite: {why}\n")
        return Refused(code, reason, str(job_dir))


def kill(run: JobRun) -> None:
    """Kill a job's whole process group and collect it."""
    try:
        os.killpg(run.proc.pid, signal.SIGKILL)
    except OSError:
        run.proc.kill()
    run.proc.wait()
