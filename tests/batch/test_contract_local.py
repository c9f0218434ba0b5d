"""The embedded batch system passes the shared adapter contract on a real SQLite file."""

from __future__ import annotations

from tests.batch.contract import BatchContract

from elasticsite.batch.local import LocalBatch


class TestLocalBatchContract(BatchContract):
    """``batch`` is the SQLite-backed fixture of this folder's conftest."""

    def bring_up(self, batch: LocalBatch, name: str, cores: int) -> None:
        batch.register_node(name, cores)
