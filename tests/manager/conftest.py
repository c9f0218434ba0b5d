"""A fast embedded site for manager tests: real worker processes, real SQLite, short timings."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pytest
from tests.waiting import wait_for as wait_for  # for the manager tests, from here

from elasticsite.batch.base import JobRequest
from elasticsite.clouds.ec2 import Ec2Cloud, Ec2Options
from elasticsite.clouds.local import LocalCloud
from elasticsite.config import SiteConfig, parse_config
from elasticsite.manager.exporter import serve_metrics
from elasticsite.manager.loop import Manager
from elasticsite.manager.site import Site, open_site
from elasticsite.model import VMType


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


class Started:
    """A manager of ``site`` on its own thread, with its metrics listener on ``port``;
    ``stop`` ends both, and the manager must have stopped."""

    def __init__(self, site: Site, port: int) -> None:
        self.manager = site.manager()
        assert self.manager.metrics is not None
        self.listener = serve_metrics(self.manager.metrics, "127.0.0.1", port)
        self.thread = threading.Thread(target=self.manager.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.manager.stop()
        self.thread.join(60)
        self.listener.shutdown()
        self.listener.server_close()
        assert not self.thread.is_alive()


def kill_workers(site: Site) -> None:
    """End the worker processes of every (local) cloud of ``site``: what a stopped
    manager leaves running for the next one."""
    for cloud in site.clouds.values():
        assert isinstance(cloud, LocalCloud)
        cloud.kill_all()


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
        kill_workers(site)


# -- EC2 through moto's server on 127.0.0.1 (tests/conftest.py's ``endpoint`` and ``proxy``;
# the modules using it skip without moto) ---------------------------------------------

IMAGE = "ami-03cf127a"
SMALL = (VMType("t3.micro", cores=1),)


class AtOnce(Executor):
    """Runs what the manager hands its executor there and then, so a step's launches and
    terminations are done when the step returns."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def ec2_cloud(name: str, site: str, url: str, creds: Path) -> Ec2Cloud:
    """The EC2 driver of cloud ``name`` for ``site`` at ``url``, trying each call once."""
    options = Ec2Options(
        image_id=IMAGE, endpoint_url=url, credentials_file=str(creds), api_attempts=1
    )
    return Ec2Cloud.connect(name, site, options)
