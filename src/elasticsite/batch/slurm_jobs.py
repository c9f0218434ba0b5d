"""One Slurm job's detail, from ``scontrol show job`` or ``sacct``.

Its state goes through the table of :mod:`~elasticsite.batch.slurm_states`. A job's
detail comes from ``scontrol show job ID --json`` on Slurm 23.02 and later, the
text of ``scontrol show job ID`` on older releases (22.05 has no ``--json`` there),
and, once slurmctld has forgotten the job (``MinJobAge`` after its end), from ``sacct
--json -j ID`` where accounting is configured. Each reader is a pure function of the
command's output, tested against recorded output (``tests/batch/fixtures/slurm``).
Exit codes come as each writes them: ``EXIT:SIGNAL`` in the text, the raw wait status
in 22.05's JSON, ``{"return_code", "signal"}`` objects from 23.02.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elasticsite.batch.base import BatchError, JobDetail, UnknownJob, exit_reason
from elasticsite.batch.slurm_output import (
    expand_hostlist,
    job_attributes,
    load_json,
    read_duration,
    read_local_time,
    read_number,
    read_text,
    read_time,
    read_words,
)
from elasticsite.batch.slurm_states import translate
from elasticsite.model import Job, JobState

_QUIET_REASONS = frozenset({"", "None", "NonZeroExitCode"})
"""Slurm reasons that add nothing to the state they come with."""

__all__ = [
    "JobReader",
    "parse_sacct_job",
    "parse_show_job_json",
    "parse_show_job_text",
]


def _ending(
    state: JobState, code: int | None, sig: int | None, implied: str, slurm_reason: str
) -> tuple[int | None, int | None, str]:
    """(exit code, signal, reason) told of a job: none for one still to run; for an
    ended one what it exited with, or the signal, and why in words."""
    said = "" if slurm_reason in _QUIET_REASONS else slurm_reason
    if state.waiting or state is JobState.RUNNING:
        return None, None, implied or said
    if state is not JobState.FAILED:  # a reason it waited for says nothing of its end
        said = ""
    if sig:
        return None, sig, implied or said
    return code, None, implied or exit_reason(code) or said


@dataclass(frozen=True, slots=True)
class _Said:
    """A job as one of Slurm's commands tells it, in Slurm's words; :func:`_detail`
    translates what every command tells alike."""

    words: list[str]
    reason: str
    """Slurm's reason (why it waits, or why it ended)."""
    held: bool
    exit: tuple[int | None, int | None]
    """(exit code, signal) as written."""
    node_list: str
    times: tuple[Any, Any, Callable[[Any], float | None]]
    """Its start and end as written, and how to read them."""
    where: tuple[str, str, str, str, str]
    """Its partition, QOS, account, features and name."""
    cores: int
    walltime: float
    submitted: float
    command: str
    user: str
    group: str
    files: tuple[str, str, str]
    """Its standard output, standard error and working directory."""
    restarts: int = 0
    priority: int = 0
    node_count: int | None = None
    """Nodes asked for; None: as many as it ran on, at least one."""
    batch_host: str = ""
    """Where its batch script ran, when no node list says (22.05's JSON)."""


def _detail(job_id: str, said: _Said, notes: tuple[str, ...] = ()) -> JobDetail:
    """The job ``said`` tells of, its Slurm state translated."""
    words, slurm_reason = said.words, said.reason
    state, implied = translate(words, said.restarts, said.held)
    code, sig, reason = _ending(state, *said.exit, implied, slurm_reason)
    start, end, read = said.times
    ran = not state.waiting and bool(said.node_list or said.batch_host)
    started = read(start) if ran else None
    ended = read(end) if state.finished else None
    nodes = tuple(expand_hostlist(said.node_list)) if started and said.node_list else ()
    count = len(nodes) or 1 if said.node_count is None else said.node_count
    native, (stdout, stderr, directory) = " ".join(words), said.files
    job = Job(
        id=job_id,
        cores=said.cores,
        walltime=said.walltime,
        submitted_at=said.submitted,
        state=state,
        command=said.command,
        started_at=started,
        finished_at=ended,
        runtime=ended - started if ended and started else None,
        node=nodes[0] if nodes else (said.batch_host or None if started else None),
        exit_code=code,
        priority=said.priority,
        user=said.user,
        attributes=job_attributes(
            *said.where, nodes, count, native, slurm_reason, state is JobState.HELD
        ),
        signal=sig,
        reason=reason,
        # runs so far: each requeue counted a restart; one that started is in its last
        attempts=said.restarts + (1 if started is not None and not state.waiting else 0),
    )  # fmt: skip
    return JobDetail.of(
        job, native_state=native, group=said.group, stdout=stdout,
        stderr=stderr or stdout, directory=directory, notes=notes,
    )  # fmt: skip


def _wait_status(status: int) -> tuple[int | None, int | None]:
    """22.05's raw wait status as (exit code, signal)."""
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    return os.WEXITSTATUS(status), None


def _exit_object(value: Any) -> tuple[int | None, int | None]:
    """An exit code as 23.02+ (``{"return_code", "signal": {"id"}}``), 22.05's sacct
    (``{"return_code", "signal": {"signal_id"}}``) or 22.05's squeue (a wait status)
    write it."""
    if isinstance(value, dict):
        signal = value.get("signal")
        sig = None
        if isinstance(signal, dict):
            number = read_number(signal.get("id", signal.get("signal_id")))
            sig = int(number) if number else None
        code = read_number(value.get("return_code"))
        return (None if code is None else int(code)), sig
    number = read_number(value)
    return (None, None) if number is None else _wait_status(int(number))


def _expand(path: str, raw: Mapping[str, Any], job_id: str) -> str:
    """An output path with Slurm's ``%j``, ``%u``, ``%x``, ``%A``, ``%a`` and ``%%``
    filled in, relative to the job's working directory."""
    if not path:
        return ""
    values = {
        "j": job_id.split("_")[0],
        "u": read_text(raw.get("user_name")),
        "x": read_text(raw.get("name")),
        "A": str(read_number(raw.get("array_job_id"), 0) or job_id.split("_")[0]),
        "a": str(read_number(raw.get("array_task_id"), 0) or 0),
        "%": "%",
    }
    filled = re.sub(r"%(\d*)([jux%Aa])", lambda m: values[m.group(2)].zfill(int(m.group(1) or 0)),
                    path)  # fmt: skip
    cwd = read_text(raw.get("current_working_directory"))
    return os.path.join(cwd, filled) if cwd and not os.path.isabs(filled) else filled


# -- scontrol show job --json (23.02+) ---------------------------------------------------


def parse_show_job_json(text: str, job_id: str) -> JobDetail:
    """Job ``job_id`` of ``scontrol show job --json`` (or ``squeue --json``, which 22.05
    answers with every job it holds); BatchError if it is not there."""
    data = load_json(text, "scontrol show job --json")
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise BatchError("scontrol show job --json: no 'jobs' list in the output")
    for raw in jobs:
        if isinstance(raw, dict) and _json_id(raw) == job_id:
            try:
                return _json_detail(raw, job_id)
            except (KeyError, TypeError, ValueError) as exc:
                raise BatchError(f"scontrol show job --json: unexpected record ({exc!r})") from exc
    raise BatchError(f"scontrol show job --json: job {job_id} is not in the output")


def _json_id(raw: Mapping[str, Any]) -> str:
    task = read_number(raw.get("array_task_id"))
    if task is not None and read_number(raw.get("array_job_id")):
        return f"{int(read_number(raw['array_job_id']) or 0)}_{int(task)}"
    return str(raw.get("job_id"))


def _json_detail(raw: Mapping[str, Any], job_id: str) -> JobDetail:
    words = read_words(raw.get("job_state"))
    slurm_reason = read_text(raw.get("state_reason"))
    priority = int(read_number(raw.get("priority"), 0) or 0)
    held = bool(raw.get("hold")) or slurm_reason.startswith("JobHeld")
    limit = read_number(raw.get("time_limit"))
    stdout = read_text(raw.get("stdout_expanded")) or _expand(
        read_text(raw.get("standard_output")), raw, job_id
    )
    stderr = read_text(raw.get("stderr_expanded")) or _expand(
        read_text(raw.get("standard_error")), raw, job_id
    )
    said = _Said(
        words=words,
        reason=slurm_reason,
        held=held or (priority == 0 and _pending(words)),
        exit=_exit_object(raw.get("exit_code")),
        node_list=read_text(raw.get("nodes")),
        times=(raw.get("start_time"), raw.get("end_time"), read_time),
        where=(read_text(raw.get("partition")), read_text(raw.get("qos")),
               read_text(raw.get("account")), read_text(raw.get("features")),
               read_text(raw.get("name"))),
        cores=max(1, int(read_number(raw.get("cpus"), 1) or 1)),
        walltime=limit * 60.0 if limit else math.inf,
        submitted=read_time(raw.get("submit_time")) or 0.0,
        command=read_text(raw.get("command")) or read_text(raw.get("name")),
        user=read_text(raw.get("user_name")),
        group=read_text(raw.get("group_name")),
        files=(stdout, stderr, read_text(raw.get("current_working_directory"))),
        restarts=int(read_number(raw.get("restart_cnt"), 0) or 0),
        priority=priority,
        node_count=int(read_number(raw.get("node_count"), 1) or 1),
        batch_host=read_text(raw.get("batch_host")),
    )  # fmt: skip
    return _detail(job_id, said)


def _pending(words: Sequence[str]) -> bool:
    return bool(words) and words[0].upper() == "PENDING"


# -- scontrol show job (text, every release) ---------------------------------------------

_PAIR = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9/:_.]*)=")
_WHOLE_LINE = frozenset({"Command", "WorkDir", "StdErr", "StdIn", "StdOut", "Comment",
                         "AdminComment"})  # fmt: skip
"""Fields whose value may hold anything (paths, commands): scontrol prints each alone
on its line. Other values end where the next ``Key=`` starts."""


def _text_fields(text: str) -> dict[str, str]:
    """``Key=Value`` pairs of one job's ``scontrol show job`` text."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        key, sep, rest = stripped.partition("=")
        if sep and key in _WHOLE_LINE:
            fields[key] = rest
            continue
        starts = list(_PAIR.finditer(stripped))
        for n, match in enumerate(starts):
            end = starts[n + 1].start() if n + 1 < len(starts) else len(stripped)
            fields.setdefault(match.group(1), stripped[match.end() : end].strip())
    return fields


def _null(value: str) -> str:
    return "" if value in ("(null)", "N/A", "None", "Unknown") else value


def _owner(value: str) -> str:
    """``root(0)`` -> ``root``."""
    return value.split("(", 1)[0]


def parse_show_job_text(text: str, job_id: str) -> JobDetail:
    """Job ``job_id`` of ``scontrol show job ID`` (its text, every release)."""
    if "JobId=" not in text:
        raise BatchError(f"scontrol show job {job_id}: no job in the output: {text[:80]!r}")
    f = _text_fields(text)
    words = f.get("JobState", "").split()
    slurm_reason = f.get("Reason", "")
    priority = int(f["Priority"]) if f.get("Priority", "").isdigit() else 0
    exit_text, _, sig_text = f.get("ExitCode", "").partition(":")
    code = int(exit_text) if exit_text.isdigit() else None
    sig = int(sig_text) if sig_text.isdigit() and int(sig_text) else None
    name = _null(f.get("JobName", ""))
    stdout, stderr = _null(f.get("StdOut", "")), _null(f.get("StdErr", ""))
    said = _Said(
        words=words,
        reason=slurm_reason,
        held=slurm_reason.startswith("JobHeld") or (priority == 0 and _pending(words)),
        exit=(code, sig),
        node_list=_null(f.get("NodeList", "")),
        times=(f.get("StartTime", ""), f.get("EndTime", ""), read_local_time),
        where=(_null(f.get("Partition", "")), _null(f.get("QOS", "")),
               _null(f.get("Account", "")), _null(f.get("Features", "")), name),
        cores=max(1, int(f["NumCPUs"])) if f.get("NumCPUs", "").isdigit() else 1,
        walltime=read_duration(f.get("TimeLimit", "")) or math.inf,
        submitted=read_local_time(f.get("SubmitTime", "")) or 0.0,
        command=_null(f.get("Command", "")) or name,
        user=_owner(f.get("UserId", "")),
        group=_owner(f.get("GroupId", "")),
        files=(stdout, stderr, _null(f.get("WorkDir", ""))),
        restarts=int(f.get("Restarts", "0") or 0) if f.get("Restarts", "0").isdigit() else 0,
        priority=priority,
        node_count=int(f["NumNodes"]) if f.get("NumNodes", "").isdigit() else 1,
    )  # fmt: skip
    return _detail(job_id, said)


# -- sacct --json (the accounting database) ----------------------------------------------


def parse_sacct_job(text: str, job_id: str) -> JobDetail:
    """Job ``job_id`` of ``sacct --json -j ID`` (22.05 and later layouts)."""
    data = load_json(text, "sacct --json")
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise BatchError("sacct --json: no 'jobs' list in the output")
    head, _, task = job_id.partition("_")
    for raw in jobs:
        if not isinstance(raw, dict) or str(raw.get("job_id")) != head:
            continue
        array = raw.get("array") if isinstance(raw.get("array"), dict) else {}
        if task and str(read_number((array or {}).get("task_id"), -1)) != task:
            continue
        try:
            return _sacct_detail(raw, job_id)
        except (KeyError, TypeError, ValueError) as exc:
            raise BatchError(f"sacct --json: unexpected record ({exc!r})") from exc
    raise BatchError(f"sacct --json: job {job_id} is not in the output")


def _sacct_detail(raw: Mapping[str, Any], job_id: str) -> JobDetail:
    state_obj = raw.get("state") if isinstance(raw.get("state"), dict) else {}
    slurm_reason = read_text((state_obj or {}).get("reason"))
    times = raw.get("time") if isinstance(raw.get("time"), dict) else {}
    node_list = read_text(raw.get("nodes"))
    limit = read_number((times or {}).get("limit"))
    required = raw.get("required") if isinstance(raw.get("required"), dict) else {}
    stdout = read_text(raw.get("stdout_expanded")) or read_text(raw.get("stdout"))
    stderr = read_text(raw.get("stderr_expanded")) or read_text(raw.get("stderr"))
    said = _Said(
        words=read_words((state_obj or {}).get("current")),
        reason=slurm_reason,
        held=slurm_reason.startswith("JobHeld"),
        exit=_exit_object(raw.get("exit_code")),
        node_list="" if node_list == "None assigned" else node_list,
        times=((times or {}).get("start"), (times or {}).get("end"), read_time),
        where=(read_text(raw.get("partition")), read_text(raw.get("qos")),
               read_text(raw.get("account")), "", read_text(raw.get("name"))),
        cores=max(1, int(read_number((required or {}).get("CPUs"), 1) or 1)),
        walltime=limit * 60.0 if limit else math.inf,
        submitted=read_time((times or {}).get("submission")) or 0.0,
        command=read_text(raw.get("name")),
        user=read_text(raw.get("user")),
        group=read_text(raw.get("group")),
        files=(stdout, stderr, read_text(raw.get("working_directory"))),
    )  # fmt: skip
    return _detail(job_id, said, ("from sacct (slurmctld no longer holds the job): runs "
                                  "before a requeue are not counted",))  # fmt: skip


class JobReader:
    """One job's detail from whichever command this Slurm answers: ``scontrol show job
    --json`` until a release says it has no ``--json`` there (before 23.02), then the
    text; ``sacct --json`` for a job slurmctld forgot. ``run`` runs a command and gives
    ``(True, output)`` or ``(False, its error output)``."""

    def __init__(self, run: Callable[..., tuple[bool, str]]) -> None:
        self._run = run
        self._json = True

    def read(self, job_id: str) -> JobDetail:
        """Job ``job_id``; UnknownJob, saying why, when neither slurmctld nor sacct
        knows it; BatchError when a command fails otherwise."""
        if self._json:
            ok, out = self._run("scontrol", "show", "job", job_id, "--json")
            if ok:
                return parse_show_job_json(out, job_id)
            if "--json" in out:
                self._json = False
        if not self._json:
            ok, out = self._run("scontrol", "show", "job", job_id)
            if ok:
                return parse_show_job_text(out, job_id)
        if "Invalid job id" not in out:
            raise BatchError(f"job {job_id}: scontrol show job failed: {' '.join(out.split())}")
        ok, text = self._run("sacct", "--json", "--jobs", job_id)
        if ok:
            try:
                return parse_sacct_job(text, job_id)
            except BatchError as exc:
                why = str(exc)
        else:
            why = " ".join(text.split()) or "sacct failed"
        raise UnknownJob(
            f"no job {job_id!r} in slurm: slurmctld does not hold it (it forgets a job "
            f"MinJobAge seconds after its end) and sacct cannot tell ({why})"
        )
