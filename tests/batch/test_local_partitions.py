"""Job attributes and partitions on the embedded batch system, and its file's migration."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.batch.conftest import FakeClock

from elasticsite.batch.base import BatchError, JobRequest, UnknownJob
from elasticsite.batch.local import LocalBatch


def request(cores: int = 1, **attributes: str) -> JobRequest:
    return JobRequest(["sleep", "60"], cores=cores, walltime=600.0, attributes=attributes)


@pytest.fixture
def split(tmp_path: Path, clock: FakeClock) -> LocalBatch:
    """A site node ``site1`` (default partition) and a cloud node ``w1`` (``cloud``)."""
    batch = LocalBatch(tmp_path / "b.db", clock=clock, node_partition="cloud")
    batch.register_node("site1", 1)
    batch.add_node("w1", 1)
    batch.register_node("w1", 1)
    return batch


def test_attributes_go_in_with_the_job_and_come_back_in_every_view(batch: LocalBatch) -> None:
    job_id = batch.submit(request(account="physics", vm_type="m1.small"))
    (queued,) = batch.snapshot().queued
    assert dict(queued.attributes) == {"account": "physics", "vm_type": "m1.small"}
    assert batch.job(job_id).attributes == queued.attributes
    plain = batch.submit(request())
    assert batch.job(plain).attributes == {}


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"partition": "a,b"}, "one name"),
        ({"account": "x\ny"}, "control characters"),
        ({"Bad-Key": "x"}, "attribute name"),
    ],
)
def test_bad_attributes_are_refused_at_submit(
    batch: LocalBatch, attributes: dict[str, str], message: str
) -> None:
    with pytest.raises(BatchError, match=message):
        batch.submit(request(**attributes))
    assert batch.snapshot().queued == []


def test_jobs_run_only_in_their_own_partition(split: LocalBatch) -> None:
    site_job = split.submit(request())
    cloud_job = split.submit(request(partition="cloud"))
    waiting = split.submit(request())  # the one site core is taken; w1 is not its partition
    running = {j.id: j.node for j in split.snapshot().running}
    assert running == {site_job: "site1", cloud_job: "w1"}
    assert [j.id for j in split.snapshot().queued] == [waiting]


def test_redirect_sends_a_queued_job_to_a_free_cloud_node(split: LocalBatch) -> None:
    split.submit(request())
    waiting = split.submit(request())
    split.redirect(waiting, "cloud")
    job = next(j for j in split.snapshot().running if j.id == waiting)
    assert (job.node, job.attributes["partition"]) == ("w1", "cloud")
    with pytest.raises(UnknownJob, match="no longer queued"):
        split.redirect(waiting, "cloud")


def test_redirect_refuses_a_bad_target(split: LocalBatch) -> None:
    job = split.submit(request(cores=1))
    with pytest.raises(BatchError, match="partition"):
        split.redirect(job, "cloud; rm -rf /")


def test_a_version_1_file_is_migrated_without_losing_a_job(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(V1_SCHEMA)
        db.execute(
            "INSERT INTO jobs (command, cores, walltime, state, submitted_at) "
            "VALUES ('[\"true\"]', 2, 60.0, 'queued', 5.0)"
        )
        db.execute("INSERT INTO nodes (name, cores, declared_at) VALUES ('w1', 2, 1.0)")
        db.execute("PRAGMA user_version = 1")
    db.close()
    batch = LocalBatch(path)
    view = batch.snapshot()
    assert [(j.id, j.cores, dict(j.attributes)) for j in view.queued] == [("1", 2, {})]
    assert [n.name for n in view.nodes] == ["w1"]
    batch.submit(request(partition="cloud"))
    assert LocalBatch(path).snapshot().queued[-1].attributes == {"partition": "cloud"}


def test_a_newer_file_is_refused_with_its_version(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(BatchError, match="schema version 99 is newer"):
        LocalBatch(path)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["", "cloud", "gpu"]), st.integers(1, 3)),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.sampled_from(["", "cloud"]), min_size=1, max_size=4),
)
def test_no_job_ever_runs_outside_its_partition(
    tmp_path_factory: pytest.TempPathFactory,
    jobs: list[tuple[str, int]],
    node_parts: list[str],
) -> None:
    clock = FakeClock()
    batch = LocalBatch(tmp_path_factory.mktemp("p") / "b.db", clock=clock, node_partition="cloud")
    part_of = {}
    for i, part in enumerate(node_parts):
        name = f"n{i}"
        if part:
            batch.add_node(name, 3)
        batch.register_node(name, 3)
        part_of[name] = part
    ids = {}
    for part, cores in jobs:
        attrs = {"partition": part} if part else {}
        ids[batch.submit(request(cores, **attrs))] = part
    view = batch.snapshot()
    for job in view.running:
        assert part_of[job.node or ""] == ids[job.id]
    used: dict[str, int] = {}
    for job in view.running:
        used[job.node or ""] = used.get(job.node or "", 0) + job.cores
    assert all(cores <= 3 for cores in used.values())
    heads = {}
    for job in view.queued:
        heads.setdefault(ids[job.id], job)
    for part, head in heads.items():  # a partition's first waiting job fits on none of its nodes
        free = [3 - used.get(n, 0) for n, p in part_of.items() if p == part]
        assert all(f < head.cores for f in free)


V1_SCHEMA = """
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, command TEXT NOT NULL, cores INTEGER NOT NULL,
    walltime REAL NOT NULL, user TEXT NOT NULL DEFAULT '', priority INTEGER NOT NULL DEFAULT 0,
    front INTEGER NOT NULL DEFAULT 0, state TEXT NOT NULL, submitted_at REAL NOT NULL,
    started_at REAL, finished_at REAL, node TEXT, exit_code INTEGER, pid INTEGER,
    attempt INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_by_state ON jobs (state, node);
CREATE TABLE nodes (
    name TEXT PRIMARY KEY, cores INTEGER NOT NULL, up INTEGER NOT NULL DEFAULT 0,
    drain INTEGER NOT NULL DEFAULT 0, reason TEXT NOT NULL DEFAULT '', heartbeat_at REAL,
    registered_at REAL, declared_at REAL NOT NULL
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
"""The embedded batch file as version 1 of elasticsite wrote it."""
