"""The embedded cloud passes the shared driver contract with real worker processes.

Boot and shutdown delays are a tenth of a second, so every wait is short.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from tests.clouds.contract import CloudContract, CloudHarness

from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.base import CloudDriver
from elasticsite.clouds.local import LocalCloud

from .conftest import SITE


class LocalHarness(CloudHarness):
    """A local cloud for site :data:`SITE`; time passes by sleeping."""

    def __init__(self, make_cloud: Callable[..., LocalCloud]) -> None:
        self.make_cloud = make_cloud
        self.driver = make_cloud(boot_delay=0.1, shutdown_delay=0.1)
        self.site_id = SITE

    def settle(self, seconds: float) -> None:
        time.sleep(seconds)

    def neighbour(self) -> CloudDriver:
        """Another site's view of the same registry (same cloud name and state)."""
        return self.make_cloud(site_id="another-site", boot_delay=0.1, shutdown_delay=0.1)

    def refusing(self) -> tuple[CloudDriver, list[str]]:
        """The same cloud, its API refusing every launch (``fail_launch = 1``)."""
        return self.make_cloud(fail_launch=1.0), ["refused"]


class TestLocalCloudContract(CloudContract):
    @pytest.fixture
    def harness(self, make_cloud: Callable[..., LocalCloud], batch: LocalBatch) -> CloudHarness:
        return LocalHarness(make_cloud)  # ``batch``: the file the workers join
