"""The embedded cloud end to end: real worker processes joining a real local batch system."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from elasticsite.batch.base import JobRequest, NodeState
from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, CloudDriver, InstanceState, LaunchRequest
from elasticsite.clouds.local import LocalCloud, cloud_db
from elasticsite.clouds.local_registry import process_alive
from elasticsite.model import JobState, VMType

from .conftest import SITE, wait_for

MakeCloud = Callable[..., LocalCloud]
SMALL = VMType("small", cores=1)


def states(cloud: LocalCloud) -> dict[str, InstanceState]:
    return {i.name: i.state for i in cloud.describe()}


def node_states(batch: LocalBatch) -> dict[str, NodeState]:
    return {n.name: n.state for n in batch.snapshot().nodes}


def launch(cloud: LocalCloud, *names: str, vm: VMType = SMALL) -> list:
    return cloud.launch(LaunchRequest(vm, names, {"role": "worker"}, {WORKER_TAG: names[0]}))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split(") ")[1][0] != "Z"


def test_is_a_cloud_driver(make_cloud: MakeCloud) -> None:
    assert isinstance(make_cloud(), CloudDriver)


def test_a_worker_boots_joins_and_runs_a_job(
    make_cloud: MakeCloud, batch: LocalBatch, tmp_path: Path
) -> None:
    cloud = make_cloud(boot_delay=0.5)
    started = time.monotonic()
    (inst,) = launch(cloud, "w1")
    assert inst.id.startswith("i-") and inst.state is InstanceState.PENDING
    assert inst.tags == {SITE_TAG: SITE, WORKER_TAG: "w1"}
    batch.add_node("w1", 1)
    wait_for("w1 to join", lambda: node_states(batch) == {"w1": NodeState.IDLE})
    assert time.monotonic() - started >= 0.5  # not before its boot delay
    assert states(cloud) == {"w1": InstanceState.RUNNING}
    script = "import json, os, sys; print(json.dumps(dict(os.environ))); sys.exit(3)"
    job_id = batch.submit(JobRequest(["python3", "-c", script], walltime=30))
    job = wait_for("the job to finish", lambda: batch.jobs(["failed"]))[0]
    assert (job.id, job.node, job.exit_code, job.signal) == (job_id, "w1", 3, None)
    out = tmp_path / "state" / "jobs" / job_id / "stdout"
    env = json.loads(out.read_text())  # its own, not the worker's (user data, keys, ...)
    assert set(env) == {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "ELASTICSITE_JOB_ID",
                        "ELASTICSITE_NODE", "ELASTICSITE_CORES"}  # fmt: skip
    assert (env["ELASTICSITE_JOB_ID"], env["ELASTICSITE_NODE"]) == (job_id, "w1")
    assert node_states(batch) == {"w1": NodeState.IDLE}


def test_launch_is_idempotent_by_name(make_cloud: MakeCloud) -> None:
    cloud = make_cloud()
    (first,) = launch(cloud, "w1")
    again = launch(cloud, "w1", "w2")
    assert [i.name for i in again] == ["w1", "w2"]
    assert again[0].id == first.id
    assert len(cloud.instances()) == 2
    log = (cloud.state_dir / "logs" / "w1.log").read_text
    wait_for("w1 to log its boot", lambda: "booting" in log())
    assert log().count("booting") == 1  # one process for w1, not two


def test_terminate_stops_the_instance_and_the_node_leaves(
    make_cloud: MakeCloud, batch: LocalBatch
) -> None:
    cloud = make_cloud(shutdown_delay=0.5)
    (inst,) = launch(cloud, "w1")
    batch.submit(JobRequest(["sleep", "30"], walltime=60))
    wait_for("the job to start", lambda: batch.snapshot().running)
    cloud.terminate([inst.id, "i-unknown"])
    assert states(cloud) == {"w1": InstanceState.STOPPING}
    wait_for("termination", lambda: states(cloud) == {"w1": InstanceState.TERMINATED})
    view = batch.snapshot()
    assert view.nodes == [] and view.running == []
    assert [j.id for j in view.queued] == ["1"]  # requeued, not lost
    cloud.terminate([inst.id])  # gone: ignored


def test_describe_shows_only_this_sites_instances(make_cloud: MakeCloud) -> None:
    ours = make_cloud(boot_delay=5)
    theirs = make_cloud(site_id="other-site", boot_delay=5)
    launch(ours, "a1")
    launch(theirs, "b1")
    assert [i.name for i in ours.describe()] == ["a1"]
    assert [i.name for i in theirs.describe()] == ["b1"]
    assert sorted(i.name for i in ours.instances()) == ["a1", "b1"]


def test_a_killed_worker_shows_as_error(make_cloud: MakeCloud, batch: LocalBatch) -> None:
    cloud = make_cloud()
    launch(cloud, "w1")
    wait_for("w1 to join", lambda: node_states(batch) == {"w1": NodeState.IDLE})
    pid = cloud._children and next(iter(cloud._children))
    assert pid
    os.kill(pid, signal.SIGKILL)
    wait_for("the instance to show ERROR", lambda: states(cloud) == {"w1": InstanceState.ERROR})
    cloud.terminate([cloud.describe()[0].id])  # cleanup of a dead instance: terminated
    assert states(cloud) == {"w1": InstanceState.TERMINATED}


def test_a_job_over_its_walltime_is_killed(make_cloud: MakeCloud, batch: LocalBatch) -> None:
    cloud = make_cloud()
    launch(cloud, "w1")
    batch.submit(JobRequest(["sleep", "60"], walltime=0.5))
    job = wait_for("the walltime kill", lambda: batch.jobs(["failed"]), timeout=20)[0]
    assert (job.exit_code, job.signal, job.reason) == (None, 9, "walltime exceeded")
    assert 0.5 <= job.runtime < 10


def test_preempted_and_cancelled_jobs_are_killed_on_the_worker(
    make_cloud: MakeCloud, batch: LocalBatch, tmp_path: Path
) -> None:
    cloud = make_cloud()
    launch(cloud, "w1")
    script = "import os, time; open('pid', 'w').write(str(os.getpid())); time.sleep(60)"
    victim = batch.submit(JobRequest(["python3", "-c", script], walltime=120))
    pid_file = tmp_path / "state" / "jobs" / victim / "pid"
    first_pid = int(
        wait_for("the job to start", lambda: pid_file.exists() and pid_file.read_text())
    )
    urgent = batch.submit(JobRequest(["sleep", "0.3"], walltime=10))
    batch.move_to_front(urgent)
    batch.preempt(victim)
    wait_for("the preempted process to die", lambda: not alive(first_pid))
    wait_for("the urgent job to finish", lambda: batch.job(urgent).state is JobState.DONE)
    # The victim then runs again from the start, as a new process.
    wait_for("the victim to restart", lambda: batch.job(victim).state is JobState.RUNNING)
    wait_for("a new process", lambda: pid_file.read_text() not in ("", str(first_pid)))
    second_pid = int(pid_file.read_text())
    batch.cancel(victim)
    wait_for("the cancelled process to die", lambda: not alive(second_pid))
    assert batch.job(victim).state is JobState.CANCELLED


def test_an_instance_that_fails_to_boot_never_joins(
    make_cloud: MakeCloud, batch: LocalBatch
) -> None:
    cloud = make_cloud(fail_boot=1.0, boot_delay=0.1)
    (inst,) = launch(cloud, "w1")
    wait_for("the instance to run", lambda: states(cloud) == {"w1": InstanceState.RUNNING})
    time.sleep(1.0)
    assert batch.snapshot().nodes == []
    cloud.terminate([inst.id])
    wait_for("termination", lambda: states(cloud) == {"w1": InstanceState.TERMINATED})


def test_boot_delays_are_jittered_reproducibly(make_cloud: MakeCloud) -> None:
    def delays(seed: int) -> list[float]:
        cloud = make_cloud(name=f"c{seed}-{time.monotonic_ns()}", boot_delay=30,
                           boot_jitter=29, seed=seed)  # fmt: skip
        launch(cloud, *(f"{cloud.name}-{i}" for i in range(3)))
        found = []
        for i in range(3):
            log = cloud.state_dir / "logs" / f"{cloud.name}-{i}.log"
            text = wait_for("boot log", lambda log=log: log.exists() and log.read_text())
            found.append(float(text.split("booting for ")[1].split("s")[0]))
        return found

    first, second = delays(7), delays(7)
    assert first == second and len(set(first)) == 3
    assert all(1 <= d <= 59 for d in first)


def test_workers_outlive_the_process_that_launched_them(
    make_cloud: MakeCloud, batch_path: Path, tmp_path: Path
) -> None:
    cloud = make_cloud()  # same registry as the launcher below: cleaned up by the fixture
    code = (
        "import sys, time\n"
        "from elasticsite.clouds.base import LaunchRequest\n"
        "from elasticsite.clouds.local import LocalCloud\n"
        "from elasticsite.model import VMType\n"
        f"c = LocalCloud('local', {str(tmp_path / 'state')!r}, {SITE!r}, {str(batch_path)!r},"
        " boot_delay=0.2, poll_interval=0.1, shutdown_delay=0.1)\n"
        "c.launch(LaunchRequest(VMType('small'), ['orphan']))\n"
        "print('launched', flush=True)\n"
        "time.sleep(60)\n"
    )
    launcher = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert launcher.stdout is not None and launcher.stdout.readline() == "launched\n"
    launcher.kill()  # like a manager killed with SIGKILL
    launcher.wait()
    batch = LocalBatch(batch_path)
    wait_for("the orphan to join", lambda: node_states(batch) == {"orphan": NodeState.IDLE})
    assert states(cloud) == {"orphan": InstanceState.RUNNING}
    cloud.terminate([i.id for i in cloud.describe()])
    wait_for("termination", lambda: states(cloud) == {"orphan": InstanceState.TERMINATED})


def test_kill_all_leaves_no_worker_behind(make_cloud: MakeCloud) -> None:
    cloud = make_cloud(boot_delay=10)
    launch(cloud, "w1", "w2")
    pids = list(cloud._children)
    assert cloud.kill_all() == 2
    assert not any(alive(p) for p in pids)
    assert set(states(cloud).values()) == {InstanceState.TERMINATED}


@pytest.mark.slow
def test_a_worker_whose_cloud_vanished_exits(make_cloud: MakeCloud, batch: LocalBatch) -> None:
    cloud = make_cloud()
    launch(cloud, "w1")
    wait_for("w1 to join", lambda: node_states(batch) == {"w1": NodeState.IDLE})
    (proc,) = cloud._children.values()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{cloud.db_path}{suffix}").unlink(missing_ok=True)
    assert proc.wait(timeout=10) == 1
    assert not cloud.db_path.exists()  # the worker did not recreate it


def test_a_long_launch_keeps_its_instances_pending_until_each_worker_starts(
    make_cloud: MakeCloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a busy machine starting a hundred workers takes longer than the grace a row
    without a pid gets: while the launch runs, its instances are pending, not failed."""
    cloud = make_cloud(boot_delay=30.0)
    other = make_cloud(boot_delay=30.0)  # another view of the registry, as a describe thread
    seen: list[dict[str, InstanceState]] = []
    spawn = LocalCloud._spawn

    def slow_spawn(self: LocalCloud, instance_id: str, *args: object) -> int:
        with cloud_db(self.db_path) as db:  # the launch has been going on for an hour
            db.execute("UPDATE instances SET created_at = created_at - 3600")
        seen.append(states(other))
        return spawn(self, instance_id, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(LocalCloud, "_spawn", slow_spawn)
    launch(cloud, "w1", "w2", "w3")
    assert seen == [dict.fromkeys(("w1", "w2", "w3"), InstanceState.PENDING)] * 3
    assert set(states(other).values()) == {InstanceState.PENDING}


def test_an_instance_whose_launcher_died_before_starting_it_is_an_error(
    make_cloud: MakeCloud, tmp_path: Path
) -> None:
    """A row without a worker pid is pending while the process launching it lives (a
    manager in another process), and an error once that process is gone."""
    cloud = make_cloud()
    launcher = subprocess.Popen(["sleep", "300"])
    try:
        with cloud_db(cloud.db_path) as db:
            for name, pid in (("alive", launcher.pid), ("dead", 2**22 + 1)):
                db.execute(
                    "INSERT INTO instances (id, name, site, state, tags, vm_type, cores, "
                    "created_at, updated_at, launcher) VALUES (?, ?, ?, 'pending', ?, "
                    "'small', 1, ?, ?, ?)",
                    (f"i-{name}", name, SITE, json.dumps({SITE_TAG: SITE}), time.time(),
                     time.time(), pid),
                )  # fmt: skip
        assert states(cloud) == {"alive": InstanceState.PENDING, "dead": InstanceState.ERROR}
    finally:
        launcher.kill()
        launcher.wait()
    assert states(cloud)["alive"] is InstanceState.ERROR


def test_a_worker_between_fork_and_exec_counts_as_alive() -> None:
    """Just started, a worker process still shows its launcher's command line, not its
    instance's: the child of the instance's launcher is its worker; another process
    that lacks the instance's id is not (a reused pid)."""
    child = subprocess.Popen(["sleep", "300"])
    try:
        assert process_alive(child.pid, "i-0123", launcher=os.getpid())
        assert not process_alive(child.pid, "i-0123")
        assert not process_alive(child.pid, "i-0123", launcher=1)
    finally:
        child.kill()
        child.wait()
    assert not process_alive(child.pid, "i-0123", launcher=os.getpid())


def test_a_describe_that_read_a_row_before_its_worker_started_does_not_end_it(
    make_cloud: MakeCloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A describe reads the registry, then the launch records the worker's pid and ends:
    the row the describe read (no pid, no launch running) is stale, not failed."""
    cloud = make_cloud()
    worker = subprocess.Popen(["sleep", "300"])
    try:
        with cloud_db(cloud.db_path) as db:
            db.execute(
                "INSERT INTO instances (id, name, site, state, tags, vm_type, cores, created_at, "
                "updated_at, launcher) VALUES ('i-late', 'late', ?, 'pending', ?, 'small', 1, ?, "
                "?, ?)",
                (SITE, json.dumps({SITE_TAG: SITE}), time.time(), time.time(), os.getpid()),
            )
        live = LocalCloud._live

        def launch_ends_meanwhile(self: LocalCloud, instance_id: str, *args: object) -> bool:
            with cloud_db(self.db_path) as db:
                db.execute("UPDATE instances SET pid = ? WHERE id = 'i-late'", (worker.pid,))
            return live(self, instance_id, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(LocalCloud, "_live", launch_ends_meanwhile)
        assert states(cloud) == {"late": InstanceState.PENDING}
        with cloud_db(cloud.db_path) as db:
            assert db.execute("SELECT state FROM instances").fetchall() == [("pending",)]
    finally:
        worker.kill()
        worker.wait()
