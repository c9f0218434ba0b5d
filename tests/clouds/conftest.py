"""Fixtures for the embedded cloud: real worker processes, always killed afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests import waiting

from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.local import LocalCloud

SITE = "site-test"


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 15.0) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what``."""
    return waiting.wait_for(predicate, timeout, what)


@pytest.fixture
def batch_path(tmp_path: Path) -> Path:
    return tmp_path / "batch.db"


@pytest.fixture
def batch(batch_path: Path) -> LocalBatch:
    return LocalBatch(batch_path, heartbeat_timeout=10.0)


@pytest.fixture
def make_cloud(tmp_path: Path, batch_path: Path) -> Iterator[Callable[..., LocalCloud]]:
    """Build LocalClouds with fast test timings; every worker is SIGKILLed at the end."""
    clouds: list[LocalCloud] = []

    def make(**kwargs: Any) -> LocalCloud:
        options: dict[str, Any] = {
            "name": "local",
            "state_dir": tmp_path / "state",
            "site_id": SITE,
            "batch_path": batch_path,
            "boot_delay": 0.3,
            "shutdown_delay": 0.1,
            "poll_interval": 0.1,
            "seed": 1,
        }
        options.update(kwargs)
        cloud = LocalCloud(**options)
        clouds.append(cloud)
        return cloud

    yield make
    for cloud in clouds:
        cloud.kill_all()
