"""A fast embedded site for manager tests: real worker processes, real SQLite, short timings."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from elasticsite.batch.base import JobRequest
from elasticsite.clouds.local import LocalCloud
from elasticsite.config import SiteConfig, parse_config
from elasticsite.manager.loop import Manager
from elasticsite.manager.site import Site, open_site


def fast_cloud(name: str, max_instances: int, price: float = 0.0, **options: Any) -> dict[str, Any]:
    """A local cloud whose workers boot in 0.3 s; ``options`` go to the local driver."""
    return {
        "name": name,
        "max_instances": max_instances,
        "price_per_hour": price,
        "boot_time": 0.3,
        "shutdown_time": 0.1,
        "options": {"poll_interval": 0.1, **options},
    }


def site_config(state_dir: Path, policy: str = "on_demand", **over: Any) -> SiteConfig:
    """A site whose seconds are tenths: workers boot in ~0.5 s, the loop runs every 0.2 s."""
    clouds = over.pop("clouds", None) or [
        {
            "name": "local",
            "max_instances": over.pop("max_instances", 4),
            "boot_time": 0.5,
            "shutdown_time": 0.1,
            "options": {"boot_jitter": 0.2, "poll_interval": 0.1, "seed": 1},
        }
    ]
    manager = {
        "site_id": "test",
        "state_dir": str(state_dir),
        "interval": 0.2,
        "stall_timeout": 20.0,
        "heartbeat_timeout": 5.0,
        "retry_backoff": 0.2,
        "on_shutdown": "drain",
        "shutdown_timeout": 30.0,
    }
    manager.update(over.pop("manager", {}))
    policy_cfg = {"name": policy, "dedicated_workers": 2, **over.pop("settings", {})}
    batch = over.pop("batch", {})
    assert not over, over
    return parse_config(
        {"manager": manager, "policy": policy_cfg, "clouds": clouds, "batch": batch}
    )


class Running:
    """A manager on its own thread, stopped (and its site's processes killed) at teardown."""

    def __init__(self, site: Site, manager: Manager) -> None:
        self.site = site
        self.manager = manager
        self.thread = threading.Thread(target=manager.run, daemon=True)

    def submit(
        self, seconds: float, n: int = 1, walltime: float = 30.0, cores: int = 1
    ) -> list[str]:
        return [
            self.site.batch.submit(JobRequest(["sleep", str(seconds)], cores, walltime))
            for _ in range(n)
        ]

    def stop(self, timeout: float = 60.0) -> None:
        self.manager.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "manager did not stop"


def wait_for(cond: Callable[[], bool], timeout: float, what: str, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


@pytest.fixture
def start_site(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []
    sites: list[Site] = []

    def start(policy: str = "on_demand", run: bool = True, **over: Any) -> Running:
        site = open_site(site_config(tmp_path / "state", policy, **over))
        sites.append(site)
        r = Running(site, site.manager())
        started.append(r)
        if run:
            r.thread.start()
        return r

    yield start
    for r in started:
        r.manager.stop()
        if r.thread.is_alive():
            r.thread.join(30)
    for site in sites:
        for cloud in site.clouds.values():
            assert isinstance(cloud, LocalCloud)
            cloud.kill_all()
