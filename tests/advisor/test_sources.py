"""Reading history: CSV files, real ``sacct --json`` output and real SWF traces.

The sacct fixtures in ``data/`` keep the exact shape of output recorded on production
clusters and published in the tests of mila-iqia/SARC
(``tests/functional/jobs/sacct_outputs/slurm_22_5_9.json``, Slurm 22.05.9 on Narval,
data parser v0.0.38; ``slurm_23_11_5.json``, Slurm 23.11.5 on Mila, v0.0.40): the
recorded job is kept as it is, and more jobs were added by copying it and changing only
ids, names, states, node counts and times (a pending job, one cancelled in the queue,
one held before it became eligible, one that timed out, one under an ``urgent`` QOS).

``RICC-2010-2-first3000.swf.gz`` is the first 3,000 jobs of the RIKEN Integrated
Cluster of Clusters trace of the Parallel Workloads Archive, its header kept.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from elasticsite.advisor.sources import (
    SourceError,
    detect_format,
    read_csv,
    read_history,
    read_sacct,
    read_swf_waits,
)
from elasticsite.history.observations import Observation

DATA = Path(__file__).parent / "data"
RICC = DATA / "RICC-2010-2-first3000.swf.gz"
SMALL_SWF = Path(__file__).parents[1] / "sim" / "data" / "small.swf"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# -- CSV -----------------------------------------------------------------------------


def test_a_csv_gives_one_observation_per_row(tmp_path: Path) -> None:
    path = write(
        tmp_path / "drills.csv",
        "# urgent drills, spring\n"
        "phase,resource,policy,nodes,value,at,app,trial\n"
        "\n"
        "allocation,hpc,next_to_run,4,120.5,1700000000,,t1\n"
        "execution,hpc,next_to_run,4,3600,2023-11-14T23:15:20,flash,t1\n"
        "input,hpc,,,42,2023-11-14T22:13:20+00:00,,\n",
    )
    trial: dict[str, Any] = {
        "resource": "hpc",
        "policy": "next_to_run",
        "nodes": 4,
        "source": "csv",
        "trial": "t1",
    }  # what the first two rows share
    assert list(read_csv(path)) == [
        Observation(phase="allocation", value=120.5, at=1700000000, **trial),
        Observation(phase="execution", value=3600, at=1700003720, app="flash", **trial),
        Observation(phase="input", resource="hpc", value=42, at=1700000000, source="csv"),
    ]


H = "phase,resource,value,at\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "h.csv: empty; expected a header row (phase, resource, value, at, policy"),
        ("phase,resource,value\n", "h.csv:1: header: missing column 'at'; the columns are"),
        ("phase,resource,value,at,color\n", "h.csv:1: header: unknown column 'color'"),
        ("phase,resource,value,at,at\n", "h.csv:1: header: column 'at' named twice"),
        (H + "\n# c\nallocation,hpc,soon,1\n", "h.csv:4: value: not a number: 'soon'"),
        (H + "allocation,hpc,1,May\n", "h.csv:2: at: not epoch seconds or an ISO 8601 time: 'May'"),
        (H + "allocation,hpc,inf,1\n", "h.csv:2: value: not a finite number: 'inf'"),
        (H[:-1] + ",nodes\nallocation,hpc,1,1,4.5\n", "h.csv:2: nodes: not a whole number: '4.5'"),
        (H + "allocation,hpc,1\n", "h.csv:2: 3 fields, the header has 4"),
        (H + "queue,hpc,1,1\n", "h.csv:2: phase: must be one of input, allocation"),
        (H + "allocation,hpc,-4,1\n", "h.csv:2: value: must be a finite number of seconds >= 0"),
    ],
)
def test_a_bad_csv_is_one_error_naming_file_and_line(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path / "h.csv", text)
    with pytest.raises(SourceError) as info:
        list(read_csv(path))
    assert str(info.value).startswith(f"{tmp_path}/{message}")
    assert "\n" not in str(info.value)


def test_a_missing_file_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=r"nope\.csv: cannot read \(No such file"):
        list(read_csv(tmp_path / "nope.csv"))


# -- sacct --json ----------------------------------------------------------------------


def test_sacct_22_05_gives_queue_waits_of_started_jobs_and_run_times_of_completed_ones() -> None:
    got = list(read_sacct(DATA / "sacct-22.05.json"))
    assert [(o.phase, o.value, o.nodes, o.app, o.ref) for o in got] == [
        ("allocation", 1693740641 - 1692160814, 4, "", "narval:20247445"),  # FAILED: no run
        ("allocation", 600.0, 2, "", "narval:20251001"),
        ("execution", 3600.0, 2, "flash-sim", "narval:20251001"),
        ("allocation", 60.0, 2, "", "narval:20251002"),  # held: waits from eligible
        ("execution", 600.0, 2, "flash-sim", "narval:20251002"),
    ]  # the pending job and the one cancelled in the queue never waited to the end
    assert {o.resource for o in got} == {"gpubase_bynode_b4"}
    assert {o.source for o in got} == {"sacct"} and {o.policy for o in got} == {"default"}
    assert got[1].at == 1693900600 and got[2].at == 1693904200


def test_sacct_23_11_numbers_and_states_as_that_release_writes_them() -> None:
    got = list(read_sacct(DATA / "sacct-23.11.json", qos_policies={"urgent": "next_to_run"}))
    assert [(o.phase, o.policy, o.value, o.ref) for o in got] == [
        ("allocation", "default", 0.0, "mila:4"),  # running, started on submit
        ("allocation", "default", 45.0, "mila:5101"),
        ("execution", "default", 1800.0, "mila:5101"),
        ("allocation", "next_to_run", 2.0, "mila:5102"),
        ("execution", "next_to_run", 1800.0, "mila:5102"),
        ("allocation", "default", 60.0, "mila:5103"),  # timed out: its run time says nothing
    ]
    assert {o.resource for o in got} == {"main"}
    renamed = list(read_sacct(DATA / "sacct-23.11.json", resource="mila"))
    assert {o.resource for o in renamed} == {"mila"}


def test_bad_sacct_output_is_one_error(tmp_path: Path) -> None:
    broken = write(tmp_path / "s.json", '{\n  "jobs": [\n    {"job_id": 1,,}\n  ]\n}\n')
    with pytest.raises(SourceError, match=r"s\.json:3: not JSON \(Expecting"):
        list(read_sacct(broken))
    squeue = write(tmp_path / "q.json", json.dumps({"meta": {}, "nodes": []}))
    with pytest.raises(SourceError, match=r'q\.json: no "jobs" list; expected the output of sacct'):
        list(read_sacct(squeue))
    job = json.loads((DATA / "sacct-22.05.json").read_text())["jobs"][1]
    job["time"]["submission"] = job["time"]["eligible"] = 0
    no_submit = write(tmp_path / "j.json", json.dumps({"jobs": [job]}))
    with pytest.raises(SourceError) as info:
        list(read_sacct(no_submit))
    assert str(info.value) == (
        f"{no_submit}: jobs[0] (job 20251001): time.submission: missing for a job that started"
    )
    del job["time"]
    with pytest.raises(
        SourceError, match=r'jobs\[0\] \(job 20251001\): missing "job_id" or "time"'
    ):
        list(read_sacct(write(tmp_path / "k.json", json.dumps({"jobs": [job]}))))


# -- SWF -----------------------------------------------------------------------------


def test_the_queue_waits_of_a_real_trace() -> None:
    got = list(read_swf_waits(RICC))
    assert len(got) == 3000
    assert {o.phase for o in got} == {"allocation"} and {o.source for o in got} == {"swf"}
    by_queue = {r: sum(o.resource == r for o in got) for r in {o.resource for o in got}}
    assert by_queue == {"RICC-2010-2-first3000:q1": 2991, "RICC-2010-2-first3000:q2": 9}
    first, third = got[0], got[2]
    # "1 0 0 222 80 ...": 80 processors on 8-processor nodes (8192 / 1024) are 10 nodes
    assert (first.value, first.nodes, first.at, first.ref) == (0.0, 10, 1272639895.0, "1")
    # "3 1160 2534 249628 128 ...": started 1160 + 2534 s after the trace's start
    assert (third.value, third.nodes, third.at) == (2534.0, 16, 1272639895.0 + 1160 + 2534)
    assert {o.resource for o in read_swf_waits(RICC, resource="ricc")} == {"ricc:q1", "ricc:q2"}


def test_unknown_waits_are_skipped_and_processors_become_nodes() -> None:
    got = list(read_history(SMALL_SWF))
    assert [o.ref for o in got] == ["1", "2", "4", "5", "6", "7", "8", "9"]  # job 3: wait -1
    assert [o.nodes for o in got] == [2, 1, 1, 1, 8, 1, 1, 1]  # 8 processors a node
    assert [o.resource for o in got][:5] == [
        "small:q2",
        "small:q2",
        "small:q2",
        "small:q1",
        "small:q3",
    ]
    assert got[1].at == 957164400 + 30.5 + 400


def test_a_trace_without_waits_gives_nothing_and_a_bad_line_is_named(tmp_path: Path) -> None:
    no_waits = tmp_path / "nowait.swf.gz"
    with gzip.open(no_waits, "wt") as fh:
        fh.write("; MaxNodes: 128\n1 0 -1 1451 128 -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1\n")
    assert list(read_swf_waits(no_waits)) == []
    bad = write(tmp_path / "bad.swf", "1 0 5 10 1 -1 -1 1 60 -1 1 1 1 -1 1 1 -1 -1\n2 x\n")
    with pytest.raises(SourceError, match=r"bad\.swf:2: expected 18 fields, found 2"):
        list(read_swf_waits(bad))


def test_the_format_comes_from_the_name() -> None:
    assert detect_format("a/RICC.swf.gz") == "swf"
    assert detect_format("trace.SWF") == "swf"
    assert detect_format("sacct-2024.json") == "sacct"
    assert detect_format("drills.csv") == "csv" and detect_format("history") == "csv"
