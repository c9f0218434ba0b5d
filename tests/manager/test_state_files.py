"""State files: private to their owner, durable, ids never given twice, one-line errors."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.state_files import locked_by_another_process, mode
from typer.testing import CliRunner

from elasticsite.batch import local as local_batch
from elasticsite.batch.base import BatchError, JobRequest
from elasticsite.batch.local import LocalBatch
from elasticsite.cli import app
from elasticsite.files import StateFileError, private_dir, private_sqlite, write_private
from elasticsite.manager import store as store_module
from elasticsite.manager.site import open_site
from elasticsite.manager.store import StateStore, WorkerRecord
from elasticsite.model import Cause, Worker, WorkerState

from .conftest import Running, site_config, wait_for

# -- modes ---------------------------------------------------------------------------


def test_every_file_and_directory_of_a_running_site_is_private(
    start_site: Callable[..., Running], tmp_path: Path, umask_022: None
) -> None:
    r = start_site("dedicated", settings={"dedicated_workers": 1})
    wait_for(
        lambda: [rec.worker.state for rec in r.site.store.load()] == [WorkerState.IDLE],
        30,
        "a worker to join",
    )
    state = tmp_path / "state"
    # The databases, their -wal and -shm (SQLite removes those of a file nobody has
    # open), the user data holding the context's secret...
    assert (state / "manager.db-wal").exists() and (state / "batch.db-shm").exists()
    for name in ("manager.db", "batch.db", "cloud-local.db"):
        for suffix in ("", "-wal", "-shm"):
            path = state / f"{name}{suffix}"
            assert not path.exists() or mode(path) == 0o600, path
    assert mode(state / "userdata" / "local-00001.json") == 0o600
    # ... and everything else but the jobs' own output: nothing readable by anyone else.
    loose = [
        (str(p.relative_to(state)), oct(mode(p)))
        for p in [state, *state.rglob("*")]
        if p.relative_to(state).parts[:1] != ("jobs",) or p.name == "jobs"
        if mode(p) & 0o077
    ]
    assert loose == []
    assert [p.name for p in (state / "userdata").iterdir()] == ["local-00001.json"]  # no temp
    r.stop()


def test_a_loose_state_directory_of_ours_is_tightened_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="elasticsite.files"):
        site = open_site(site_config(state))
    assert mode(state) == 0o700
    assert any(str(state) in m and "tightened" in m for m in caplog.messages), caplog.messages
    site.store.close()


def test_a_shared_directory_is_never_tightened(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    private_dir(shared)
    assert mode(shared) == 0o1777
    private_dir("/tmp")
    assert mode(Path("/tmp")) & 0o1777 == 0o1777


def test_an_existing_loose_database_and_its_side_files_are_tightened(
    tmp_path: Path, umask_022: None
) -> None:
    path = tmp_path / "manager.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x)")  # leaves manager.db-wal and -shm behind, 0644
    assert mode(path) == mode(Path(f"{path}-wal")) == 0o644
    store = StateStore(path)
    assert [mode(Path(f"{path}{s}")) for s in ("", "-wal", "-shm")] == [0o600] * 3
    store.close()
    db.close()


def test_a_side_file_that_goes_while_it_is_tightened_is_no_error(
    tmp_path: Path, umask_022: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite deletes the -wal when another connection (a thread's, a worker's) closes
    # last: between a look at the file and its chmod, or before the look.
    path = tmp_path / "manager.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x)")  # leaves manager.db-wal and -shm behind, 0644
    real_chmod = os.chmod

    def goes_first(target: Any, mode: int, **kwargs: Any) -> None:
        if str(target).endswith("-wal"):
            os.unlink(target)
        real_chmod(target, mode, **kwargs)

    monkeypatch.setattr(os, "chmod", goes_first)
    assert private_sqlite(path) == path
    monkeypatch.setattr(os, "chmod", real_chmod)
    assert not Path(f"{path}-wal").exists() and mode(Path(f"{path}-shm")) == 0o600
    assert private_sqlite(path) == path  # and with no -wal at all
    db.close()


def test_preparing_a_database_again_keeps_this_process_locks(tmp_path: Path) -> None:
    # Closing any descriptor of a file drops all of this process's POSIX locks on it:
    # preparing the file must not open it once SQLite has it open.
    path = tmp_path / "manager.db"
    store = StateStore(path)
    other = (
        "import sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1], timeout=0.2, isolation_level=None)\n"
        "db.execute('BEGIN IMMEDIATE')\n"
    )
    with store.transaction():  # this process holds the write lock
        again = StateStore(path)  # prepares the file (and its -wal and -shm) once more
        out = subprocess.run(
            [sys.executable, "-c", other, str(path)], capture_output=True, text=True
        )
        assert "database is locked" in out.stderr, out.stderr
    again.close()
    store.close()


def test_write_private_replaces_a_file_atomically_and_privately(
    tmp_path: Path, umask_022: None
) -> None:
    target = tmp_path / "secret.json"
    target.write_text("old")
    assert mode(target) == 0o644
    write_private(target, '{"context_secret": "s"}')
    assert target.read_text() == '{"context_secret": "s"}' and mode(target) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["secret.json"]


# -- durability and worker ids -------------------------------------------------------


def test_the_store_commits_with_full_sync(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "manager.db")
    with store.transaction() as db:
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.close()


def test_new_worker_ids_skip_every_id_in_use(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "manager.db")
    assert store.new_worker_ids("c", 2) == ["c-00001", "c-00002"]
    store.save(WorkerRecord(Worker("c-00004", "c", "small", 1, requested_at=0.0)))
    assert store.new_worker_ids("c", 2, taken={"c-00003"}) == ["c-00005", "c-00006"]
    store.reserve_worker_numbers(10)
    store.reserve_worker_numbers(7)  # never back
    assert store.new_worker_ids("c", 1) == ["c-00011"]
    assert store.last_worker_number() == 11
    store.close()


def test_a_lost_write_never_gives_a_worker_id_twice(start_site: Callable[..., Running]) -> None:
    first = start_site(
        "dedicated", settings={"dedicated_workers": 3}, manager={"on_shutdown": "leave"}
    )
    wait_for(
        lambda: [rec.worker.state for rec in first.site.store.load()] == [WorkerState.IDLE] * 3,
        30,
        "three workers to join",
    )
    first.stop()
    lost = "local-00003"
    cloud = first.site.clouds["local"]
    instance = {i.name: i for i in cloud.describe()}[lost]
    # A power loss after the launch: worker 3's row, its transitions and the counter's
    # last bump never reached the disk; its instance runs on, tagged with its id.
    with first.site.store.transaction() as db:
        db.execute("DELETE FROM workers WHERE id = ?", (lost,))
        db.execute("DELETE FROM transitions WHERE worker_id = ?", (lost,))
        db.execute("UPDATE counters SET value = 2 WHERE name = 'seq:worker'")

    again = start_site("dedicated", settings={"dedicated_workers": 4})
    wait_for(
        lambda: (
            len(again.site.store.load()) == 4
            and all(rec.worker.state is WorkerState.IDLE for rec in again.site.store.load())
        ),
        30,
        "the lost worker adopted and a fourth one joined",
    )
    workers = {rec.worker.id: rec.worker for rec in again.site.store.load()}
    assert sorted(workers) == ["local-00001", "local-00002", "local-00003", "local-00004"]
    # Adopted as it was (same instance), never requested anew under its old id.
    assert workers[lost].instance_id == instance.id
    assert {str(t.cause) for t in again.site.store.transitions(lost)} <= {
        Cause.ADOPTED,
        Cause.JOINED,
    }
    assert sorted(i.name for i in cloud.describe()) == sorted(workers)
    again.stop()


# -- one-line errors ----------------------------------------------------------------


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is no database\n" + bytes(range(256)) * 16)


def test_a_corrupt_state_file_is_one_error_naming_it(tmp_path: Path) -> None:
    for name, opener in (("manager.db", StateStore), ("batch.db", LocalBatch)):
        path = tmp_path / name
        _garbage(path)
        with pytest.raises(StateFileError) as caught:
            opener(path)
        assert str(caught.value) == f"{path}: not an SQLite database (corrupt?)"


def test_an_unwritable_state_file_is_one_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "manager.db"
    path.mkdir()  # root writes anywhere: a directory in the way is what stops it
    with pytest.raises(StateFileError) as caught:
        StateStore(path)
    assert str(caught.value) == f"{path}: cannot write (is a directory)"
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StateFileError, match=r"/file/state: cannot create directory \(.*/file: "):
        private_dir(blocker / "state")


def test_a_locked_state_file_is_one_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "LOCK_TIMEOUT", 0.2)
    monkeypatch.setattr(local_batch, "LOCK_TIMEOUT", 0.2)
    store = StateStore(tmp_path / "manager.db")
    batch = LocalBatch(tmp_path / "batch.db")
    with locked_by_another_process(store.path):
        assert store.get_meta("site_id") is None  # readers carry on (WAL)
        with pytest.raises(StateFileError) as caught:
            store.set_meta("site_id", "x")
        assert str(caught.value) == f"{store.path}: locked by another process"
    store.set_meta("site_id", "x")  # and the store is usable again after the failure
    with locked_by_another_process(batch.path):
        with pytest.raises(BatchError) as batch_caught:  # still a BatchError to its callers
            batch.submit(JobRequest(["true"], 1, 60.0))
        assert isinstance(batch_caught.value, StateFileError)
        assert str(batch_caught.value) == f"{batch.path}: locked by another process"
    store.close()
    batch.close()


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """``elasticsite run`` in this process sets up logging; put it back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_commands_say_a_state_file_is_locked_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> None:
    monkeypatch.setattr(store_module, "LOCK_TIMEOUT", 0.2)
    monkeypatch.setattr(local_batch, "LOCK_TIMEOUT", 0.2)
    state = tmp_path / "state"
    cfg = tmp_path / "site.toml"
    cfg.write_text(f'[manager]\nstate_dir = "{state}"\n[[clouds]]\nname = "local"\n')
    runner = CliRunner()
    assert runner.invoke(app, ["submit", "-c", str(cfg), "--", "true"]).exit_code == 0
    with locked_by_another_process(state / "manager.db"):
        result = runner.invoke(app, ["run", "-c", str(cfg)])
        assert result.exit_code == 2, result.output
        assert result.stderr == f"error: {state / 'manager.db'}: locked by another process\n"
        assert runner.invoke(app, ["status", "-c", str(cfg)]).exit_code == 0  # only reads
    with locked_by_another_process(state / "batch.db"):
        result = runner.invoke(app, ["submit", "-c", str(cfg), "--", "true"])
        assert result.exit_code == 2, result.output
        assert result.stderr == f"error: {state / 'batch.db'}: locked by another process\n"
        assert runner.invoke(app, ["queue", "-c", str(cfg)]).exit_code == 0  # only reads
