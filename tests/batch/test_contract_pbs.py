"""The PBS adapter passes the shared contract against a stateful fake server, both flavours.

The fake (``pbs_fake.py``) answers in the output formats of the recorded fixtures;
no PBS server can run on this machine.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from tests.batch.contract import BatchContract
from tests.batch.pbs_fake import FakePbs

from elasticsite.batch.base import JobRequest
from elasticsite.batch.pbs import PbsBatch

FIXTURES = Path(__file__).parent / "fixtures" / "pbs"


class _PbsContract(BatchContract):
    flavour = "openpbs"
    owners = False  # no per-user nodes: Cloud Scheduler mode is refused at config time

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
    cancel_recorded = False  # Torque keeps only the SIGTERM that ended a deleted job


def test_the_flavour_is_detected_from_qstat_version() -> None:
    assert PbsBatch(runner=FakePbs("openpbs")).flavour == "openpbs"
    assert PbsBatch(runner=FakePbs("torque")).flavour == "torque"


def _recorded_keys(paths: list[str], section: str) -> set[str]:
    keys: set[str] = set()
    for path in paths:
        data = json.loads((FIXTURES / path).read_text())
        for attrs in data.get(section, {}).values():
            keys |= set(attrs)
    return keys


def _with_jobs(flavour: str, *cores: int) -> tuple[FakePbs, PbsBatch]:
    """A fake server of ``flavour`` with a two-core node up and a job of each ``cores``."""
    fake = FakePbs(flavour)
    batch = PbsBatch(flavour, runner=fake)
    batch.add_node("w1", 2)
    fake.mom_reports("w1")
    for n in cores:
        batch.submit(JobRequest(["true"], cores=n))
    return fake, batch


def test_the_fake_prints_only_attributes_real_servers_print() -> None:
    """The fake's JSON and XML use attribute names found in the recorded outputs."""
    fake, batch = _with_jobs("openpbs", 1, 2)
    batch.drain("w1", "checking")
    jobs = json.loads(fake(["qstat", "-f", "-F", "json"]).stdout)["Jobs"]
    nodes = json.loads(fake(["pbsnodes", "-a", "-F", "json"]).stdout)["nodes"]
    recorded_jobs = _recorded_keys(
        ["openpbs-20/qstat-f-F-json.json", "openpbs-22/qstat-f-F-json-finished.json"], "Jobs"
    )
    recorded_nodes = _recorded_keys(["pbspro-2022/pbsnodes-a-F-json.json"], "nodes")
    assert {k for attrs in jobs.values() for k in attrs} <= recorded_jobs
    assert {k for attrs in nodes.values() for k in attrs} <= recorded_nodes

    torque, _ = _with_jobs("torque", 2, 1)
    xml_jobs = ET.fromstring(torque(["qstat", "-f", "-x"]).stdout)
    xml_nodes = ET.fromstring(torque(["pbsnodes", "-x"]).stdout)
    recorded = ET.fromstring((FIXTURES / "torque-6/qstat-f-x.xml").read_text())
    recorded_nodes_xml = [
        ET.fromstring((FIXTURES / p).read_text())
        for p in ("torque-4/pbsnodes-x-busy.xml", "torque-6/pbsnodes-x-down.xml")
    ]
    assert {e.tag for e in xml_jobs.iter()} <= {e.tag for e in recorded.iter()}
    assert {e.tag for e in xml_nodes.iter()} <= {
        e.tag for r in recorded_nodes_xml for e in r.iter()
    }
