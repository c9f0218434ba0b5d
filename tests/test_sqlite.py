"""The one way state files are opened and changed: private, WAL, one-line errors."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.state_files import locked_by_another_process, mode

from elasticsite.files import StateFileError
from elasticsite.sqlite import Connection, connect


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Connection]:
    conn = connect(tmp_path / "state.db", synchronous="FULL", busy_timeout=0.2)
    conn.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    yield conn
    conn.close()


def rows(conn: sqlite3.Connection) -> list[int]:
    return [x for (x,) in conn.execute("SELECT x FROM t ORDER BY x")]


# -- connect ----------------------------------------------------------------------------


@pytest.mark.parametrize(("level", "code"), [("FULL", 2), ("NORMAL", 1)])
def test_connect_makes_a_private_wal_file_at_the_level_asked(
    tmp_path: Path, umask_022: None, level: str, code: int
) -> None:
    path = tmp_path / "state.db"
    conn = connect(path, synchronous=level, busy_timeout=2.5)  # type: ignore[arg-type]
    conn.execute("CREATE TABLE t (x)")
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("PRAGMA synchronous").fetchone() == (code,)
    assert conn.execute("PRAGMA busy_timeout").fetchone() == (2500,)
    assert conn.in_transaction is False  # autocommit: changes go through transaction()
    assert [mode(Path(f"{path}{s}")) for s in ("", "-wal", "-shm")] == [0o600] * 3
    conn.close()


def test_connect_refuses_a_level_it_does_not_know(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="FULL or NORMAL"):
        connect(tmp_path / "x.db", synchronous="OFF", busy_timeout=1)  # type: ignore[arg-type]
    assert not (tmp_path / "x.db").exists()


def test_an_existing_database_opens_as_it_is_and_in_wal(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)  # rollback journal, as an older tool leaves it
    old.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    old.execute("INSERT INTO t VALUES (7)")
    old.commit()
    old.close()
    conn = connect(path, synchronous="FULL", busy_timeout=1)
    assert rows(conn) == [7]
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    conn.close()


def test_without_create_a_missing_file_is_an_error_and_stays_missing(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    with pytest.raises(StateFileError) as caught:
        connect(path, synchronous="FULL", busy_timeout=1, create=False)
    assert str(caught.value) == f"{path}: cannot open (missing directory or no permission?)"
    assert not path.exists()


def test_a_corrupt_file_is_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is no database\n" + bytes(range(256)) * 16)
    with pytest.raises(StateFileError) as caught:
        connect(path, synchronous="FULL", busy_timeout=1)
    assert str(caught.value) == f"{path}: not an SQLite database (corrupt?)"


def test_a_directory_in_the_way_is_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.mkdir()
    with pytest.raises(StateFileError) as caught:
        connect(path, synchronous="FULL", busy_timeout=1)
    assert str(caught.value) == f"{path}: cannot write (is a directory)"


# -- transaction ------------------------------------------------------------------------


def test_a_transaction_commits_when_the_block_ends(db: Connection) -> None:
    with db.transaction() as tx:
        assert tx is db and db.in_transaction
        db.execute("INSERT INTO t VALUES (1)")
    assert not db.in_transaction
    other = sqlite3.connect(db.path)
    assert rows(other) == [1]  # on disk, for every other connection
    other.close()


def test_a_transaction_that_raises_is_rolled_back_and_the_error_kept(db: Connection) -> None:
    with pytest.raises(KeyError, match="why"), db.transaction():
        db.execute("INSERT INTO t VALUES (1)")
        raise KeyError("why")
    assert not db.in_transaction and rows(db) == []


def test_a_statement_error_is_raised_as_it_is_and_rolled_back(db: Connection) -> None:
    with pytest.raises(sqlite3.IntegrityError), db.transaction():
        db.execute("INSERT INTO t VALUES (1)")
        db.execute("INSERT INTO t VALUES (1)")  # a constraint: the caller's to judge
    assert not db.in_transaction and rows(db) == []


def test_a_nested_block_joins_the_outer_transaction(db: Connection) -> None:
    with pytest.raises(RuntimeError), db.transaction():
        with db.transaction():
            db.execute("INSERT INTO t VALUES (1)")
        assert db.in_transaction  # the inner block did not commit
        raise RuntimeError
    assert rows(db) == []
    with db.transaction(), db.transaction():
        db.execute("INSERT INTO t VALUES (2)")
    assert rows(db) == [2]


def test_a_write_waits_for_another_process_then_says_locked(db: Connection) -> None:
    db.execute("INSERT INTO t VALUES (1)")
    with locked_by_another_process(db.path, "IMMEDIATE"):
        with db.transaction(immediate=False):
            assert rows(db) == [1]  # reads go on (WAL)
        with pytest.raises(StateFileError) as caught, db.transaction():
            pass  # BEGIN IMMEDIATE: the write lock is asked for up front
        assert str(caught.value) == f"{db.path}: locked by another process"
        assert not db.in_transaction
    with db.transaction():  # usable again once the other process is done
        db.execute("INSERT INTO t VALUES (2)")
    assert rows(db) == [1, 2]
