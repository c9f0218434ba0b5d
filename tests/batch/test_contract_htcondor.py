"""The HTCondor adapter passes the shared contract against a schedd/collector fake.

The fake (``htcondor_fake.py``) answers with copies of recorded ClassAds parsed by the
real ``classad2`` module; no HTCondor pool can run on this machine.
"""

from __future__ import annotations

import pytest
from tests.batch.contract import BatchContract
from tests.batch.htcondor_fake import FakeCondorPool

from elasticsite.batch.htcondor import CondorBatch


class TestCondorContract(BatchContract):
    redirect_target = None  # no partitions: redirect refuses

    @pytest.fixture
    def batch(self) -> CondorBatch:
        return CondorBatch(FakeCondorPool())

    def bring_up(self, batch: CondorBatch, name: str, cores: int) -> None:
        assert isinstance(batch.pool, FakeCondorPool)
        batch.pool.startd_joins(name, cores)
