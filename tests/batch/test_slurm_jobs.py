"""Slurm's job states and one job's detail, on real recorded output of Slurm 22.05 to 25.11.

The 22.05 ``scontrol show job`` texts and ``squeue --json`` dump were recorded on this
project's test Slurm (scripts/slurm/) for jobs that completed, exited 127 and 3, were
killed by a signal, ran out of walltime, were cancelled running and pending, held and
requeued; the later releases' job records come from slurmrestd (fixtures/slurm/README.md)
and the ``sacct --json`` outputs are the advisor's recorded ones (tests/advisor/data).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from elasticsite.batch.base import BatchError, UnknownJob
from elasticsite.batch.command import CommandError, CommandResult
from elasticsite.batch.slurm import SlurmBatch
from elasticsite.batch.slurm_jobs import (
    JobReader,
    parse_sacct_job,
    parse_show_job_json,
    parse_show_job_text,
)
from elasticsite.batch.slurm_output import parse_squeue
from elasticsite.batch.slurm_states import JOB_STATES, job_state
from elasticsite.model import JobState, state_text

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
SACCT = Path(__file__).parents[1] / "advisor" / "data"
RECORDED = FIXTURES / "22.05"


def show(name: str) -> str:
    return (RECORDED / f"scontrol-show-job-{name}.txt").read_text()


# -- the state table ---------------------------------------------------------------------

WAITING_AND_RUNNING = ["PENDING", "CONFIGURING", "REQUEUED", "RUNNING", "COMPLETING"]


@pytest.mark.parametrize(
    ("words", "restarts", "held", "expected"),
    [
        (["PENDING"], 0, False, JobState.QUEUED),
        (["PENDING"], 0, True, JobState.HELD),
        (["PENDING"], 2, False, JobState.REQUEUED),
        (["PENDING", "REQUEUED"], 0, False, JobState.REQUEUED),  # 23.02+: a flag
        (["PENDING", "REQUEUE_HOLD"], 1, False, JobState.HELD),
        (["SPECIAL_EXIT"], 1, True, JobState.HELD),
        (["CONFIGURING"], 0, False, JobState.QUEUED),
        (["RUNNING"], 3, False, JobState.RUNNING),
        (["RUNNING", "COMPLETING"], 0, False, JobState.RUNNING),
        (["SUSPENDED"], 0, False, JobState.RUNNING),
        (["COMPLETED"], 0, False, JobState.COMPLETED),
        (["FAILED"], 0, False, JobState.FAILED),
        (["TIMEOUT"], 0, False, JobState.FAILED),
        (["NODE_FAIL"], 0, False, JobState.FAILED),
        (["OUT_OF_MEMORY"], 0, False, JobState.FAILED),
        (["PREEMPTED"], 0, False, JobState.FAILED),
        (["CANCELLED"], 0, False, JobState.CANCELLED),
        (["cancelled"], 0, False, JobState.CANCELLED),
    ],
)
def test_every_native_state_translates(
    words: Sequence[str], restarts: int, held: bool, expected: JobState
) -> None:
    assert job_state(words, restarts, held) is expected


def test_an_unknown_native_state_is_unknown_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="elasticsite.batch.slurm"):
        assert job_state(["LAUNCHED_ON_MARS"]) is JobState.UNKNOWN
        assert job_state(["LAUNCHED_ON_MARS"]) is JobState.UNKNOWN
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "slurm: unknown job state 'LAUNCHED_ON_MARS': shown as unknown (see docs/jobs.md)"
    ]


def test_the_table_covers_the_states_squeue_lists() -> None:
    from elasticsite.batch.slurm_output import SQUEUE_STATES

    assert set(SQUEUE_STATES.split(",")) <= set(JOB_STATES)


# -- scontrol show job (text): every ending recorded on 22.05 ----------------------------


@pytest.mark.parametrize(
    ("name", "job_id", "said", "code", "signal", "attempts"),
    [
        ("completed", "1", "completed", 0, None, 1),
        ("exit-127", "2", "failed (exit 127: command not found)", 127, None, 1),
        ("signal-9", "3", "failed (killed by signal 9 (SIGKILL): JobLaunchFailure)", None, 9, 1),
        ("exit-3", "4", "failed (exit 3)", 3, None, 1),
        ("timeout", "5", "failed (killed by signal 15 (SIGTERM): walltime exceeded)", None, 15, 1),
        ("cancelled-running", "6", "cancelled (killed by signal 15 (SIGTERM))", None, 15, 1),
        ("cancelled-pending", "8", "cancelled", 0, None, 0),
        ("held", "7", "held (JobHeldUser)", None, None, 0),
        ("requeued", "9", "requeued (after 1 run: BeginTime)", None, None, 1),
    ],
)
def test_scontrol_show_job_text_tells_how_each_job_ended(
    name: str, job_id: str, said: str, code: int | None, signal: int | None, attempts: int
) -> None:
    job = parse_show_job_text(show(name), job_id)
    assert (state_text(job), job.exit_code, job.signal, job.attempts) == (
        said, code, signal, attempts
    )  # fmt: skip
    assert (job.id, job.user, job.group, job.directory) == (job_id, "root", "root", "/tmp/es-rec")
    assert job.stdout == f"/tmp/es-rec/{job_id}.out"
    assert job.stderr == (f"/tmp/es-rec/{job_id}.err" if name == "exit-127" else job.stdout)
    ran = attempts and not job.state.waiting
    assert (job.node, job.started_at is not None) == (("localhost", True) if ran else (None, False))


def test_the_text_keeps_times_walltime_and_the_native_state() -> None:
    job = parse_show_job_text(show("timeout"), "5")
    assert (job.native_state, job.walltime, job.cores) == ("TIMEOUT", 60.0, 1)
    assert job.finished_at is not None and job.started_at is not None
    assert job.runtime == job.finished_at - job.started_at == 82.0
    assert job.attributes["partition"] == "debug"
    assert parse_show_job_text(show("completed"), "1").walltime == math.inf  # UNLIMITED


def test_text_that_is_no_job_is_a_batch_error() -> None:
    with pytest.raises(BatchError, match="no job in the output"):
        parse_show_job_text((RECORDED / "scontrol-show-job-invalid.txt").read_text(), "99")


# -- JSON: 22.05's squeue dump (raw wait status), 23.11 to 25.11 (objects) ---------------


def test_22_05_json_reads_exit_codes_from_the_wait_status_as_the_text_does() -> None:
    dump = (RECORDED / "squeue-finished.json").read_text()
    names = ["completed", "exit-127", "signal-9", "exit-3", "timeout", "cancelled-running",
             "held", "cancelled-pending", "requeued"]  # fmt: skip
    texts = dict(zip(["1", "2", "3", "4", "5", "6", "7", "8", "9"], names, strict=True))
    for job_id, name in texts.items():
        from_json = parse_show_job_json(dump, job_id)
        from_text = parse_show_job_text(show(name), job_id)
        for field in ("state", "exit_code", "signal", "reason", "attempts", "node", "stderr"):
            assert getattr(from_json, field) == getattr(from_text, field), (job_id, field)
    assert parse_show_job_json(dump, "2").stderr == "/tmp/es-rec/2.err"  # %j filled in


@pytest.mark.parametrize("release", ["23.11", "24.05", "24.11", "25.11"])
def test_later_releases_json_records_all_translate(release: str) -> None:
    text = (FIXTURES / release / "slurmrestd-jobs.json").read_text()
    import json

    ids = [str(j["job_id"]) for j in json.loads(text)["jobs"]]
    jobs = [parse_show_job_json(text, i) for i in ids]
    assert all(j.state is not JobState.UNKNOWN for j in jobs)
    by_native = {j.native_state: j for j in jobs}
    timeout = by_native["TIMEOUT"]
    assert (timeout.state, timeout.signal, timeout.reason) == (
        JobState.FAILED, 15, "walltime exceeded"
    )  # fmt: skip
    failed = by_native["FAILED"]
    assert (failed.state, failed.exit_code, failed.signal) == (JobState.FAILED, 1, None)
    assert by_native["COMPLETED"].state is JobState.COMPLETED
    assert by_native["PENDING"].state.waiting and by_native["RUNNING"].node
    for job in jobs:
        assert job.stdout.startswith("/home/") and "%" not in job.stdout
        assert job.stderr == job.stdout  # no --error: stderr goes with stdout


def test_25_11_fills_slurm_patterns_in_output_paths() -> None:
    job = parse_show_job_json((FIXTURES / "25.11" / "slurmrestd-jobs.json").read_text(), "5736")
    assert job.stdout == "/home/rcarson/slurm-5736.out"


def test_a_job_the_json_lacks_is_a_batch_error() -> None:
    with pytest.raises(BatchError, match="job 4242 is not in the output"):
        parse_show_job_json((RECORDED / "squeue-finished.json").read_text(), "4242")


def test_snapshots_list_held_jobs_as_held() -> None:
    queued, _ = parse_squeue((RECORDED / "squeue-finished.json").read_text(), include_held=True)
    assert [(j.id, j.state, j.attributes.get("held")) for j in queued] == [
        ("9", JobState.QUEUED, None), ("7", JobState.HELD, "true")
    ]  # fmt: skip


# -- sacct --json -----------------------------------------------------------------------


def test_sacct_22_05_and_23_11_records_translate() -> None:
    old = parse_sacct_job((SACCT / "sacct-22.05.json").read_text(), "20247445")
    assert (old.state, old.exit_code, old.node, old.group) == (
        JobState.FAILED, 0, "ng30103", "hudson"
    )  # fmt: skip
    assert old.notes and "sacct" in old.notes[0]
    new = parse_sacct_job((SACCT / "sacct-23.11.json").read_text(), "5103")
    assert (new.state, new.reason) == (JobState.FAILED, "walltime exceeded")
    pending = parse_sacct_job((SACCT / "sacct-23.11.json").read_text(), "5104")
    assert (pending.state, pending.started_at, pending.node) == (JobState.QUEUED, None, None)


# -- the adapter: which command it asks, and what it says when none knows the job ---------


class Replay:
    """A Slurm answering ``scontrol show job`` and ``sacct`` from recorded output."""

    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        args = tuple(argv)
        self.calls.append(args)
        code, out = self.answers[args]
        result = CommandResult(args, code, out if code == 0 else "", "" if code == 0 else out, 0.0)
        if code:
            raise CommandError(list(args), f"exited with code {code}: {out}", result)
        return result


def test_22_05_falls_back_to_the_text_once_and_sacct_says_it_is_disabled() -> None:
    runner = Replay({
        ("scontrol", "show", "job", "2", "--json"):
            (1, (RECORDED / "scontrol-show-job-json-unsupported.txt").read_text()),
        ("scontrol", "show", "job", "2"): (0, show("exit-127")),
        ("scontrol", "show", "job", "99"):
            (1, (RECORDED / "scontrol-show-job-invalid.txt").read_text()),
        ("sacct", "--json", "--jobs", "99"):
            (1, (RECORDED / "sacct-json-disabled.txt").read_text()),
    })  # fmt: skip
    batch = SlurmBatch(runner=runner)
    assert batch.job("2").exit_code == 127
    assert batch.job("2").state is JobState.FAILED
    assert runner.calls.count(("scontrol", "show", "job", "2", "--json")) == 1  # asked once
    with pytest.raises(UnknownJob) as told:
        batch.job("99")
    assert str(told.value) == (
        "no job '99' in slurm: slurmctld does not hold it (it forgets a job MinJobAge seconds "
        "after its end) and sacct cannot tell (Slurm accounting storage is disabled)"
    )


def test_a_job_slurmctld_forgot_comes_from_sacct() -> None:
    invalid = (RECORDED / "scontrol-show-job-invalid.txt").read_text()
    runner = Replay({
        ("scontrol", "show", "job", "5103", "--json"): (1, invalid),
        ("sacct", "--json", "--jobs", "5103"): (0, (SACCT / "sacct-23.11.json").read_text()),
    })  # fmt: skip
    job = JobReader(SlurmBatch(runner=runner)._try).read("5103")
    assert (job.state, job.reason) == (JobState.FAILED, "walltime exceeded")


def test_cancel_refuses_a_job_that_ended_and_ignores_one_cancelled() -> None:
    dump = (RECORDED / "squeue-finished.json").read_text()
    runner = Replay({
        ("scontrol", "show", "job", "2", "--json"): (0, dump),
        ("scontrol", "show", "job", "6", "--json"): (0, dump),
    })  # fmt: skip
    batch = SlurmBatch(runner=runner)
    with pytest.raises(BatchError, match=r"cancel: job 2 already ended \(failed \(exit 127"):
        batch.cancel("2")
    batch.cancel("6")  # cancelled already: nothing asked of scancel
    assert not any(c[0] == "scancel" for c in runner.calls)


class Busy(Replay):
    """A slurmctld too busy to answer the first ``times`` calls of each command."""

    BUSY = "slurm_load_node error: Socket timed out on send/recv operation"

    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str]], times: int) -> None:
        super().__init__(answers)
        self.times = times

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        args = tuple(argv)
        if self.calls.count(args) < self.times:
            self.calls.append(args)
            result = CommandResult(args, 1, "", self.BUSY, 0.0)
            raise CommandError(list(args), f"exited with code 1: {self.BUSY}", result)
        return super().__call__(argv)


def test_a_read_slurmctld_was_too_busy_for_is_tried_again_a_change_is_not() -> None:
    show = ("scontrol", "show", "node", "n1", "--oneliner")
    update = ("scontrol", "update", "nodename=n1", "state=resume")
    answers = {show: (0, "NodeName=n1 Arch=x86_64\n"), update: (0, "")}
    batch = SlurmBatch(runner=Busy(answers, times=2))
    batch.read_retry_delays = (0.0, 0.0)
    assert batch._try(*show) == (True, "NodeName=n1 Arch=x86_64\n")  # the third try
    runner = Busy(answers, times=3)
    batch = SlurmBatch(runner=runner)
    batch.read_retry_delays = (0.0, 0.0)
    ok, out = batch._try(*show)  # three tries, then what slurmctld said
    assert (ok, out.strip()) == (False, Busy.BUSY) and runner.calls.count(show) == 3
    ok, out = batch._try(*update)  # a change may have been applied: tried once
    assert (ok, out.strip()) == (False, Busy.BUSY) and runner.calls.count(update) == 1
