"""``elasticsite cancel JOB...`` and ``elasticsite job JOB``: one job at a time, on
whatever batch system the site drives.

What a job says of itself (its command, paths, attributes, the ids a user typed) is
shown as plain text: no console markup, control characters escaped, so a job cannot
restyle or drive the terminal of whoever looks at it."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Annotated

import typer

from elasticsite.cli.common import ConfigOpt, open_configured_site, say, state_errors, tell
from elasticsite.logs import escape_control

if TYPE_CHECKING:
    from elasticsite.batch.base import JobDetail

__all__ = ["cancel", "job", "job_lines"]

JobIds = Annotated[list[str], typer.Argument(help="Job ids, as `queue` shows them.")]


def _say(text: str, *, error: bool = False) -> None:
    """One line, as plain text."""
    (tell if error else say)(escape_control(text))


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "-"


@state_errors()
def cancel(job_ids: JobIds, config: ConfigOpt = None) -> None:
    """Cancel queued, held or running jobs: one line per job; exit status 1 if any was
    not cancelled (unknown, already ended, refused by the batch system)."""
    from elasticsite.batch.base import BatchError
    from elasticsite.files import StateFileError
    from elasticsite.model import JobState

    site = open_configured_site(config, create=False)
    failed = False
    for job_id in job_ids:
        try:
            done = site.cancel(job_id)
        except StateFileError:
            raise  # said as FILE: cause
        except BatchError as exc:  # unknown, ended already, refused: the error names the job
            _say(f"error: {exc}", error=True)
            failed = True
            continue
        before = done.before
        if done.already:
            said = "already cancelled"
        elif before.state is JobState.RUNNING:
            said = f"cancelled (it was running on {before.node})" if before.node else "cancelled"
        else:
            said = f"cancelled (it was {before.state.value})"
        _say(f"job {job_id}: {said}")
    if failed:
        raise typer.Exit(1)


def job_lines(job: JobDetail) -> list[tuple[str, str]]:
    """What ``elasticsite job`` shows, as (label, value) rows."""
    from elasticsite.model import state_text

    native = job.native_state
    rows = [
        ("state", state_text(job)),
        ("command", job.command or "-"),
        ("user", f"{job.user or '-'}" + (f" (group {job.group})" if job.group else "")),
        ("cores", str(job.cores)),
        ("walltime", "unlimited" if math.isinf(job.walltime) else f"{job.walltime:g} s"),
        ("attributes", " ".join(f"{k}={v}" for k, v in sorted(job.attributes.items())) or "-"),
        ("node", (job.node or "-") + (f" (worker {job.worker})" if job.worker else "")),
        ("submitted", _when(job.submitted_at)),
        ("started", _when(job.started_at)),
        ("finished", _when(job.finished_at)),
        ("attempts", str(job.attempts)),
        ("stdout", job.stdout or "-"),
        ("stderr", job.stderr or "-"),
        ("worker log", job.worker_log or "-"),
    ]
    if job.directory:
        rows.insert(11, ("directory", job.directory))
    if native and native != job.state.value:
        rows.insert(1, ("batch state", native))
    rows += [("note", note) for note in job.notes]
    return rows


@state_errors()
def job(
    job_id: Annotated[str, typer.Argument(help="The job's id.")], config: ConfigOpt = None
) -> None:
    """Show one job: its state (a failed one with its exit code or signal and why),
    command, user, attributes, node and worker, times, attempts, and where its stdout,
    stderr and worker's log are."""
    from elasticsite.batch.base import BatchError
    from elasticsite.files import StateFileError

    site = open_configured_site(config, create=False)
    try:
        detail = site.job(job_id)
    except StateFileError:
        raise  # said as FILE: cause
    except BatchError as exc:  # the error names the job
        _say(f"error: {exc}", error=True)
        raise typer.Exit(1) from None
    _say(f"job {detail.id}")
    for label, value in job_lines(detail):
        _say(f"  {label:<11} {value}")
