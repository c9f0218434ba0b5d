"""The manager on EC2: moto's server on 127.0.0.1 through boto3, one cloud refusing.

A capacity refusal closes the cheap cloud for its cool-down and the next launches go
to the second cloud; a cloud whose credentials are refused launches nothing until an
operator resets it; the spend cap holds across both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.clouds.ec2_server import FaultyEc2, credentials_file

from elasticsite import policies
from elasticsite.batch.base import JobRequest
from elasticsite.batch.local import LocalBatch
from elasticsite.config import ManagerConfig
from elasticsite.manager.loop import Manager
from elasticsite.manager.store import StateStore
from elasticsite.model import CloudSpec, VMType, Worker, WorkerState

from .conftest import SMALL, AtOnce, ec2_cloud

pytest.importorskip("moto")
pytestmark = pytest.mark.xdist_group("ec2-site")  # one worker: one moto `endpoint`

TWO_TYPES = (VMType("t3.micro", cores=1), VMType("t3.small", cores=1))
"""Two one-core types: the second one for when the first runs out."""


class Site:
    def __init__(
        self,
        tmp: Path,
        site_id: str,
        clouds: dict[str, str],
        manager: dict[str, Any] | None = None,
        vm_types: tuple[VMType, ...] = SMALL,
        **settings: Any,
    ) -> None:
        creds = credentials_file(tmp)
        self.now = 1_000.0
        self.batch = LocalBatch(tmp / "batch.db", clock=lambda: self.now)
        self.drivers = {name: ec2_cloud(name, site_id, url, creds) for name, url in clouds.items()}
        prices = {"cheap": 0.0, "dear": 0.5}
        specs = [
            CloudSpec(n, "ec2", max_instances=4, price_per_hour=prices[n], vm_types=vm_types)
            for n in clouds
        ]
        self.store = StateStore(tmp / "state.db")
        self.manager = Manager(
            config=ManagerConfig(
                site_id=site_id, interval=10.0, retry_backoff=1.0, **(manager or {})
            ),
            batch=self.batch,
            clouds=self.drivers,
            specs=specs,
            store=self.store,
            policy=policies.get("on_demand"),
            settings=policies.PolicySettings(**settings),
            clock=lambda: self.now,
            executor=AtOnce(),
        )

    def submit(self, n: int) -> None:
        for _ in range(n):
            self.batch.submit(JobRequest(["true"], 1, 600.0))

    def step(self, seconds: float = 10.0) -> None:
        self.manager.step()
        self.now += seconds

    def steps(self, n: int) -> None:
        for _ in range(n):
            self.step()

    def live_workers(self) -> list[Worker]:
        return [r.worker for r in self.store.load() if r.worker.state.live]

    def live(self, cloud: str) -> int:
        return sum(1 for i in self.drivers[cloud].describe() if i.state.value != "terminated")


def test_capacity_refusals_fall_back_to_the_second_cloud(
    tmp_path: Path, endpoint: str, proxy: FaultyEc2
) -> None:
    proxy.fail("RunInstances", "InsufficientInstanceCapacity")
    site = Site(tmp_path, "fallback", {"cheap": proxy.url, "dear": endpoint})
    site.submit(3)
    site.steps(3)
    assert site.live("dear") == 3 and proxy.seen.count("RunInstances") >= 1
    health = site.store.cloud_health()
    assert health["cheap"]["kind"] == "capacity"
    failed = [r for r in site.store.load(include_done=True) if r.worker.cloud == "cheap"]
    assert failed and all(r.worker.state is WorkerState.FAILED for r in failed)
    assert site.store.counters()["cloud_closed_capacity"] >= 1


def test_a_vm_type_out_of_capacity_falls_back_to_the_clouds_next_type(
    tmp_path: Path, endpoint: str, proxy: FaultyEc2
) -> None:
    proxy.fail("RunInstances", "InsufficientInstanceCapacity", matching="InstanceType=t3.micro")
    site = Site(tmp_path, "typeback", {"cheap": proxy.url, "dear": endpoint}, vm_types=TWO_TYPES)
    site.submit(3)
    site.steps(3)
    live = site.live_workers()
    # (both clouds are one moto account here, so the workers say where they went)
    assert [(w.cloud, w.vm_type) for w in live] == [("cheap", "t3.small")] * 3
    health = site.store.cloud_health()
    assert health["cheap/t3.micro"]["kind"] == "capacity" and "cheap" not in health
    site.now += 400.0  # after the cool-down the first type is tried again
    proxy.clear()
    site.submit(1)
    site.steps(2)
    assert any(r.worker.vm_type == "t3.micro" and r.worker.state.live for r in site.store.load())


def test_every_type_out_of_capacity_closes_the_cloud(
    tmp_path: Path, endpoint: str, proxy: FaultyEc2
) -> None:
    proxy.fail("RunInstances", "InsufficientInstanceCapacity")
    site = Site(tmp_path, "allgone", {"cheap": proxy.url, "dear": endpoint}, vm_types=TWO_TYPES)
    site.submit(2)
    site.steps(4)
    live = site.live_workers()
    assert [w.cloud for w in live] == ["dear"] * 2
    health = site.store.cloud_health()
    assert {"cheap/t3.micro", "cheap/t3.small"} <= set(health)


def test_throttling_is_retried_and_then_launches(
    tmp_path: Path, endpoint: str, proxy: FaultyEc2
) -> None:
    proxy.fail("RunInstances", "RequestLimitExceeded", times=1)
    site = Site(tmp_path, "throttled", {"cheap": proxy.url})
    site.submit(1)
    site.steps(4)
    assert site.live("cheap") == 1
    (rec,) = site.store.load()
    assert rec.worker.state is not WorkerState.FAILED
    assert "cheap" not in site.store.cloud_health()


def test_refused_credentials_stop_a_cloud_until_reset(
    tmp_path: Path, endpoint: str, proxy: FaultyEc2
) -> None:
    proxy.fail("RunInstances", "AuthFailure")
    site = Site(tmp_path, "blocked", {"cheap": proxy.url})
    site.submit(2)
    site.steps(5)
    calls = proxy.seen.count("RunInstances")
    for _ in range(5):
        site.step(600.0)  # long after any cool-down: still closed
    assert proxy.seen.count("RunInstances") == calls == 2  # the first step's two launches
    assert site.store.cloud_health()["cheap"]["closed_until"] is None
    proxy.clear()
    site.store.request_cloud_reset("cheap")
    site.step()
    site.step()
    assert site.live("cheap") == 2


def test_the_spend_cap_holds_across_clouds(tmp_path: Path, endpoint: str) -> None:
    site = Site(tmp_path, "capped", {"dear": endpoint}, spend_cap_per_hour=1.0)
    site.submit(4)
    site.steps(3)
    assert site.live("dear") == 2  # 2 x 0.5 per hour


def test_a_cloud_whose_workers_never_join_is_protected_and_launches_nothing(
    tmp_path: Path, proxy: FaultyEc2
) -> None:
    site = Site(
        tmp_path, "protect", {"cheap": proxy.url},
        manager={"protect_after": 2, "protect_cooldown": 3600.0}, stall_timeout=30.0,
    )  # fmt: skip
    site.submit(1)  # moto's instances boot but never join the batch system: they stall
    site.steps(12)
    assert site.store.cloud_health()["cheap"]["kind"] == "protected"
    launched = proxy.seen.count("RunInstances")
    assert launched == 2
    site.steps(10)
    assert proxy.seen.count("RunInstances") == launched  # closed: nothing more
    stalled = [r.worker for r in site.store.load(include_done=True)]
    assert [w.state for w in stalled] == [WorkerState.FAILED] * 2
    assert site.live("cheap") == 0  # and the stalled instances were given back
