"""A manager killed with SIGKILL mid scale-up restarts, adopts its instances and loses no job."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from tests.cli import local_cloud, run_command, site_file, site_toml, start_run

from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, InstanceState, LaunchRequest
from elasticsite.clouds.local import LocalCloud
from elasticsite.manager.store import StateStore
from elasticsite.model import Cause, JobState, VMType, WorkerState

from .conftest import Running, wait_for

CONFIG = site_toml(
    "restart",
    local_cloud("local", 4, boot_time=1.5, jitter=0.3, seed=7),
    heartbeat_timeout=5.0,
    on_shutdown="drain",
)


def test_sigkill_during_scale_up_then_restart(tmp_path: Path) -> None:
    cfg, state = site_file(tmp_path, CONFIG)
    log = tmp_path / "manager.log"
    # Jobs submitted through the CLI persist before any manager runs.
    out = run_command(
        "submit",
        "-c",
        str(cfg),
        "--walltime",
        "30",
        "--count",
        "6",
        "--",
        "sleep",
        "1",
        check=True,
    )
    job_ids = out.stdout.split()
    assert len(job_ids) == 6
    cloud = LocalCloud("local", state, "restart", state / "batch.db")
    try:
        proc = start_run(cfg, log)
        store = StateStore(state / "manager.db")
        # Kill it while workers are still booting (boot takes ~1.5 s).
        wait_for(
            lambda: sum(r.worker.state.pending for r in store.load()) >= 2,
            30,
            "workers to be requested",
            every=0.02,
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        booting = [r.worker.id for r in store.load() if r.worker.state.pending]
        assert booting, "the manager was not killed during scale-up"

        proc = start_run(cfg, log)
        batch = LocalBatch(state / "batch.db")
        wait_for(lambda: batch.counts().get("completed", 0) == 6, 60, "every job to finish")
        proc.send_signal(signal.SIGTERM)  # on_shutdown = drain
        assert proc.wait(60) == 0, log.read_text()[-3000:]

        jobs = {j.id: j for j in batch.jobs()}
        assert all(jobs[j].state is JobState.DONE and jobs[j].exit_code == 0 for j in job_ids)
        records = {r.worker.id: r.worker for r in store.load(include_done=True)}
        instances = cloud.describe()
        # No orphan: every instance belongs to a worker record, and every one is gone.
        assert {i.tags[WORKER_TAG] for i in instances} <= set(records)
        assert all(i.state is InstanceState.TERMINATED for i in instances), instances
        assert all(w.state.final for w in records.values())
        status = run_command("status", "-c", str(cfg), "--events", "50").stdout
        assert "-> terminated (cloud-reported)" in status and "launched" in status
        # The workers booting at the kill were carried through, not forgotten.
        for wid in booting:
            path = [t.to_state for t in store.transitions(wid)]
            assert WorkerState.TERMINATED in path or WorkerState.FAILED in path
    finally:
        cloud.kill_all()


def test_unknown_tagged_instance_is_adopted_and_stray_is_cleaned(
    start_site: Callable[..., Running],
) -> None:
    r = start_site("dedicated", run=False, settings={"dedicated_workers": 1})
    cloud = r.site.clouds["local"]
    tags = {SITE_TAG: "test", WORKER_TAG: "local-09999"}
    cloud.launch(LaunchRequest(VMType("small"), ["local-09999"], {}, tags))
    # An instance of another site on the same cloud is none of our business.
    elsewhere = LocalCloud("local", cloud.state_dir, "elsewhere", cloud.batch_path)
    elsewhere.launch(LaunchRequest(VMType("small"), ["other-1"], {}, {WORKER_TAG: "other-1"}))
    r.thread.start()
    wait_for(
        lambda: any(
            rec.worker.id == "local-09999" and rec.worker.state is WorkerState.IDLE
            for rec in r.site.store.load()
        ),
        30,
        "the unknown instance to be adopted and join",
    )
    # The dedicated pool of one is satisfied by the adopted worker: nothing else launched.
    assert [rec.worker.id for rec in r.site.store.load()] == ["local-09999"]
    causes = [t.cause for t in r.site.store.transitions("local-09999")]
    assert causes[:2] == [Cause.ADOPTED, Cause.ADOPTED]
    r.stop()
    assert [rec.worker.state for rec in r.site.store.load(include_done=True)] == [
        WorkerState.TERMINATED
    ]
    # A live instance carrying the tag of a worker that is already finished is a stray:
    # the next manager terminates it instead of adopting it.
    stray = cloud.launch(LaunchRequest(VMType("small"), ["stray"], {}, tags))[0]
    again = start_site("dedicated", settings={"dedicated_workers": 0})
    wait_for(
        lambda: (
            {i.id: i.state for i in cloud.describe()}[stray.id] is InstanceState.TERMINATED
            and again.site.store.counters().get("strays_terminated") == 1
        ),
        60,
        "the stray instance to be terminated and counted",
    )
    again.stop()
    foreign = elsewhere.describe()
    assert [i.name for i in foreign] == ["other-1"]
    assert foreign[0].state is not InstanceState.TERMINATED


def test_clean_stop_leaves_workers_for_the_next_start(start_site: Callable[..., Running]) -> None:
    r = start_site("dedicated", settings={"dedicated_workers": 2}, manager={"on_shutdown": "leave"})
    wait_for(
        lambda: sum(rec.worker.state is WorkerState.IDLE for rec in r.site.store.load()) == 2,
        30,
        "the dedicated pool to join",
    )
    r.stop()
    cloud = r.site.clouds["local"]
    assert [i.state for i in cloud.describe()] == [InstanceState.RUNNING] * 2
    before = {rec.worker.id for rec in r.site.store.load()}
    # The next start carries on with the same two workers: no launch, no adoption needed.
    again = start_site("dedicated", settings={"dedicated_workers": 2})
    job = again.submit(0.3)[0]
    wait_for(lambda: again.site.batch.job(job).state is JobState.DONE, 30, "a job on them")
    assert {rec.worker.id for rec in again.site.store.load()} == before
    assert again.site.store.counters().get("launched") == 2
    again.stop()  # on_shutdown = drain this time
    assert all(i.state is InstanceState.TERMINATED for i in cloud.describe())
