"""The simulator's cloud passes the shared driver contract on its virtual clock.

Waiting runs the simulation forward instead of sleeping, so a boot of half a minute
costs no wall-clock time.
"""

from __future__ import annotations

import random

import pytest
from tests.clouds.contract import CloudContract, CloudHarness

from elasticsite.clouds.base import CloudDriver
from elasticsite.sim.batch import SimBatch
from elasticsite.sim.cloud import CloudModel, Durations, SimCloud
from elasticsite.sim.engine import Simulation


class SimHarness(CloudHarness):
    """A simulated cloud with boots of 20-40 s and shutdowns of 5 s; time passes by
    running the simulation."""

    step = 1.0
    patience = 300.0

    def __init__(self) -> None:
        self.sim = Simulation()
        self.batch = SimBatch(self.sim)
        self.driver = self._cloud(vm_limit=8)
        self.site_id = "sim-site"

    def _cloud(self, vm_limit: int) -> SimCloud:
        model = CloudModel(
            name="sim",
            vm_limit=vm_limit,
            boot=Durations.uniform(20.0, 40.0),
            shutdown=Durations.constant(5.0),
        )
        return SimCloud(model, self.sim, random.Random(7), self.batch)

    def settle(self, seconds: float) -> None:
        self.sim.run(until=self.sim.now + seconds)

    def refusing(self) -> tuple[CloudDriver, list[str]]:
        """A cloud of one VM, asked for two: the second is past its limit."""
        return self._cloud(vm_limit=1), ["first", "past-the-limit"]


class TestSimCloudContract(CloudContract):
    @pytest.fixture
    def harness(self) -> CloudHarness:
        return SimHarness()
