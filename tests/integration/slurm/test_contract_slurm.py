"""The Slurm adapter passes the shared batch contract on the real Slurm.

Jobs go to the ``contract`` partition, whose only nodes are those the tests declare
(feature ``contract``); a node is brought up by a real ``slurmd -Z`` in its own
network namespace (scripts/slurm/dynnode.sh), as a booted cloud worker would. The
adapter's view is narrowed to the jobs these tests submitted, since other users of
the same Slurm may have work queued ("a fresh system is empty of *our* work").
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.batch.contract import BatchContract
from tests.integration.slurm.conftest import TrackedSlurm, fresh_node_name

from elasticsite.batch.base import BatchView

pytestmark = pytest.mark.slow


class ContractSlurm(TrackedSlurm):
    """The adapter, showing only the jobs it submitted."""

    def snapshot(self) -> BatchView:
        view = super().snapshot()
        mine = TrackedSlurm.submitted
        view.queued = [j for j in view.queued if j.id in mine]
        view.running = [j for j in view.running if j.id in mine]
        return view


class TestSlurmContract(BatchContract):
    redirect_target = "elastic"
    # A bound on a hang, not a measurement: every settle returns once its state holds.
    # With both cores busy, slurmctld's next scheduling pass (an undrained node taking
    # a job) came after more than 20 s.
    settle_timeout = 90.0
    watch_time = 20.0  # slurmctld schedules at each submit and node change
    settle_poll = 0.2

    @pytest.fixture
    def batch(self, slurm: Any, slurm_cluster: Path) -> Iterator[ContractSlurm]:
        # ``slurm`` (conftest) cancels the tests' jobs and deletes their t-* nodes after
        self.scripts = slurm_cluster
        self.names: dict[int, str] = {}
        yield ContractSlurm(partition="contract", node_feature="contract", include_held=True)

    def node_name(self, index: int) -> str:
        if index not in self.names:
            self.names[index] = fresh_node_name(f"c{index}")
        return self.names[index]

    def bring_up(self, batch: Any, name: str, cores: int) -> None:
        started = subprocess.run(
            ["bash", str(self.scripts / "dynnode.sh"), "start", name, "contract", str(cores)],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
        assert started.returncode == 0, f"dynnode.sh start {name}: {started.stderr}"
