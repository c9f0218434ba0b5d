"""The site's log gets one line per failed job, naming where its stderr is: on the
embedded batch system from its file, on the others by looking up what left the queue."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tests.batch.pbs_fake import FakePbs

from elasticsite.batch.base import JobRequest
from elasticsite.batch.local import LocalBatch
from elasticsite.batch.pbs import PbsBatch
from elasticsite.manager import job_log
from elasticsite.manager.job_log import FailedJobLog
from elasticsite.manager.report import StepReport
from elasticsite.snapshot import SiteSnapshot


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "elasticsite.jobs"]


def report(batch: PbsBatch) -> StepReport:
    view = batch.snapshot()
    snapshot = SiteSnapshot(view.taken_at, view.queued, view.running, workers=[], clouds=[])
    return StepReport(at=view.taken_at, snapshot=snapshot)


def test_each_failed_embedded_job_is_logged_once_with_its_stderr(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    batch = LocalBatch(tmp_path / "batch.db", clock=clock)
    watch = FailedJobLog(batch, clock)
    batch.register_node("w1", 2)
    ok, bad, killed = (batch.submit(JobRequest([c])) for c in ("true", "es-nope", "sleep"))
    starts = [(j, 1, 100 + n, str(tmp_path / "jobs" / j)) for n, j in enumerate((ok, bad))]
    batch.record_pids("w1", starts)
    clock.now += 5
    batch.worker_poll("w1", [(ok, 1, 0), (bad, 1, 127, "command not found (es-nope)")])
    caplog.set_level(logging.INFO, logger="elasticsite.jobs")
    watch(StepReport(at=clock.now))
    watch(StepReport(at=clock.now))  # the next step: nothing new
    stderr = tmp_path / "jobs" / bad / "stderr"
    assert lines(caplog) == [
        f"job {bad} failed (exit 127: command not found (es-nope)) on w1; its stderr: {stderr}"
    ]
    (record,) = [r for r in caplog.records if r.name == "elasticsite.jobs"]
    assert record.levelname == "WARNING" and record.ids == {"job": bad, "node": "w1"}  # type: ignore[attr-defined]
    batch.worker_poll("w1", [(killed, 1, -9)])
    watch(StepReport(at=clock.now))
    assert lines(caplog)[1] == (
        f"job {killed} failed (killed by signal 9 (SIGKILL)) on w1; its stderr: "
        "not said by the batch system"
    )


def test_other_batch_systems_look_up_the_jobs_that_left_the_queue(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakePbs("openpbs")
    batch = PbsBatch("openpbs", runner=fake)
    batch.add_node("w1", 4)
    fake.mom_reports("w1")
    watch = FailedJobLog(batch, lambda: 0.0)
    ids = [batch.submit(JobRequest(["x"])) for _ in range(4)]
    watch(report(batch))
    caplog.set_level(logging.INFO, logger="elasticsite.jobs")
    fake.job_ends(ids[0], 0)
    fake.job_ends(ids[1], 127)
    batch.cancel(ids[2])
    watch(report(batch))
    number = ids[1].split(".")[0]
    assert lines(caplog) == [
        f"job {ids[1]} failed (exit 127: command not found) on w1; its stderr: "
        f"/home/pbsuser/elasticsite.e{number}"
    ]
    monkeypatch.setattr(job_log, "LOOKUPS_PER_STEP", 0)
    fake.job_ends(ids[3], 1)
    watch(report(batch))
    assert lines(caplog)[1:] == [
        "1 more jobs left the queue this step; not looked up (see `elasticsite job ID` for "
        "one of them)"
    ]
