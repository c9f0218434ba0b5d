"""The Slurm adapter's parsing, on real recorded output of Slurm 22.05 to 25.11.

The 22.05 files were recorded on this project's test Slurm (scripts/slurm/); the
later ones come from slurmrestd (see fixtures/slurm/README.md). Every file must
parse, and the values a manager acts on must be exactly what Slurm said.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from elasticsite.batch.base import BatchError, JobRequest, NodeState, UnknownJob, UnknownNode
from elasticsite.batch.command import CommandError, CommandResult
from elasticsite.batch.slurm import SlurmBatch
from elasticsite.batch.slurm_output import (
    expand_hostlist,
    jobs_per_node,
    node_state,
    parse_nodes,
    parse_squeue,
    parse_squeue_format,
)
from elasticsite.model import Job, JobState

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
JOB_FILES = sorted([*FIXTURES.glob("*/squeue-*.json"), *FIXTURES.glob("*/slurmrestd-jobs.json")])
NODE_FILES = sorted([*FIXTURES.glob("*/sinfo-*.json"), *FIXTURES.glob("*/slurmrestd-nodes.json")])


def text(relative: str) -> str:
    return (FIXTURES / relative).read_text()


def by_id(*lists: list[Job]) -> dict[str, Mapping[str, str]]:
    return {j.id: j.attributes for jobs in lists for j in jobs}


def test_fixtures_cover_every_recorded_release() -> None:
    releases = {p.parent.name for p in JOB_FILES} & {p.parent.name for p in NODE_FILES}
    assert releases >= {"22.05", "23.11", "24.05", "24.11", "25.11"}


@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_recorded_job_list_parses(path: Path) -> None:
    queued, running = parse_squeue(path.read_text(), include_held=True)
    raw = json.loads(path.read_text())["jobs"]
    for job in [*queued, *running]:
        assert job.cores >= 1 and job.walltime > 0 and job.submitted_at > 0
        assert job.attributes["partition"] and job.attributes["slurm.state"]
    for job in running:
        assert job.node, f"running job {job.id} without a node"
        assert job.started_at is not None
    priorities = [j.priority for j in queued]
    assert priorities == sorted(priorities, reverse=True)
    states = {str(j["job_state"]).strip("[]'") for j in raw}
    assert bool(running) == any("RUNNING" in st or "CONFIGURING" in st for st in states)


@pytest.mark.parametrize("path", NODE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_recorded_node_list_parses_without_unknown_states(path: Path) -> None:
    nodes = parse_nodes(path.read_text())
    assert nodes
    for node in nodes:
        assert node.state is not NodeState.UNKNOWN, node
        assert node.cores >= 1
        assert 0 <= node.free_cores <= node.cores


# ---- Slurm 22.05, recorded here ------------------------------------------------------


def test_22_05_running_and_pending_jobs_exact() -> None:
    queued, running = parse_squeue(text("22.05/squeue-mixed-elastic.json"), include_held=True)
    info = by_id(queued, running)
    queued = [j for j in queued if "held" not in j.attributes]
    assert [j.id for j in running] == ["1", "3", "5"]
    one = running[0]
    assert (one.cores, one.walltime, one.node, one.user, one.state) == (
        1, 600.0, "localhost", "root", JobState.RUNNING
    )  # fmt: skip
    assert (one.submitted_at, one.started_at, one.priority) == (1795356597, 1795356602, 4294901759)
    assert [(j.id, j.cores, j.walltime) for j in queued] == [("2", 2, 300.0)]  # 4 is held
    assert (info["5"]["partition"], info["5"]["nodes"]) == ("elastic", "dyn1")
    assert (info["4"]["held"], info["4"]["reason"]) == ("true", "JobHeldUser")
    assert "held" not in info["2"]
    assert running[2].walltime == 3600.0  # no --time, partition unlimited: the default


def test_22_05_held_jobs_are_queued_only_when_asked() -> None:
    queued, _ = parse_squeue(text("22.05/squeue-mixed-elastic.json"), include_held=True)
    assert [j.id for j in queued] == ["2", "4"]
    assert queued[1].priority == 0 and queued[1].walltime == 3600.0


def test_22_05_queue_follows_priority_after_scontrol_top() -> None:
    # job 3 was submitted after job 2 and moved to the top: it comes first
    queued, running = parse_squeue(text("22.05/squeue-running-pending.json"))
    assert [j.id for j in queued] == ["3", "2"]
    assert [j.id for j in running] == ["1"]


def test_22_05_pending_array_counts_each_task_and_requeued_job_waits() -> None:
    queued, running = parse_squeue(text("22.05/squeue-array-requeued.json"))
    info = by_id(queued, running)
    # job 1 was requeued: pending again, last (Slurm gave it priority 5 and a BeginTime)
    assert [j.id for j in queued] == ["2", "7_0", "7_1", "7_2", "7_3", "7_4", "1"]
    assert "1" not in {j.id for j in running}
    assert (info["7_3"]["partition"], info["7_3"]["slurm.state"]) == ("debug", "PENDING")


def test_22_05_configuring_job_waits_for_its_powering_up_cloud_node() -> None:
    queued, running = parse_squeue(text("22.05/squeue-configuring.json"))
    info = by_id(queued, running)
    assert "6" not in {j.id for j in running}
    waiting = next(j for j in queued if j.id == "6")
    assert (waiting.state, waiting.node, waiting.started_at) == (JobState.QUEUED, None, None)
    assert (info["6"]["slurm.state"], info["6"]["nodes"]) == ("CONFIGURING", "cloud1")


def test_22_05_nodes_exact() -> None:
    _, running = parse_squeue(text("22.05/squeue-mixed-elastic.json"))
    nodes = {
        n.name: n
        for n in parse_nodes(text("22.05/sinfo-mixed-elastic.json"), jobs_per_node(running))
    }
    assert {n: v.state for n, v in nodes.items()} == {
        "cloud1": NodeState.DOWN,  # CLOUD+POWERED_DOWN
        "cloud2": NodeState.DOWN,
        "cloud3": NodeState.DOWN,
        "cloud4": NodeState.DOWN,  # down, reason "broken vm"
        "localhost": NodeState.BUSY,
        "dyn1": NodeState.DRAINING,  # allocated + DRAIN
        "dyn2": NodeState.DOWN,  # created state=cloud, no slurmd yet
        "dyn3": NodeState.DRAINED,  # DRAIN + POWERED_DOWN: nothing runs, safe to remove
    }
    local = nodes["localhost"]
    assert (local.cores, local.free_cores, local.running_jobs) == (2, 0, 2)
    assert local.registered_at == 1795356587
    assert (nodes["dyn1"].running_jobs, nodes["dyn1"].reason) == (1, "scale in")
    assert nodes["dyn1"].registered_at == 1795356605
    assert (nodes["dyn2"].cores, nodes["dyn2"].registered_at) == (4, None)
    assert nodes["cloud4"].reason == "broken vm"


def test_22_05_idle_and_draining() -> None:
    idle = {n.name: n for n in parse_nodes(text("22.05/sinfo-idle.json"))}
    assert (idle["localhost"].state, idle["localhost"].free_cores) == (NodeState.IDLE, 2)
    draining = {n.name: n for n in parse_nodes(text("22.05/sinfo-draining-dynamic.json"))}
    assert draining["localhost"].state is NodeState.DRAINING
    assert draining["localhost"].reason == "maintenance test"


def test_22_05_formatted_squeue_matches_json_of_the_same_instant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TZ", "UTC")  # squeue printed local times on a UTC machine
    time.tzset()
    try:
        fast = parse_squeue_format(text("22.05/squeue-format.txt"), include_held=True)
    finally:
        monkeypatch.undo()
        time.tzset()
    slow = parse_squeue(text("22.05/squeue-format-same-instant.json"), include_held=True)
    assert fast[0] == slow[0] and fast[1] == slow[1]
    assert [j.id for j in fast[0]] == ["20043", "20045", "20042_0", "20042_1", "20042_2", "20042_3"]
    wide, running = fast[0][0], fast[1][0]
    assert (wide.cores, wide.walltime, wide.priority) == (2, 26 * 3600 + 4 * 60, 4294881721)
    assert (running.id, running.node, running.walltime) == ("20044", "localhost", 1800.0)
    info = by_id(*fast)
    assert (info["20044"]["partition"], info["20042_1"]["name"]) == ("urgent", "held|array")
    assert info["20044"] == by_id(*slow)["20044"]
    held_out = parse_squeue_format(text("22.05/squeue-format.txt"))[0]
    assert [j.id for j in held_out] == ["20043", "20045"]


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("20043\x1fPENDING\x1f2", "has 3 fields"),
        ("\x1f".join(["x", "PENDING", *["1"] * 14]), "not a job line"),
        ("squeue: error: Invalid user: nobody", "has 1 fields"),
    ],
)
def test_malformed_formatted_squeue_is_one_clear_error(output: str, message: str) -> None:
    with pytest.raises(BatchError, match=message):
        parse_squeue_format(output)


# ---- later releases (slurmrestd recordings) --------------------------------------------


def test_24_11_numbers_as_objects_and_states_as_lists() -> None:
    queued, running = parse_squeue(text("24.11/slurmrestd-jobs.json"))
    info = by_id(queued, running)
    assert [(j.id, j.cores, j.walltime) for j in queued] == [("6369", 64, 120.0), ("6370", 4, 60.0)]
    assert [j.id for j in running] == ["6360", "6363", "6364", "6365", "6366", "6367", "6368"]
    wide = next(j for j in running if j.id == "6365")
    assert (wide.cores, wide.user, wide.priority) == (128, "jbeck", 545)
    assert (info["6365"]["nodes"], info["6365"]["qos"]) == ("cn1,cn2,cn3", "normal")
    counts = jobs_per_node(running)
    assert (counts["cn1"], counts["cn3"]) == (3, 4)
    nodes = {n.name: n.state for n in parse_nodes(text("24.11/slurmrestd-nodes.json"))}
    assert nodes == {
        "cn1": NodeState.IDLE,
        "cn2": NodeState.IDLE,
        "cn3": NodeState.DOWN,
        "cn4": NodeState.DRAINED,
        "ia1": NodeState.BUSY,  # IDLE+COMPLETING: a job is still finishing there
        "ia2": NodeState.IDLE,
    }


def test_23_11_and_25_11_node_states() -> None:
    old = {
        n.name: (n.state, n.free_cores) for n in parse_nodes(text("23.11/slurmrestd-nodes.json"))
    }
    assert old["cn1"] == (NodeState.DRAINED, 0)
    assert old["cn2"] == (NodeState.BUSY, 19)  # MIXED
    assert old["cn4"] == (NodeState.DOWN, 0)
    new = {n.name: n for n in parse_nodes(text("25.11/slurmrestd-nodes.json"))}
    assert new["cn1"].state is NodeState.DRAINED and new["cn1"].reason == "ECC memory error"
    assert new["cn1"].registered_at == 1763120974


# ---- the state table ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "alloc", "expected"),
    [
        (["idle"], 0, NodeState.IDLE),
        (["IDLE", "CLOUD"], 0, NodeState.IDLE),
        (["allocated"], 4, NodeState.BUSY),
        (["MIXED"], 2, NodeState.BUSY),
        (["completing"], 0, NodeState.BUSY),
        (["IDLE", "COMPLETING"], 0, NodeState.BUSY),
        (["MIXED", "DRAIN"], 2, NodeState.DRAINING),
        (["IDLE", "DRAIN"], 0, NodeState.DRAINED),
        (["drained"], 0, NodeState.DRAINED),
        (["draining"], 1, NodeState.DRAINING),
        (["IDLE", "FAIL"], 0, NodeState.DRAINED),
        (["DOWN"], 0, NodeState.DOWN),
        (["DOWN", "DRAIN"], 0, NodeState.DRAINED),
        (["FUTURE"], 0, NodeState.DOWN),
        (["UNKNOWN"], 0, NodeState.DOWN),
        (["IDLE", "NOT_RESPONDING"], 0, NodeState.DOWN),
        (["IDLE", "CLOUD", "POWERED_DOWN"], 0, NodeState.DOWN),
        (["IDLE", "POWERING_UP"], 0, NodeState.DOWN),
        (["IDLE", "POWERING_DOWN"], 0, NodeState.DOWN),
        (["ALLOCATED", "CLOUD", "POWERING_UP"], 1, NodeState.DOWN),
        (["IDLE", "DYNAMIC_FUTURE"], 0, NodeState.DOWN),
        (["IDLE", "MAINTENANCE", "RESERVED"], 0, NodeState.IDLE),
        (["ALLOCATED", "REBOOT_REQUESTED"], 1, NodeState.BUSY),
        (["IDLE", "REBOOT_ISSUED"], 0, NodeState.DOWN),
        (["idle"], 0, NodeState.IDLE),
    ],
)
def test_state_table(tokens: list[str], alloc: int, expected: NodeState) -> None:
    assert node_state(tokens, alloc) is expected


def test_unknown_state_is_unknown_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="elasticsite.batch.slurm"):
        assert node_state(["HIBERNATING_ZZ"]) is NodeState.UNKNOWN
        assert node_state(["HIBERNATING_ZZ"]) is NodeState.UNKNOWN
        assert node_state(["IDLE", "SPARKLING_ZZ"]) is NodeState.IDLE
        assert node_state(["IDLE", "SPARKLING_ZZ"]) is NodeState.IDLE
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("HIBERNATING_ZZ" in w for w in warnings) == 1
    assert sum("SPARKLING_ZZ" in w for w in warnings) == 1


# ---- bad output -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("", "not JSON"),
        ("squeue: error: slurm_load_jobs error: Unable to contact", "not JSON"),
        ('{"meta": {}', "not JSON"),
        ("[]", "expected a JSON object"),
        ('{"meta": {}}', "no 'jobs' list"),
        ('{"jobs": [{"job_state": "RUNNING"}]}', "unexpected job record"),
        ('{"jobs": [], "errors": [{"error": "Unable to contact slurm controller"}]}', "contact"),
    ],
)
def test_malformed_job_output_is_one_clear_error(output: str, message: str) -> None:
    with pytest.raises(BatchError, match=message):
        parse_squeue(output)


@pytest.mark.parametrize(
    ("output", "message"),
    [("", "not JSON"), ('{"sinfo": []}', "no 'nodes' list"), ('{"nodes": [{}]}', "unexpected")],
)
def test_malformed_node_output_is_one_clear_error(output: str, message: str) -> None:
    with pytest.raises(BatchError, match=message):
        parse_nodes(output)


def test_hostlists() -> None:
    assert expand_hostlist("cn[1-3]") == ["cn1", "cn2", "cn3"]
    assert expand_hostlist("n[08-10,12],gpu1") == ["n08", "n09", "n10", "n12", "gpu1"]
    assert expand_hostlist("r[1-2]-n[1-2]") == ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]
    assert expand_hostlist("") == []


# ---- the adapter against replayed commands ---------------------------------------------


class Replay:
    """Answers each command with recorded output (or a recorded Slurm error)."""

    def __init__(self, answers: dict[str, str | tuple[int, str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(tuple(argv))
        for prefix, answer in self.answers.items():
            if " ".join(argv).startswith(prefix):
                if isinstance(answer, tuple):
                    code, err = answer
                    result = CommandResult(tuple(argv), code, "", err, 0.01)
                    raise CommandError(argv, f"exited with code {code}: {err}", result)
                return CommandResult(tuple(argv), 0, answer, "", 0.01)
        raise AssertionError(f"unexpected command {argv}")


def test_snapshot_is_two_commands() -> None:
    replay = Replay(
        {
            "squeue --json": text("22.05/squeue-mixed-elastic.json"),
            "sinfo --json": text("22.05/sinfo-mixed-elastic.json"),
        }
    )
    batch = SlurmBatch(runner=replay, clock=lambda: 42.0, jobs_from="json")
    view = batch.snapshot()
    assert replay.calls == [("squeue", "--json"), ("sinfo", "--json")]
    assert view.taken_at == 42.0
    assert [j.id for j in view.running] == ["1", "3", "5"]
    assert next(j for j in view.running if j.id == "5").attributes["partition"] == "elastic"
    assert {n.name for n in view.nodes} >= {"localhost", "dyn1"}


def test_demand_partitions_keep_only_jobs_cloud_workers_can_serve() -> None:
    replay = Replay(
        {
            "squeue --json": text("22.05/squeue-mixed-elastic.json"),
            "sinfo --json": text("22.05/sinfo-mixed-elastic.json"),
        }
    )
    batch = SlurmBatch(runner=replay, jobs_from="json", demand_partitions=["elastic"])
    view = batch.snapshot()
    assert [j.id for j in view.running] == ["5"] and view.queued == []
    # Node load still counts every job, whatever its partition.
    everyone = SlurmBatch(runner=replay, jobs_from="json").snapshot()
    assert [(n.name, n.running_jobs) for n in view.nodes] == [
        (n.name, n.running_jobs) for n in everyone.nodes
    ]
    with pytest.raises(BatchError, match="demand_partitions"):
        SlurmBatch.from_options({"demand_partitions": "elastic"})


def test_slurm_errors_become_unknown_job_and_node() -> None:
    replay = Replay(
        {
            "scontrol update nodename=": (1, "slurm_update error: Invalid node name specified"),
            "scontrol update jobid=": (1, "Invalid job id specified for job 999"),
            "scontrol top": (1, "Invalid job id specified for job 999"),
            "scontrol requeue": (1, "Invalid job id specified for job 999"),
            "scontrol delete": (1, "delete_node nodename=nosuch: Invalid node name specified"),
            "scontrol show node": (1, "Node nosuch not found"),
        }
    )
    batch = SlurmBatch(runner=replay)
    with pytest.raises(UnknownNode, match="nosuch"):
        batch.drain("nosuch", "test")
    with pytest.raises(UnknownNode):
        batch.undrain("nosuch")
    with pytest.raises(UnknownJob, match="999"):
        batch.set_priority("999", 10)
    with pytest.raises(UnknownJob):
        batch.move_to_front("999")
    with pytest.raises(UnknownJob):
        batch.preempt("999")
    with pytest.raises(UnknownJob):
        batch.preempt("not-a-job")
    batch.remove_node("nosuch")  # idempotent: an unknown node is already removed


def test_submit_builds_one_sbatch() -> None:
    replay = Replay({"sbatch": "123\n"})
    batch = SlurmBatch(runner=replay, partition="elastic")
    job = batch.submit(JobRequest(["python3", "-c", "print('hi there')"], cores=3, walltime=90))
    assert job == "123"
    argv = replay.calls[0]
    assert "--cpus-per-task=3" in argv and "--time=2" in argv and "--partition=elastic" in argv
    assert argv[-2:] == ("--wrap", "python3 -c 'print('\"'\"'hi there'\"'\"')'")
    with pytest.raises(BatchError, match="cores"):
        batch.submit(JobRequest(["true"], cores=0))


def test_submit_passes_attributes_as_sbatch_flags_and_checks_them() -> None:
    replay = Replay({"sbatch": "124\n"})
    batch = SlurmBatch(runner=replay, partition="debug")
    attrs = {"partition": "cloud", "qos": "high", "account": "phys", "features": "ssd&avx2"}
    batch.submit(JobRequest(["true"], attributes=attrs))
    argv = replay.calls[0]
    assert "--partition=cloud" in argv and "--partition=debug" not in argv
    assert {"--qos=high", "--account=phys", "--constraint=ssd&avx2"} <= set(argv)
    with pytest.raises(BatchError, match="not a valid Slurm qos"):
        batch.submit(JobRequest(["true"], attributes={"qos": "--uid=0"}))
    assert len(replay.calls) == 1


def test_redirect_updates_the_partition_of_a_pending_job_only() -> None:
    replay = Replay(
        {
            "scontrol update jobid=7 partition=cloud": "",
            "scontrol update jobid=8 partition=cloud": (1, "Job is no longer pending execution"),
        }
    )
    batch = SlurmBatch(runner=replay)
    batch.redirect("7", "cloud")
    assert replay.calls[-1] == ("scontrol", "update", "jobid=7", "partition=cloud")
    with pytest.raises(UnknownJob, match="no longer queued"):
        batch.redirect("8", "cloud")
    with pytest.raises(BatchError, match="not a valid partition"):
        batch.redirect("7", "cloud debug")


def test_from_options_rejects_unknown_names() -> None:
    batch = SlurmBatch.from_options({"partition": "elastic", "node_feature": "burst"})
    assert (batch.partition, batch.node_feature) == ("elastic", "burst")
    with pytest.raises(BatchError, match=r"unknown slurm option\(s\) colour, partiton") as err:
        SlurmBatch.from_options({"partiton": "x", "colour": "blue"})
    assert "\n" not in str(err.value)
    with pytest.raises(BatchError, match="node_feature"):
        SlurmBatch.from_options({"node_feature": "a b"})
    with pytest.raises(BatchError, match="jobs_from"):
        SlurmBatch.from_options({"jobs_from": "xml"})


def test_default_snapshot_reads_the_formatted_squeue() -> None:
    replay = Replay(
        {
            "squeue --noheader --array": text("22.05/squeue-format.txt"),
            "sinfo --json": text("22.05/sinfo-idle.json"),
        }
    )
    view = SlurmBatch(runner=replay).snapshot()
    assert replay.calls[0][:3] == ("squeue", "--noheader", "--array")
    assert [j.id for j in view.queued] == ["20043", "20045"]
    assert [j.id for j in view.running] == ["20044"]


def test_newer_slurm_nodes_come_from_scontrol_when_sinfo_lists_partitions() -> None:
    # From 23.02 ``sinfo --json`` answers with a "sinfo" list of partition/state groups
    # (shape only here: no recorded copy); the adapter then asks scontrol, once.
    grouped = '{"sinfo": [{"nodes": {"nodes": ["cn1"]}}], "errors": []}'
    replay = Replay(
        {
            "squeue --noheader": "",
            "sinfo --json": grouped,
            "scontrol show nodes --json": text("24.11/slurmrestd-nodes.json"),
        }
    )
    batch = SlurmBatch(runner=replay)
    first = batch.snapshot()
    second = batch.snapshot()
    assert [c[0] for c in replay.calls] == ["squeue", "sinfo", "scontrol", "squeue", "scontrol"]
    assert {n.name for n in first.nodes} == {n.name for n in second.nodes} >= {"cn1", "ia2"}
