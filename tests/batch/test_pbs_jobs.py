"""PBS and Torque job states and one job's detail, on recorded output and the fake server.

The recorded outputs (fixtures/pbs/README.md) hold a finished OpenPBS job, a queued
and a held PBS Pro job (held after 21 failed attempts to start, exit status -3), a
running OpenPBS job, and Torque's running, queued and completed jobs.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tests.batch.pbs_fake import FakePbs

from elasticsite.batch.base import BatchError, JobRequest, UnknownJob
from elasticsite.batch.pbs import PbsBatch
from elasticsite.batch.pbs_jobs import detail_from_json, detail_from_xml
from elasticsite.batch.pbs_states import ending, job_state
from elasticsite.model import JobState, state_text

FIXTURES = Path(__file__).parent / "fixtures" / "pbs"


def text(relative: str) -> str:
    return (FIXTURES / relative).read_text()


# -- the tables --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "runs", "expected"),
    [
        ("Q", 0, JobState.QUEUED),
        ("Q", 2, JobState.REQUEUED),
        ("W", 0, JobState.QUEUED),
        ("T", 0, JobState.QUEUED),
        ("H", 3, JobState.HELD),
        ("R", 1, JobState.RUNNING),
        ("E", 1, JobState.RUNNING),
        ("S", 1, JobState.RUNNING),
        ("U", 1, JobState.RUNNING),
        ("B", 1, JobState.RUNNING),
        ("M", 0, JobState.CANCELLED),
    ],
)
def test_every_native_state_translates(code: str, runs: int, expected: JobState) -> None:
    assert job_state(code, runs)[0] is expected


@pytest.mark.parametrize(
    ("status", "substate", "expected"),
    [
        (0, 92, (JobState.COMPLETED, 0, None, "")),
        (127, 93, (JobState.FAILED, 127, None, "command not found")),
        (3, 93, (JobState.FAILED, 3, None, "")),
        (265, 93, (JobState.FAILED, None, 9, "")),
        (271, 91, (JobState.CANCELLED, None, 15, "")),
        (-29, 93, (JobState.FAILED, -29, None, "walltime exceeded")),
        (-27, 93, (JobState.FAILED, -27, None, "killed: used more memory than asked")),
        (-20, 93, (JobState.FAILED, -20, None, "node lost (its mother superior did not answer)")),
        (-99, 93, (JobState.FAILED, -99, None, "PBS exit status -99")),
        (None, -1, (JobState.CANCELLED, None, None, "")),
        (None, 91, (JobState.CANCELLED, None, None, "")),
    ],
)
def test_exit_statuses_say_how_a_job_ended(
    status: int | None, substate: int, expected: tuple[object, ...]
) -> None:
    assert ending(status, substate) == expected


def test_an_unknown_letter_is_unknown_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="elasticsite.batch.pbs"):
        assert job_state("Z")[0] is JobState.UNKNOWN
        assert job_state("Z")[0] is JobState.UNKNOWN
    assert [r.getMessage() for r in caplog.records] == [
        "unknown PBS job state 'Z': shown as unknown (see docs/jobs.md)"
    ]


# -- recorded output ---------------------------------------------------------------------


def test_a_finished_openpbs_job_completed_with_its_paths() -> None:
    job = detail_from_json(text("openpbs-22/qstat-f-F-json-finished.json"), "0")
    assert (job.id, job.state, job.exit_code, job.attempts) == (
        "0.725ccdf1a5fb", JobState.COMPLETED, 0, 1
    )  # fmt: skip
    assert (job.stdout, job.stderr) == ("/home/pbsuser/testname.o0", "/home/pbsuser/testname.e0")
    assert (job.user, job.group, job.node, job.directory) == (
        "pbsuser", "pbsuser", "725ccdf1a5fb", "/home/pbsuser"
    )  # fmt: skip
    assert job.finished_at is not None and job.started_at is not None
    assert job.runtime == 2.0


def test_a_held_pbs_pro_job_says_why_and_how_often_it_tried() -> None:
    recorded = text("pbspro-2022/qstat-f-F-json.json")
    held = detail_from_json(recorded, "412020")
    assert (held.state, held.attempts, held.native_state) == (JobState.HELD, 21, "H")
    assert state_text(held) == "held (job held, too many failed attempts to run)"
    assert held.exit_code is None and held.started_at is None
    queued = detail_from_json(recorded, "359322")
    assert queued.state is JobState.QUEUED
    assert queued.reason.startswith("Not Running: Job is requesting an exclusive node")


def test_a_running_openpbs_job() -> None:
    job = detail_from_json(text("openpbs-20/qstat-f-F-json.json"), "1008.qot-calc0")
    assert (job.state, job.node, job.attempts, job.cores) == (JobState.RUNNING, "qot-calc0", 1, 5)
    assert job.stderr == "/home/qoot/ntest.e1008"


def test_torque_jobs_running_queued_and_completed() -> None:
    recorded = text("torque-6/qstat-f-x.xml")
    running = detail_from_xml(recorded, "665199")
    assert (running.state, running.attempts, running.node) == (JobState.RUNNING, 2, "node01")
    assert running.exit_code is None  # the -3 of an earlier attempt is not its end
    assert (running.user, running.group) == ("johnfox", "johnfox")
    queued = detail_from_xml(recorded, "667999")
    assert (queued.state, queued.attempts) == (JobState.QUEUED, 0)
    done = detail_from_xml(recorded, "673174.superserver.stanford.edu")
    assert (done.state, done.exit_code, done.native_state) == (JobState.COMPLETED, 0, "C")
    assert done.stdout == "/home/dacre/STDIN.o673174"


def test_a_job_not_in_the_output_is_a_batch_error() -> None:
    with pytest.raises(BatchError, match="job 42 is not in the output"):
        detail_from_json(text("openpbs-22/qstat-f-F-json-empty.json"), "42")


# -- the adapter on the fake server ------------------------------------------------------


@pytest.fixture(params=["openpbs", "torque"])
def server(request: pytest.FixtureRequest) -> tuple[PbsBatch, FakePbs]:
    fake = FakePbs(request.param)
    batch = PbsBatch(request.param, runner=fake)
    batch.add_node("w1", 2)
    fake.mom_reports("w1")
    return batch, fake


def test_jobs_that_exit_127_or_are_killed_fail_and_say_so(server: tuple[PbsBatch, FakePbs]) -> None:
    batch, fake = server
    missing = batch.submit(JobRequest(["es-no-such-command"]))
    killed = batch.submit(JobRequest(["sleep", "600"]))
    fake.job_ends(missing, 127)
    fake.job_ends(killed, 265)
    assert state_text(batch.job(missing)) == "failed (exit 127: command not found)"
    assert state_text(batch.job(killed)) == "failed (killed by signal 9 (SIGKILL))"
    assert batch.job(missing).stderr.endswith(f".e{missing.split('.')[0]}")
    assert batch.snapshot().running == []


def test_cancel_deletes_queued_and_running_jobs(server: tuple[PbsBatch, FakePbs]) -> None:
    batch, fake = server
    running = batch.submit(JobRequest(["sleep", "600"], cores=2))
    queued = batch.submit(JobRequest(["sleep", "600"], cores=2))
    batch.cancel(queued)
    batch.cancel(queued)  # cancelled already: no-op
    assert batch.job(queued).state is JobState.CANCELLED
    batch.cancel(running)
    ended = batch.job(running)
    if fake.flavour == "openpbs":  # substate 91: deleted
        assert (ended.state, ended.signal) == (JobState.CANCELLED, 15)
    else:  # Torque records only the SIGTERM that ended it
        assert (ended.state, ended.signal) == (JobState.FAILED, 15)
    assert [c for c in fake.calls if c[0] == "qdel"] == [["qdel", queued], ["qdel", running]]
    with pytest.raises(UnknownJob, match="job_history_enable on OpenPBS, keep_completed"):
        batch.job("999")
    with pytest.raises(UnknownJob, match=r"ids are like 123\.server"):
        batch.job("x; rm -rf /")


def test_cancel_refuses_a_job_that_completed(server: tuple[PbsBatch, FakePbs]) -> None:
    batch, fake = server
    job_id = batch.submit(JobRequest(["true"]))
    fake.job_ends(job_id, 0)
    with pytest.raises(BatchError, match=rf"cancel: job {job_id} already ended \(completed\)"):
        batch.cancel(job_id)
