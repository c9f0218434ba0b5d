"""The simulator's batch system passes the shared adapter contract on its virtual clock."""

from __future__ import annotations

import pytest
from tests.batch.contract import BatchContract

from elasticsite.sim.batch import SimBatch
from elasticsite.sim.engine import Simulation


@pytest.fixture
def batch() -> SimBatch:
    return SimBatch(Simulation(1_000.0))


class TestSimBatchContract(BatchContract):
    def bring_up(self, batch: SimBatch, name: str, cores: int) -> None:
        batch.register(name)
