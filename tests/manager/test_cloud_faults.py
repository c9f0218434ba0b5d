"""The manager against clouds at scale and under faults: moto's EC2 server on 127.0.0.1
through boto3, behind a proxy that counts the calls, refuses them as EC2 does, or
holds an answer back as a hung API would.

A step's terminations on one cloud go in one call; a cloud that does not answer its
describe in time is not sensed that step (its workers keep their states, none is
lost) while the others are; ``elasticsite status`` names a cloud's last error, its
kind and the API call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pytest
from tests.cli import run_command
from tests.clouds.ec2_server import FaultyEc2, credentials_file

from elasticsite import policies
from elasticsite.batch.base import JobRequest
from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.ec2 import Ec2Cloud
from elasticsite.config import ManagerConfig
from elasticsite.manager.loop import Manager, StepReport
from elasticsite.manager.store import StateStore
from elasticsite.model import CloudSpec, WorkerState

from .conftest import IMAGE, SMALL, AtOnce, ec2_cloud, wait_for

pytest.importorskip("moto")
pytestmark = pytest.mark.xdist_group("cloud-faults")  # one worker: one moto `endpoint`


def manager(
    tmp: Path, site: str, clouds: dict[str, Ec2Cloud], workers: int, clock: Callable[[], float],
    per_cloud: int = 0, **config: Any,
) -> tuple[Manager, LocalBatch]:  # fmt: skip
    batch = LocalBatch(tmp / "batch.db", clock=clock)
    for _ in range(workers):
        batch.submit(JobRequest(["true"], 1, 600.0))
    limit = per_cloud or workers
    specs = [CloudSpec(name, "ec2", max_instances=limit, vm_types=SMALL) for name in clouds]
    found = Manager(
        config=ManagerConfig(site_id=site, **{"interval": 10.0, **config}),
        batch=batch,
        clouds=clouds,
        specs=specs,
        store=StateStore(tmp / "state.db"),
        policy=policies.get("on_demand"),
        settings=policies.PolicySettings(),
        clock=clock,
        executor=AtOnce(),
    )
    return found, batch


def test_down_terminates_a_clouds_workers_in_one_call(tmp_path: Path, proxy: FaultyEc2) -> None:
    creds = credentials_file(tmp_path)
    site, n = "batched", 30
    clouds = {"aws": ec2_cloud("aws", site, proxy.url, creds)}
    mgr, _ = manager(tmp_path, site, clouds, n, clock=_Clock(), interval=0.2)
    mgr.step()  # every worker launched
    assert proxy.seen.count("RunInstances") == n
    proxy.seen.clear()
    steps: list[StepReport] = []
    left = mgr.take_down(120.0, immediate=True, on_step=steps.append)  # `elasticsite down --now`
    assert left == 0
    assert proxy.seen.count("TerminateInstances") == 1, "one call per worker"
    lookups = [f for f in proxy.forms if "DescribeInstances" in f and "instance-id" in f]
    assert lookups == [], "the instances were looked up again to be terminated"
    terminated = [r for r in StateStore(tmp_path / "state.db").load(include_done=True)]
    assert len(terminated) == n
    assert all(r.worker.state is WorkerState.TERMINATED for r in terminated)


def test_a_refused_batch_is_said_once_and_tried_again(tmp_path: Path, proxy: FaultyEc2) -> None:
    import time

    creds = credentials_file(tmp_path)
    site, n = "refused", 10
    clouds = {"aws": ec2_cloud("aws", site, proxy.url, creds)}
    mgr, _ = manager(tmp_path, site, clouds, n, time.time, interval=0.2, retry_backoff=0.2)
    mgr.step()
    proxy.fail("TerminateInstances", "InternalError", times=1)
    steps: list[StepReport] = []
    assert mgr.take_down(120.0, immediate=True, on_step=steps.append) == 0
    assert proxy.seen.count("TerminateInstances") == 2  # refused together, then again
    said = [e for r in steps for e in r.errors if "terminate" in e]
    assert len(said) == 2, [e for r in steps for e in r.errors]
    assert (
        "InternalError" in said[0]
        and said[1] == f"terminate of {n - 1} more workers failed the same way"
    )


class Held(Executor):
    """A pool whose commands wait until the test lets them run."""

    def __init__(self) -> None:
        self.waiting: list[tuple[Future[Any], Callable[[], Any]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.waiting.append((future, lambda: fn(*args, **kwargs)))
        return future

    def run(self) -> None:
        waiting, self.waiting = self.waiting, []
        for future, call in waiting:
            future.set_result(call())


def test_a_cloud_is_not_listed_while_its_launches_are_backed_up(
    tmp_path: Path, proxy: FaultyEc2
) -> None:
    creds = credentials_file(tmp_path)
    site, n = "backlog", 25
    clock = _Clock()
    batch = LocalBatch(tmp_path / "batch.db", clock=clock)
    for _ in range(n):
        batch.submit(JobRequest(["true"], 1, 600.0))
    pool = Held()
    mgr = Manager(
        config=ManagerConfig(site_id=site, interval=10.0, launch_threads=10),
        batch=batch,
        clouds={"aws": ec2_cloud("aws", site, proxy.url, creds)},
        specs=[CloudSpec("aws", "ec2", max_instances=n, vm_types=SMALL)],
        store=StateStore(tmp_path / "state.db"),
        policy=policies.get("on_demand"),
        settings=policies.PolicySettings(),
        clock=clock,
        executor=pool,
    )
    mgr.step()  # listed, then 25 launches queued for 10 threads
    assert proxy.seen.count("DescribeInstances") == 1 and len(pool.waiting) == n
    clock.now += 10
    report = mgr.step()
    assert proxy.seen.count("DescribeInstances") == 1, "listed while launching"
    assert report.unsensed == ["aws"] and not report.errors  # on purpose, not a failure
    pool.run()
    clock.now += 10
    report = mgr.step()  # the backlog is gone: listed again
    assert proxy.seen.count("DescribeInstances") == 2 and report.unsensed == []
    assert proxy.seen.count("RunInstances") == n


class _Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_a_cloud_that_does_not_answer_is_not_sensed_and_loses_no_worker(
    tmp_path: Path, endpoint: str, proxy: FaultyEc2
) -> None:
    creds = credentials_file(tmp_path)
    site = "hung"
    clock = _Clock()
    clouds = {
        "slow": ec2_cloud("slow", site, proxy.url, creds),
        "fast": ec2_cloud("fast", site, endpoint, creds),
    }
    # A describe gets 30 s: on a busy machine moto's answer alone can take 10 s, and the
    # cloud that answers must be told from the one that does not.
    mgr, _ = manager(tmp_path, site, clouds, 2, clock, per_cloud=1, describe_timeout=30.0)
    mgr.step()  # one worker launched on each cloud
    clock.now += 10
    mgr.step()
    booting = {r.worker.cloud: r.worker.id for r in mgr.records.values()}
    assert sorted(booting) == ["fast", "slow"]
    assert all(r.worker.state is WorkerState.BOOTING for r in mgr.records.values())

    proxy.hold("DescribeInstances")  # the slow cloud's API stops answering
    clock.now += 120  # past the grace after which a missing instance means lost
    done: list[StepReport] = []
    stepping = threading.Thread(target=lambda: done.append(mgr.step()), daemon=True)
    stepping.start()
    stepping.join(120)  # a bound on a hang, not a measurement: it waits for no cloud
    assert done, "the step waited for the cloud that does not answer"
    assert "DescribeInstances" in proxy.held, "the held describe was answered"
    (report,) = done
    assert report.unsensed == ["slow"]
    assert any("cloud slow: describe: no answer" in e for e in report.errors)
    states = {r.worker.cloud: r.worker.state for r in mgr.records.values()}
    assert states == {"slow": WorkerState.BOOTING, "fast": WorkerState.BOOTING}
    assert mgr.cloud_errors["slow"]["what"] == "describe"

    proxy.release()  # it answers again (and rests as long as it was slow): sensed again
    clock.now += 10
    wait_for(lambda: not mgr.step().unsensed, 120, "the slow cloud sensed again", every=0.2)
    records = StateStore(tmp_path / "state.db").load(include_done=True)
    assert {r.worker.id: r.worker.state for r in records} == {
        booting["slow"]: WorkerState.BOOTING, booting["fast"]: WorkerState.BOOTING,
    }  # fmt: skip


def test_status_says_a_cloud_is_throttled_and_names_the_call(
    tmp_path: Path, proxy: FaultyEc2
) -> None:
    from elasticsite.config import parse_config
    from elasticsite.manager.site import open_site

    creds = credentials_file(tmp_path)
    config = tmp_path / "site.toml"
    config.write_text(
        f'[manager]\nsite_id = "busy"\nstate_dir = "{tmp_path / "state"}"\n'
        "history_interval = 0\n\n"
        '[[clouds]]\nname = "aws"\ndriver = "ec2"\nmax_instances = 2\n'
        'vm_types = [{ name = "t3.micro", cores = 1 }]\n'
        f'options = {{ image_id = "{IMAGE}", endpoint_url = "{proxy.url}", '
        f'credentials_file = "{creds}", api_attempts = 1 }}\n'
    )
    import tomllib

    site = open_site(parse_config(tomllib.loads(config.read_text())), tmp_path)
    site.batch.submit(JobRequest(["true"], 1, 600.0))
    mgr = site.manager(executor=AtOnce())
    proxy.fail("RunInstances", "RequestLimitExceeded")
    mgr.step()  # the launch is refused ...
    mgr.step()  # ... and its outcome settled

    def status() -> str:
        shown = run_command("status", "-c", str(config), cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        return " ".join(shown.stdout.split())

    shown = status()
    assert "cloud aws: last error" in shown
    assert "throttled (RunInstances, launch)" in shown and "RequestLimitExceeded" in shown
    proxy.clear()
    proxy.fail("DescribeInstances", "RequestLimitExceeded")

    def describe_refused() -> bool:  # a busy machine may see the describe come back late
        mgr.step()
        return "throttled (DescribeInstances, describe)" in status()

    wait_for(describe_refused, 180, "the refused describe in status", every=0.2)
    mgr.shutdown()
