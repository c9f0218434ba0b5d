"""The manager's recorder: what each step saw becomes queue waits and VM allocation delays."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tests.manager.conftest import kill_workers, site_config

from elasticsite.batch.base import JobRequest
from elasticsite.config import parse_config
from elasticsite.core import Plan, WorkerRecord
from elasticsite.history.observations import HistoryStore, Observation
from elasticsite.history.recorder import URGENT_POLICY, Recorder
from elasticsite.manager.site import open_site
from elasticsite.model import Job, JobState, Transition, Worker, WorkerState

S = WorkerState


def running(job_id: str, submitted: float, started: float, **attributes: str) -> Job:
    return Job(
        job_id, 1, 600.0, submitted, JobState.RUNNING, started_at=started, attributes=attributes
    )


def launched(cloud: str, at: float, *ids: str) -> Plan:
    """The plan of a step that launched workers ``ids`` on ``cloud`` at ``at``."""
    plan = Plan()
    for wid in ids:
        rec = WorkerRecord(Worker(wid, cloud, "small", 1, requested_at=at))
        plan.new.append(rec)
        plan.transitions.append(Transition(wid, None, S.REQUESTED, at, "demand"))
    return plan


def moved(*moves: tuple[str, WorkerState, WorkerState, float]) -> Plan:
    plan = Plan()
    plan.transitions.extend(Transition(w, a, b, at, "x") for w, a, b, at in moves)
    return plan


def stored(path: Path) -> list[Observation]:
    with HistoryStore(path) as store:
        return store.observations()


@pytest.fixture
def recorder(tmp_path: Path) -> Recorder:
    return Recorder(tmp_path / "advisor.db", resource="site")


def test_each_job_seen_running_gives_one_queue_wait(recorder: Recorder) -> None:
    jobs = [
        running("1", 100.0, 130.0),
        running("2", 100.0, 400.0, partition="gpu", node_count="4"),
        running("3", 200.0, 205.0, **{URGENT_POLICY: "next_to_run"}),
        Job("4", 1, 60.0, 300.0),  # queued: nothing to record yet
    ]
    recorder.observe(jobs, Plan(), {})
    recorder.observe(jobs[:3], Plan(), {})  # the next step sees the same jobs again
    assert recorder.flush()
    got = {(o.ref, o.resource, o.policy, o.nodes, o.value, o.at) for o in stored(recorder.path)}
    assert got == {
        ("1", "site", "default", 1, 30.0, 130.0),
        ("2", "gpu", "default", 4, 300.0, 400.0),
        ("3", "site", "next_to_run", 1, 5.0, 205.0),
    }
    assert all(o.phase == "allocation" and o.source == "manager" for o in stored(recorder.path))
    assert recorder.recorded == 3 and recorder.failures == 0
    recorder.close()


def test_a_restarted_manager_records_nothing_twice(tmp_path: Path) -> None:
    jobs = [running("1", 0.0, 10.0), running("2", 0.0, 20.0)]
    first = Recorder(tmp_path / "advisor.db", resource="site")
    first.observe(jobs, Plan(), {})
    first.close()
    again = Recorder(tmp_path / "advisor.db", resource="site")
    again.observe([*jobs, running("3", 5.0, 25.0)], Plan(), {})
    again.close()
    assert [o.ref for o in stored(tmp_path / "advisor.db")] == ["1", "2", "3"]
    assert again.recorded == 1


def test_an_unknown_urgent_policy_or_node_count_is_recorded_as_default(
    recorder: Recorder,
) -> None:
    recorder.observe(
        [running("1", 0.0, 1.0, **{URGENT_POLICY: "bribery", "node_count": "many"})], Plan(), {}
    )
    recorder.close()
    [o] = stored(recorder.path)
    assert (o.policy, o.nodes) == ("default", 1)


def test_a_launch_is_recorded_once_every_instance_has_joined(recorder: Recorder) -> None:
    recorder.observe([], launched("ec2", 100.0, "w1", "w2", "w3"), {})
    recorder.observe([], moved(("w1", S.REQUESTED, S.BOOTING, 110.0)), {})
    recorder.observe(
        [], moved(("w1", S.BOOTING, S.IDLE, 130.0), ("w2", S.BOOTING, S.BUSY, 150.0)), {}
    )
    assert recorder.flush()
    assert [o for o in stored(recorder.path) if o.resource == "ec2"] == []  # w3 still boots
    recorder.observe([], moved(("w3", S.BOOTING, S.IDLE, 160.0)), {})
    recorder.observe([], moved(("w1", S.IDLE, S.BUSY, 170.0)), {})  # not a join: busy again
    recorder.close()
    [o] = stored(recorder.path)
    assert (o.phase, o.resource, o.policy, o.nodes, o.value, o.at) == (
        "allocation",
        "ec2",
        "default",
        3,
        60.0,
        160.0,
    )


def test_launches_on_two_clouds_in_one_step_are_two_requests(recorder: Recorder) -> None:
    plan = launched("ec2", 100.0, "a1", "a2")
    other = launched("os", 100.0, "b1")
    plan.new += other.new
    recorder.observe([], plan, {})
    recorder.observe(
        [],
        moved(
            ("a1", S.REQUESTED, S.IDLE, 120.0),
            ("b1", S.REQUESTED, S.IDLE, 105.0),
            ("a2", S.BOOTING, S.IDLE, 140.0),
        ),
        {},
    )
    recorder.close()
    assert {(o.resource, o.nodes, o.value) for o in stored(recorder.path)} == {
        ("ec2", 2, 40.0),
        ("os", 1, 5.0),
    }


def test_a_launch_that_lost_an_instance_is_not_an_allocation(recorder: Recorder) -> None:
    recorder.observe([], launched("ec2", 100.0, "w1", "w2"), {})
    recorder.observe(
        [], moved(("w1", S.BOOTING, S.IDLE, 130.0), ("w2", S.BOOTING, S.FAILED, 700.0)), {}
    )
    recorder.close()
    assert stored(recorder.path) == []


def test_after_a_restart_a_launch_in_flight_is_followed_from_the_store(
    recorder: Recorder,
) -> None:
    joined = Worker("w1", "ec2", "small", 1, 100.0, S.IDLE, "i-1", joined_at=130.0)
    booting = Worker("w2", "ec2", "small", 1, 100.0, S.BOOTING, "i-2")
    done_before = Worker("w9", "ec2", "small", 1, 50.0, S.IDLE, "i-9", joined_at=60.0)
    records = {w.id: WorkerRecord(w) for w in (joined, booting, done_before)}
    recorder.observe([], moved(("w2", S.BOOTING, S.IDLE, 170.0)), records)
    recorder.close()
    [o] = stored(recorder.path)
    assert (o.nodes, o.value, o.at) == (2, 70.0, 170.0)


def test_a_history_that_cannot_be_written_is_said_once_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    recorder = Recorder(blocker / "advisor.db", resource="site")
    with caplog.at_level(logging.DEBUG, logger="elasticsite.history.recorder"):
        recorder.observe([running("1", 0.0, 1.0)], Plan(), {})
        assert recorder.flush()
        recorder.observe([running("2", 0.0, 2.0)], Plan(), {})
        assert recorder.flush()
        recorder.close()
    assert recorder.failures == 2 and recorder.recorded == 0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].getMessage().startswith(f"advisor history {blocker / 'advisor.db'}: ")
    assert warnings[0].getMessage().endswith("will retry")


class Broken(Recorder):
    def observe(self, *args: object) -> None:
        raise RuntimeError("history is on fire")


def test_a_recorder_that_raises_never_breaks_a_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    site = open_site(site_config(tmp_path / "state"))
    manager = site.manager(recorder=Broken(tmp_path / "advisor.db", resource="test"))
    site.batch.submit(JobRequest(["true"], 1, 10.0))
    with caplog.at_level(logging.ERROR, logger="elasticsite.manager.loop"):
        first, second = manager.step(), manager.step()
    manager.shutdown()
    assert first.queued == 1 and first.decision.launch  # decided and launched as ever
    assert second.errors == []
    assert [r.getMessage() for r in caplog.records] == [
        "advisor history: recording failed; the loop goes on without it"
    ]
    kill_workers(site)


@pytest.mark.parametrize("record", [True, False])
def test_the_site_records_unless_the_advisor_section_says_not_to(
    tmp_path: Path, record: bool
) -> None:
    config = parse_config(
        {
            "manager": {"site_id": "lab", "state_dir": str(tmp_path / "state")},
            "clouds": [{"name": "local"}],
            "advisor": {"record": record},
        }
    )
    site = open_site(config)
    manager = site.manager()
    if record:
        assert manager.recorder is not None
        assert manager.recorder.path == tmp_path / "state" / "advisor.db"
        assert manager.recorder.resource == "lab"
    else:
        assert manager.recorder is None
    manager.shutdown()
