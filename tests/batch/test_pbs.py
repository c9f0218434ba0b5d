"""PBS/Torque parsers on recorded outputs, the node-state table and the command builders."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from tests.batch.pbs_fake import FakePbs

from elasticsite.batch import pbs
from elasticsite.batch.base import BatchError, JobRequest, NodeState, UnknownJob, UnknownNode
from elasticsite.batch.command import CommandError, CommandResult
from elasticsite.batch.pbs import PbsBatch, node_state, parse_jobs, parse_nodes
from elasticsite.model import JobState

FIXTURES = Path(__file__).parent / "fixtures" / "pbs"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# -- jobs --------------------------------------------------------------------------------


def test_openpbs_20_running_job() -> None:
    (parsed,) = parse_jobs(fixture("openpbs-20/qstat-f-F-json.json"), "openpbs")
    job = parsed.job
    assert (job.id, job.state, job.cores, job.walltime) == (
        "1008.qot-calc0", JobState.RUNNING, 5, 4 * 3600.0,
    )  # fmt: skip
    assert (job.node, job.user, job.priority, job.command) == ("qot-calc0", "qoot", 0, "ntest")
    assert job.submitted_at == 1618443257.0  # Wed Apr 14 23:34:17 2021 UTC
    assert job.started_at == 1618443259.0
    assert parsed.job.attributes["partition"] == "atom-sim" and parsed.native_state == "R"


def test_a_job_on_several_hosts_lists_each_once_in_its_attributes() -> None:
    record = json.loads(fixture("openpbs-20/qstat-f-F-json.json"))
    (attrs,) = record["Jobs"].values()
    attrs.update(exec_host="cn2/0*4+cn3/0*4+cn2/1", Account_Name="physics")
    (parsed,) = parse_jobs(json.dumps(record), "openpbs")
    assert parsed.job.node == "cn2"
    assert parsed.job.attributes["nodes"] == "cn2,cn3"
    assert parsed.job.attributes["account"] == "physics"
    assert parsed.job.attributes["pbs.state"] == "R"


def test_pbs_text_times_are_read_in_the_server_zone() -> None:
    text = fixture("openpbs-20/qstat-f-F-json.json")
    (utc,) = parse_jobs(text, "openpbs")
    (paris,) = parse_jobs(text, "openpbs", timezone="Europe/Paris")
    assert utc.job.submitted_at - paris.job.submitted_at == 2 * 3600  # CEST in April


def test_openpbs_22_finished_and_empty_servers_list_no_job() -> None:
    assert parse_jobs(fixture("openpbs-22/qstat-f-F-json-finished.json"), "openpbs") == []
    assert parse_jobs(fixture("openpbs-22/qstat-f-F-json-empty.json"), "openpbs") == []


def test_torque_jobs_running_queued_and_completed() -> None:
    parsed = parse_jobs(fixture("torque-6/qstat-f-x.xml"), "torque", default_walltime=600.0)
    assert [(p.job.id, p.job.state) for p in parsed] == [
        ("665199.superserver.stanford.edu", JobState.RUNNING),
        ("667999.superserver.stanford.edu", JobState.QUEUED),
    ]  # the completed (C) job is left out
    running, queued = (p.job for p in parsed)
    assert (running.cores, running.walltime, running.node) == (1, 600.0, "node01")
    assert (running.started_at, running.user) == (1479339665.0, "johnfox")
    assert (queued.cores, queued.walltime, queued.submitted_at) == (1, 86340.0, 1479779395.0)
    assert parsed[1].job.attributes["partition"] == "batch" and queued.node is None


def test_an_empty_torque_queue_prints_nothing() -> None:
    assert parse_jobs("", "torque") == []


@pytest.mark.parametrize(
    ("resources", "cores"),
    [
        ({"ncpus": 5, "select": "5:ncpus=1"}, 5),
        ({"select": "2:ncpus=4+1:ncpus=2"}, 10),
        ({"select": "ncpus=3:mem=2gb"}, 3),
        ({"nodes": "2:ppn=8"}, 16),
        ({"nodes": "1:ppn=4+3:ppn=2"}, 10),
        ({"nodes": "3"}, 3),
        ({"nodes": "node01:ppn=2"}, 2),
        ({}, 1),
    ],
)
def test_request_cores(resources: dict[str, object], cores: int) -> None:
    assert pbs.request_cores(resources) == cores


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("04:00:00", 14400.0), ("23:59:00", 86340.0), ("30:00", 1800.0), ("90", 90.0),
     ("1:00:00:00", 86400.0), (None, None), (7200, 7200.0)],
)  # fmt: skip
def test_parse_walltime(text: object, seconds: float | None) -> None:
    assert pbs.parse_walltime(text) == seconds


# -- nodes -------------------------------------------------------------------------------


def test_pbspro_2022_nodes() -> None:
    nodes = parse_nodes(fixture("pbspro-2022/pbsnodes-a-F-json.json"), "openpbs")
    assert [(n.name, n.state, n.cores, n.running_jobs, n.free_cores) for n in nodes] == [
        ("x3006c0s13b1n0", NodeState.IDLE, 64, 0, 64),
        ("x3008c0s37b1n0", NodeState.BUSY, 64, 1, 63),
        ("x3009c0s19b0n0", NodeState.DOWN, 64, 0, 0),
    ]
    assert nodes[2].reason == "node down: communication closed"


def test_torque_4_busy_and_offline_nodes() -> None:
    busy = parse_nodes(fixture("torque-4/pbsnodes-x-busy.xml"), "torque")
    assert [(n.name, n.state, n.cores, n.running_jobs, n.free_cores) for n in busy] == [
        ("n061", NodeState.BUSY, 8, 1, 0),
        ("n062", NodeState.BUSY, 8, 1, 0),
    ]
    assert busy[0].heartbeat_at == 1390343608.0
    (offline,) = parse_nodes(fixture("torque-4/pbsnodes-x-offline.xml"), "torque")
    assert (offline.name, offline.state, offline.cores) == ("n001", NodeState.DRAINED, 8)


def test_torque_6_down_node_with_a_note() -> None:
    (node,) = parse_nodes(fixture("torque-6/pbsnodes-x-down.xml"), "torque")
    assert (node.name, node.state, node.cores, node.reason) == (
        "ubuntu", NodeState.DOWN, 1, "testnote",
    )  # fmt: skip


def test_torque_core_ranges_count_every_core() -> None:
    text = (
        "<Data><Node><name>a</name><state>free</state><np>16</np>"
        "<jobs>0-3/12.srv, 4/13.srv, 5,7/12.srv</jobs></Node></Data>"
    )
    (node,) = parse_nodes(text, "torque")
    assert (node.state, node.running_jobs, node.free_cores) == (NodeState.BUSY, 2, 9)


@pytest.mark.parametrize(
    ("native", "jobs", "state"),
    [
        ("free", 0, NodeState.IDLE),
        ("free", 2, NodeState.BUSY),
        ("job-busy", 1, NodeState.BUSY),
        ("job-exclusive", 1, NodeState.BUSY),
        ("busy", 0, NodeState.BUSY),
        ("resv-exclusive", 0, NodeState.BUSY),
        ("offline", 0, NodeState.DRAINED),
        ("offline", 1, NodeState.DRAINING),
        ("job-busy,offline", 3, NodeState.DRAINING),
        ("down", 0, NodeState.DOWN),
        ("down,offline", 0, NodeState.DOWN),
        ("state-unknown,down", 0, NodeState.DOWN),
        ("down,offline,MOM-list-not-sent", 0, NodeState.DOWN),
        ("provisioning", 0, NodeState.DOWN),
        ("wait-provisioning", 0, NodeState.DOWN),
        ("stale", 0, NodeState.DOWN),
        ("unresolvable", 0, NodeState.DOWN),
        ("offline, job-exclusive", 1, NodeState.DRAINING),
        ("", 0, NodeState.UNKNOWN),
    ],
)
def test_node_state_table(native: str, jobs: int, state: NodeState) -> None:
    assert node_state(native, jobs) is state


def test_an_unknown_state_is_unknown_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="elasticsite.batch.pbs"):
        assert node_state("teleporting", 0) is NodeState.UNKNOWN
        assert node_state("teleporting,free", 0) is NodeState.UNKNOWN
        assert node_state("teleporting,down", 0) is NodeState.DOWN
    assert [r.getMessage() for r in caplog.records] == [
        "unknown PBS node state 'teleporting': reported as unknown"
    ]


# -- malformed ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "flavour", "parser", "message"),
    [
        ("malformed/qstat-truncated.json", "openpbs", parse_jobs, "qstat printed malformed JSON"),
        ("malformed/empty.txt", "openpbs", parse_jobs, "qstat printed nothing"),
        ("malformed/not-json.txt", "openpbs", parse_jobs, "qstat printed malformed JSON"),
        ("malformed/empty.txt", "openpbs", parse_nodes, "pbsnodes printed nothing"),
        ("malformed/pbsnodes-x-truncated.xml", "torque", parse_nodes, "malformed XML"),
        ("pbspro-2024/pbsnodes-unknown-node.json", "openpbs", parse_nodes, "node pbs: Unknown"),
        ("openpbs-20/qstat-f-F-json.json", "torque", parse_jobs, "malformed XML"),
        ("torque-6/qstat-f-x.xml", "openpbs", parse_jobs, "malformed JSON"),
    ],
)
def test_malformed_output_is_one_clear_error(
    name: str, flavour: str, parser: object, message: str
) -> None:
    assert callable(parser)
    with pytest.raises(BatchError, match=message) as caught:
        parser(fixture(name), flavour)
    assert "\n" not in str(caught.value)


# -- commands ----------------------------------------------------------------------------


def test_command_builders() -> None:
    openpbs, torque = pbs.pbs_flavour("openpbs"), pbs.pbs_flavour("torque")
    assert openpbs.jobs_command() == ["qstat", "-f", "-F", "json"]
    assert torque.jobs_command() == ["qstat", "-f", "-x"]
    assert openpbs.nodes_command() == ["pbsnodes", "-a", "-F", "json"]
    assert torque.nodes_command() == ["pbsnodes", "-x"]
    assert openpbs.create_node_command("w1", 4) == [
        "qmgr", "-c", "create node w1 resources_available.ncpus=4",
    ]  # fmt: skip
    assert torque.create_node_command("w1", 4) == ["qmgr", "-c", "create node w1 np=4"]
    assert pbs.delete_node_command("w1") == ["qmgr", "-c", "delete node w1"]
    assert openpbs.offline_command("w1", "idle") == ["pbsnodes", "-o", "-C", "idle", "w1"]
    assert torque.offline_command("w1", "idle") == ["pbsnodes", "-o", "-N", "idle", "w1"]
    assert openpbs.online_command("w1") == ["pbsnodes", "-r", "w1"]
    assert torque.online_command("w1") == ["pbsnodes", "-c", "w1"]
    assert pbs.qalter_priority_command("5.srv", -3) == ["qalter", "-p", "-3", "5.srv"]
    assert pbs.qorder_command("5.srv", "2.srv") == ["qorder", "5.srv", "2.srv"]
    assert pbs.qrerun_command("5.srv") == ["qrerun", "5.srv"]
    assert openpbs.qsub_command("/tmp/s.sh", 4, 5400.5, 7, "short") == [
        "qsub", "-N", "elasticsite", "-l", "select=1:ncpus=4", "-l", "walltime=1:30:01",
        "-p", "7", "-q", "short", "/tmp/s.sh",
    ]  # fmt: skip
    assert torque.qsub_command("/tmp/s.sh", 2, 60, 0) == [
        "qsub", "-N", "elasticsite", "-l", "nodes=1:ppn=2", "-l", "walltime=0:01:00",
        "-p", "0", "/tmp/s.sh",
    ]  # fmt: skip
    with pytest.raises(BatchError, match="unknown PBS flavour 'lsf'; valid: openpbs, torque"):
        pbs.pbs_flavour("lsf")


def test_submit_writes_a_script_that_runs_the_command_and_removes_it() -> None:
    fake = FakePbs("openpbs")
    batch = PbsBatch("openpbs", runner=fake)
    job_id = batch.submit(JobRequest(["echo", "two words", "it's"], cores=2, walltime=90))
    assert job_id == "100.pbs-fake"
    assert fake.jobs[job_id].script == "#!/bin/sh\nexec echo 'two words' 'it'\"'\"'s'\n"
    script = fake.calls[-1][-1]
    assert not Path(script).exists()


def test_submit_refuses_priorities_pbs_cannot_hold() -> None:
    batch = PbsBatch("openpbs", runner=FakePbs())
    with pytest.raises(BatchError, match=r"within -1024\.\.1023, got 5000"):
        batch.submit(JobRequest(["true"], priority=5000))


def test_move_to_front_at_the_priority_ceiling_uses_qorder() -> None:
    fake = FakePbs("openpbs")
    batch = PbsBatch("openpbs", runner=fake)
    first = batch.submit(JobRequest(["true"], priority=1023))
    second = batch.submit(JobRequest(["true"], priority=1023))
    batch.move_to_front(second)
    assert [j.id for j in batch.snapshot().queued] == [second, first]
    assert ["qorder", second, first] in fake.calls


def test_unknown_job_and_node_errors_from_the_commands_are_translated() -> None:
    def refusing(argv: list[str]) -> CommandResult:
        output = (
            "qalter: Unknown Job Id 7.srv" if argv[0] == "qalter" else "pbsnodes: Unknown node  w9"
        )
        result = CommandResult(tuple(argv), 153, "", output, 0.0)
        raise CommandError(argv, f"exited with code 153: {output}", result)

    batch = PbsBatch("openpbs", runner=refusing)
    with pytest.raises(UnknownJob, match=r"7\.srv"):
        batch._act(["qalter", "-p", "1", "7.srv"], job_id="7.srv")
    with pytest.raises(UnknownNode, match="w9"):
        batch._act(["pbsnodes", "-o", "w9"], node="w9")
    with pytest.raises(CommandError):
        batch._act(["qalter", "-p", "1", "7.srv"])


def test_from_options_rejects_unknown_options_in_one_line() -> None:
    batch = PbsBatch.from_options(
        {"flavour": "torque", "queue": "cloud", "default_walltime": "7200"}, runner=FakePbs()
    )
    assert (batch.flavour, batch.queue, batch.default_walltime) == ("torque", "cloud", 7200.0)
    with pytest.raises(BatchError) as caught:
        PbsBatch.from_options({"flavor": "torque", "qeue": "x"}, runner=FakePbs())
    assert str(caught.value) == (
        "unknown PBS option(s) flavor, qeue; valid: flavour, queue, timezone, "
        "default_walltime, job_name, script_dir"
    )
    with pytest.raises(BatchError, match="unknown time zone 'Mars/Olympus'"):
        PbsBatch.from_options({"flavour": "openpbs", "timezone": "Mars/Olympus"})


def test_a_failing_command_surfaces_as_a_batch_error() -> None:
    batch = PbsBatch("openpbs", runner=lambda argv: pbs.run(["false"]))
    with pytest.raises(BatchError, match="`false` exited with code 1"):
        batch.snapshot()


def test_node_names_cannot_smuggle_qmgr_syntax() -> None:
    fake = FakePbs("openpbs")
    batch = PbsBatch("openpbs", runner=fake)
    with pytest.raises(BatchError, match="need a host name"):
        batch.add_node("w1; delete node w2", 4)
    assert not any(call[0] == "qmgr" for call in fake.calls)


def test_pbspro_2022_queued_job_and_held_job() -> None:
    (parsed,) = parse_jobs(fixture("pbspro-2022/qstat-f-F-json.json"), "openpbs")
    job = parsed.job  # the held job (H) is not waiting for cores: left out
    assert (job.id, job.state, job.cores, job.walltime) == (
        "359322.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov", JobState.QUEUED, 64, 3600.0,
    )  # fmt: skip
    assert job.submitted_at == 1670099138.0  # "Sat Dec  3 20:25:38 2022" UTC
    assert (job.user, job.node, job.attributes["partition"]) == ("christopherkang", None, "debug")


def test_a_jobs_vm_type_comes_from_its_node_request() -> None:
    from elasticsite.batch.pbs_output import _node_requests

    assert _node_requests({"nodes": "1:ppn=2:m1.small:ib"}) == ("m1.small,ib", "")
    assert _node_requests({"select": "1:ncpus=2:vm_type=m1.large"}) == ("", "m1.large")
    assert _node_requests({"nodes": "2", "walltime": "01:00:00"}) == ("", "")
