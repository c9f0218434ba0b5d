"""The PBS adapter passes the shared contract against a stateful fake server, both flavours.

The fake (``pbs_fake.py``) answers in the output formats of the recorded fixtures;
no PBS server can run on this machine.
"""

from __future__ import annotations

import pytest
from tests.batch.contract import BatchContract
from tests.batch.pbs_fake import FakePbs

from elasticsite.batch.pbs import PbsBatch


class _PbsContract(BatchContract):
    flavour = "openpbs"

    @pytest.fixture
    def batch(self) -> PbsBatch:
        return PbsBatch(self.flavour, runner=FakePbs(self.flavour))

    def bring_up(self, batch: PbsBatch, name: str, cores: int) -> None:
        assert isinstance(batch.runner, FakePbs)
        batch.runner.mom_reports(name)


class TestOpenPbsContract(_PbsContract):
    flavour = "openpbs"


class TestTorqueContract(_PbsContract):
    flavour = "torque"


def test_the_flavour_is_detected_from_qstat_version() -> None:
    assert PbsBatch(runner=FakePbs("openpbs")).flavour == "openpbs"
    assert PbsBatch(runner=FakePbs("torque")).flavour == "torque"
