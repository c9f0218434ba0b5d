"""HTCondor: recorded ClassAds through the real classad2 parser, the slot-state table, submit."""

from __future__ import annotations

import logging
import shlex
from pathlib import Path
from typing import Any

import classad2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.batch.htcondor_fake import FakeCondorPool

from elasticsite.batch import htcondor, htcondor_output
from elasticsite.batch.base import BatchError, JobRequest, NodeState
from elasticsite.batch.htcondor import CondorBatch
from elasticsite.batch.htcondor_output import (
    job_attributes,
    parse_jobs,
    parse_long,
    parse_nodes,
    slot_state,
    submit_description,
)
from elasticsite.model import JobState

FIXTURES = Path(__file__).parent / "fixtures" / "htcondor"


def ads(name: str) -> list[Any]:
    return parse_long((FIXTURES / name).read_text(), name)


def ad(text: str) -> Any:
    return classad2.parseOne(text, classad2.ParserType.Old)


def test_recorded_7_4_running_job() -> None:
    (job,) = parse_jobs(ads("7.4/condor_q-long.txt"), default_walltime=900.0)
    assert (job.id, job.state, job.cores, job.walltime) == ("19.0", JobState.RUNNING, 1, 900.0)
    assert (job.submitted_at, job.started_at) == (1286911040.0, 1286911058.0)
    assert (job.node, job.user, job.priority) == ("fedora13vm0.localdomain", "fpierfed", 0)
    assert job.command.startswith("/hstdev/project/condor_bcw/bcw/python/processMef.py -i ")
    assert job.attributes == {}


def test_cloud_scheduler_vm_attributes_are_job_attributes() -> None:
    (job,) = parse_jobs(ads("cloud-scheduler/condor_q-long.txt"))
    assert job.attributes == {
        "vm_type": "vm.for.script",  # from Requirements = VMType =?= "vm.for.script" && ...
        "vm_image": "ami-dfasfds",
        "vm_location": "http://repository.tld/your.vm.img.gz",
        "vm_arch": "x86",
        "vm_cores": "1",
        "vm_memory": "512",
        "vm_storage": "20",
        "vm_network": "private",
    }


def test_vmtype_as_an_attribute_wins_over_requirements() -> None:
    job = ad('VMType = "vm-name"\nRequirements = VMType =?= "other"\nVMMem = "lots"')
    assert job_attributes(job) == {"vm_type": "vm-name", "vm_memory": "lots"}
    assert job_attributes(ad('AcctGroup = "physics"\nJobBatchName = "run 7"')) == {
        "account": "physics",
        "name": "run 7",
    }


def test_a_vm_attribute_with_a_control_character_is_left_out() -> None:
    job = {"VMType": "m1\nsmall", "VMAMI": "ami-1", "VMNetwork": "x\x1b[31m"}  # as decoded
    assert job_attributes(job) == {"vm_image": "ami-1"}


def test_a_requests_vm_attributes_go_into_the_submit_description() -> None:
    wanted = {"vm_type": "m1.small", "vm_memory": "2048", "account": "phys"}
    description = submit_description(JobRequest(["/bin/true"], attributes=wanted))
    assert description["+VMType"] == '"m1.small"' and description["+VMMem"] == "2048"
    assert description["accounting_group"] == "phys"
    with pytest.raises(BatchError, match="vm_memory must be a whole number"):
        submit_description(JobRequest(["/bin/true"], attributes={"vm_memory": "2048 || true"}))


def test_walltime_comes_from_allowed_execute_duration_or_max_wall_time_mins() -> None:
    base = "ClusterId = 4\nProcId = 1\nJobStatus = 1\nQDate = 10\nRequestCpus = 2 * 2\n"
    (allowed,) = parse_jobs([ad(base + "AllowedExecuteDuration = 7200\nMaxWallTimeMins = 5")])
    (minutes,) = parse_jobs([ad(base + "MaxWallTimeMins = 30")])
    assert (allowed.id, allowed.cores, allowed.walltime) == ("4.1", 4, 7200.0)
    assert (minutes.walltime, minutes.state) == (1800.0, JobState.QUEUED)


def test_held_and_finished_jobs_are_left_out() -> None:
    held = ad("ClusterId = 1\nProcId = 0\nJobStatus = 5")
    done = ad("ClusterId = 2\nProcId = 0\nJobStatus = 4")
    assert parse_jobs([held, done]) == []


def test_recorded_7_6_owner_slot_takes_no_job() -> None:
    (node,) = parse_nodes(ads("7.6/condor_status-long.txt"))
    assert (node.name, node.cores, node.state, node.running_jobs, node.free_cores) == (
        "turunmaa.cs.wisc.edu", 1, NodeState.DRAINED, 0, 0,
    )  # fmt: skip


def _slot(machine: str, name: str, kind: str, cpus: int, state: str, activity: str) -> Any:
    text = (
        f'Machine = "{machine}"\nName = "{name}@{machine}"\nSlotType = "{kind}"\nCpus = {cpus}\n'
        f'State = "{state}"\nActivity = "{activity}"\n'
    )
    if kind == "Partitionable":
        text += "TotalSlotCpus = 8\nPartitionableSlot = true\n"
    return ad(text)


def test_partitionable_slots_group_into_nodes() -> None:
    slots = [
        _slot("wn2", "slot1", "Partitionable", 8, "Unclaimed", "Idle"),
        _slot("wn1", "slot1", "Partitionable", 3, "Unclaimed", "Idle"),
        _slot("wn1", "slot1_1", "Dynamic", 4, "Claimed", "Busy"),
        _slot("wn1", "slot1_2", "Dynamic", 1, "Claimed", "Busy"),
        _slot("wn3", "slot1", "Static", 2, "Claimed", "Retiring"),
        _slot("wn3", "slot2", "Static", 2, "Unclaimed", "Idle"),
    ]
    nodes = parse_nodes(slots)
    assert [(n.name, n.cores, n.state, n.running_jobs, n.free_cores) for n in nodes] == [
        ("wn1", 8, NodeState.BUSY, 2, 3),
        ("wn2", 8, NodeState.IDLE, 0, 8),
        ("wn3", 4, NodeState.DRAINING, 1, 0),
    ]


@pytest.mark.parametrize(
    ("state", "activity", "expected"),
    [
        ("Unclaimed", "Idle", NodeState.IDLE),
        ("Unclaimed", "Benchmarking", NodeState.IDLE),
        ("Backfill", "Busy", NodeState.IDLE),
        ("Matched", "Idle", NodeState.BUSY),
        ("Claimed", "Busy", NodeState.BUSY),
        ("Claimed", "Idle", NodeState.BUSY),
        ("Claimed", "Suspended", NodeState.BUSY),
        ("Claimed", "Retiring", NodeState.DRAINING),
        ("Preempting", "Vacating", NodeState.DRAINING),
        ("Preempting", "Killing", NodeState.DRAINING),
        ("Drained", "Retiring", NodeState.DRAINING),
        ("Drained", "Idle", NodeState.DRAINED),
        ("Owner", "Idle", NodeState.DRAINED),
    ],
)
def test_slot_state_table(state: str, activity: str, expected: NodeState) -> None:
    assert slot_state(state, activity) is expected


def test_an_unknown_slot_state_is_unknown_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="elasticsite.batch.htcondor"):
        odd = [_slot("wn9", "slot1", "Static", 1, "Levitating", "Idle")] * 2
        (node,) = parse_nodes(odd)
        parse_nodes(odd)
    assert node.state is NodeState.UNKNOWN
    assert [r.getMessage() for r in caplog.records] == [
        "unknown HTCondor slot state Levitating/Idle: reported as unknown"
    ]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("malformed/condor_q-long-truncated.txt", "ad 1 has a line that is no attribute: 'Cmd'"),
        ("malformed/condor_q-long-garbage.txt", "ad 1 is malformed near 'jobstatus'"),
    ],
)
def test_malformed_ads_are_one_clear_error(name: str, message: str) -> None:
    with pytest.raises(BatchError, match=message) as caught:
        ads(name)
    assert "\n" not in str(caught.value)


def test_an_empty_listing_is_no_ad() -> None:
    assert ads("malformed/empty.txt") == []


def test_ads_that_are_not_queue_or_pool_output_are_refused() -> None:
    with pytest.raises(BatchError, match="without ClusterId"):
        parse_jobs([ad("JobStatus = 1")])
    with pytest.raises(BatchError, match="without Machine"):
        parse_nodes([ad('Name = "slot1@x"')])


def test_submit_description() -> None:
    request = JobRequest(["/bin/echo", "two words", "it's", 'say "hi"'], cores=3, walltime=90.2,
                         priority=-2)  # fmt: skip
    assert submit_description(request, {"+VMType": '"small"'}) == {
        "universe": "vanilla",
        "executable": "/bin/echo",
        "arguments": "\"'two words' 'it''s' 'say \"\"hi\"\"'\"",
        "request_cpus": "3",
        "allowed_execute_duration": "91",
        "priority": "-2",
        "+ElasticsiteCommand": "\"/bin/echo 'two words' 'it'\\\"'\\\"'s' 'say \\\"hi\\\"'\"",
        "+VMType": '"small"',
    }


TRICKY = [
    "back\\slash",
    'say "hi"',
    '\\"',
    '\\\\"',
    "ends with \\",
    'ends with \\"',
    "tab\there\x01\x7f",
    "é ü ∑",
    "it's",
    "",
]


def old_classad(literal: str) -> Any:
    """What condor_submit makes of a ``+Attribute`` value: an old-ClassAd expression."""
    return classad2.parseOne(f"A = {literal}", classad2.ParserType.Old)["A"]


@pytest.mark.parametrize("value", TRICKY, ids=repr)
def test_submit_strings_read_back_exactly(value: str) -> None:
    assert old_classad(htcondor_output.submit_string(value)) == value


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x00")))
def test_any_text_without_a_line_break_reads_back_exactly(value: str) -> None:
    assert old_classad(htcondor_output.submit_string(value)) == value


def test_the_command_attribute_holds_the_exact_command() -> None:
    argv = ["/bin/echo", *TRICKY]
    description = submit_description(JobRequest(argv, cores=1, walltime=60))
    assert old_classad(description["+ElasticsiteCommand"]) == shlex.join(argv)
    bindings, _ = htcondor_output.load_bindings()
    submit = bindings.Submit(description)
    assert sorted(submit.keys()) == sorted(k.replace("+", "MY.") for k in description)


@pytest.mark.parametrize("where", ["executable", "argument", "attribute"])
@pytest.mark.parametrize("brk", ["\n", "\r", "\x00"], ids=["LF", "CR", "NUL"])
def test_a_line_break_never_reaches_the_submit_description(where: str, brk: str) -> None:
    # A line of its own would change the universe, the executable or add attributes.
    evil = f"x{brk}universe = local{brk}+Evil = true{brk}executable = /bin/sh"
    argv = [evil, "a"] if where == "executable" else ["/bin/echo", evil]
    extra = {"+VMType": f'"{evil}"'} if where == "attribute" else None
    if where == "attribute":
        argv = ["/bin/echo", "a"]
    pool = FakeCondorPool()
    batch = CondorBatch(pool, submit_attributes=extra)
    with pytest.raises(BatchError, match="line break or NUL"):
        batch.submit(JobRequest(argv, cores=1, walltime=60))
    assert not [c for c in pool.calls if c[0] == "submit"]


def test_the_submit_description_is_accepted_by_the_real_submit_object() -> None:
    bindings, _ = htcondor_output.load_bindings()
    description = submit_description(JobRequest(["/bin/echo", "a b"], cores=2, walltime=60))
    submit = bindings.Submit(description)
    assert submit["request_cpus"] == "2"
    assert submit["arguments"] == "\"'a b'\""


def test_adapter_over_the_fake_pool() -> None:
    pool = FakeCondorPool()
    batch = CondorBatch(pool, drain_mode="quick")
    job_id = batch.submit(JobRequest(["/bin/sleep", "60"], cores=2, walltime=600))
    assert job_id == "1.0"
    batch.add_node("wn1", 4)
    pool.startd_joins("wn1", 4)
    view = batch.snapshot()
    assert [(j.id, j.node, j.cores, j.walltime) for j in view.running] == [("1.0", "wn1", 2, 600.0)]
    assert view.nodes[0].registered_at == pool.now
    batch.drain("wn1", "cloud worker going")
    assert ("drain", "wn1", "quick") in pool.calls
    node = batch.snapshot().nodes[0]
    assert (node.state, node.reason) == (NodeState.DRAINING, "cloud worker going")
    with pytest.raises(BatchError, match="HTCondor has no partitions"):
        batch.redirect(job_id, "cloud")


def test_binding_failures_become_batch_errors() -> None:
    class Broken(FakeCondorPool):
        def jobs(self, constraint: str) -> list[Any]:
            raise RuntimeError("Unable to locate local daemon")

    with pytest.raises(BatchError, match="HTCondor job query failed: Unable to locate local"):
        CondorBatch(Broken()).snapshot()


def test_the_real_bindings_without_a_pool_fail_with_a_batch_error() -> None:
    batch = CondorBatch(htcondor.BindingsPool())
    with pytest.raises(BatchError, match="HTCondor job query failed"):
        batch.snapshot()


def test_from_options_rejects_unknown_options_in_one_line() -> None:
    with pytest.raises(BatchError) as caught:
        CondorBatch.from_options({"drain": "quick"})
    assert str(caught.value) == (
        "unknown HTCondor option(s) drain; valid: collector, schedd, drain_mode, "
        "default_walltime, submit_attributes"
    )
    with pytest.raises(BatchError, match="unknown drain_mode 'slow'"):
        CondorBatch.from_options({"drain_mode": "slow"})
    with pytest.raises(BatchError, match="default_walltime must be seconds, got 'long'"):
        CondorBatch.from_options({"default_walltime": "long"})
    with pytest.raises(BatchError, match="submit_attributes must map submit commands"):
        CondorBatch.from_options({"submit_attributes": {"+VMMem": 512}})
    batch = CondorBatch.from_options({"drain_mode": "fast", "collector": "cm.example.org"})
    assert batch.drain_mode == "fast"


def test_missing_bindings_are_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_module(name: str) -> Any:
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(htcondor_output.importlib, "import_module", no_module)
    with pytest.raises(BatchError) as caught:
        htcondor.BindingsPool()
    assert str(caught.value) == (
        "the HTCondor adapter needs the HTCondor Python bindings: "
        "pip install 'elasticsite[htcondor]'"
    )
