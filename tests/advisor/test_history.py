"""The advisor's history store: what goes in comes out in time order, once, privately."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.files import StateFileError
from elasticsite.history.observations import (
    HistoryStore,
    Key,
    Observation,
    ProbeFailure,
    store_path,
)


def wait(value: float, at: float, **kw: object) -> Observation:
    fields: dict[str, object] = {"phase": "allocation", "resource": "hpc", "source": "manager"}
    fields.update(kw)
    return Observation(value=value, at=at, **fields)  # type: ignore[arg-type]


def test_the_store_is_private_and_lives_in_the_state_directory(tmp_path: Path) -> None:
    path = store_path(tmp_path / "state")
    assert path == tmp_path / "state" / "advisor.db"
    with HistoryStore(path) as store:
        store.add([wait(5, 100)])
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    for side in ("-wal", "-shm"):
        if Path(f"{path}{side}").exists():
            assert stat.S_IMODE(os.stat(f"{path}{side}").st_mode) == 0o600


def test_observations_come_back_in_time_order_with_their_row_ids(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "advisor.db")
    assert store.add([wait(30, 300), wait(10, 100), wait(20, 200, nodes=4)]) == 3
    got = store.observations("allocation")
    assert [o.value for o in got] == [10, 20, 30]
    assert [o.id for o in got] == [2, 3, 1]
    assert got[1] == wait(20, 200, nodes=4)  # the id is not part of equality
    assert store.count() == 3 and store.count("execution") == 0
    assert store.last_id() == 3


def test_a_reference_is_recorded_once_per_source_phase_and_resource(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "advisor.db")
    job = wait(60, 1000, source="sacct", ref="narval:17")
    assert store.add([job, job]) == 1
    assert store.add([job]) == 0  # the same sacct output read again
    assert store.add([wait(60, 1000, source="sacct", ref="narval:17", phase="execution")]) == 1
    assert store.add([wait(60, 1000, source="sacct", ref="narval:17", resource="other")]) == 1
    assert store.add([wait(60, 1000, source="csv", ref="narval:17")]) == 1
    assert store.add([wait(60, 1000), wait(60, 1000)]) == 2  # no ref: every one counts
    assert store.count() == 6


def test_filters_keys_and_incremental_reads(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "advisor.db")
    store.add(
        [
            wait(1, 1),
            wait(2, 2, policy="next_to_run"),
            wait(3, 3, nodes=8),
            Observation(
                phase="execution", resource="hpc", app="flash", value=900, at=4, source="drill"
            ),
        ]
    )
    assert [o.value for o in store.observations("allocation", policy="next_to_run")] == [2]
    assert [o.value for o in store.observations(nodes=8)] == [3]
    assert [o.value for o in store.observations(app="flash")] == [900]
    assert store.keys("allocation") == [
        Key("allocation", "hpc", "default", 1, "", ""),
        Key("allocation", "hpc", "default", 8, "", ""),
        Key("allocation", "hpc", "next_to_run", 1, "", ""),
    ]
    assert len(store.keys()) == 4
    last = store.last_id()
    store.add([wait(5, 0.5)])
    newer = store.observations(since_id=last)
    assert [o.value for o in newer] == [5]
    assert newer[0].key == Key("allocation", "hpc", "default", 1, "", "")


def test_two_processes_worth_of_connections_see_each_others_writes(tmp_path: Path) -> None:
    path = tmp_path / "advisor.db"
    writer, reader = HistoryStore(path), HistoryStore(path)
    errors: list[BaseException] = []

    def write(offset: int) -> None:
        try:
            for i in range(50):
                writer.add([wait(i, offset + i, ref=f"{offset}-{i}")])
        except BaseException as exc:  # pragma: no cover - shown by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert reader.count() == 200


def test_probe_failures_are_kept_apart_from_observations(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "advisor.db")
    store.add_probe_failure(ProbeFailure("archive", 20.0, "HTTP 503"))
    store.add_probe_failure(ProbeFailure("mirror", 10.0, "timed out"))
    assert store.count() == 0
    assert [f.repository for f in store.probe_failures()] == ["mirror", "archive"]
    assert store.probe_failures("archive") == [ProbeFailure("archive", 20.0, "HTTP 503")]
    assert store.probe_failures(since=15) == [ProbeFailure("archive", 20.0, "HTTP 503")]


def test_a_corrupt_store_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "advisor.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StateFileError) as info:
        HistoryStore(path)
    assert str(info.value).startswith(f"{path}: ")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"phase": "queue"}, "phase: must be one of input, allocation, execution, output, probe"),
        ({"source": "guess"}, "source: must be one of manager, drill, sacct, csv, swf, probe"),
        ({"resource": " "}, "resource: must not be empty"),
        ({"policy": ""}, "policy: must not be empty"),
        ({"nodes": 0}, "nodes: must be a whole number >= 1 (got 0)"),
        ({"nodes": 2.5}, "nodes: must be a whole number >= 1 (got 2.5)"),
        ({"value": -1.0}, "value: must be a finite number of seconds >= 0 (got -1.0)"),
        ({"value": float("nan")}, "value: must be a finite number of seconds >= 0 (got nan)"),
        ({"at": float("inf")}, "at: must be a finite time in epoch seconds (got inf)"),
        ({"nbytes": -5}, "nbytes: must be a whole number >= 0 (got -5)"),
        ({"phase": "probe", "nbytes": 10}, "repository: a probe names the repository it measured"),
        (
            {"phase": "probe", "repository": "r"},
            "nbytes: a probe counts the bytes it moved (at least 1)",
        ),
    ],
)
def test_an_invalid_observation_names_its_field(fields: dict[str, object], message: str) -> None:
    base: dict[str, object] = {
        "phase": "allocation",
        "resource": "hpc",
        "value": 1.0,
        "at": 0.0,
        "source": "manager",
    }
    with pytest.raises(ValueError) as info:
        Observation(**{**base, **fields})  # type: ignore[arg-type]
    assert str(info.value).startswith(message)


observations = st.builds(
    Observation,
    phase=st.sampled_from(["input", "allocation", "execution", "output"]),
    resource=st.sampled_from(["hpc", "cloud-a", "p:gpu"]),
    policy=st.sampled_from(["default", "next_to_run", "preemption"]),
    nodes=st.integers(1, 4096),
    app=st.text(max_size=8),
    value=st.floats(0, 1e9, allow_nan=False),
    at=st.floats(-1e9, 3e9, allow_nan=False),
    source=st.sampled_from(["manager", "drill", "csv"]),
    trial=st.text(max_size=5),
)


@settings(max_examples=30, deadline=None)
@given(st.lists(observations, max_size=30))
def test_what_goes_in_comes_out_in_time_order(
    tmp_path_factory: pytest.TempPathFactory, batch: list[Observation]
) -> None:
    store = HistoryStore(tmp_path_factory.mktemp("h") / "advisor.db")
    assert store.add(batch) == len(batch)
    got = store.observations()
    assert got == sorted(batch, key=lambda o: o.at)
    assert store.last_id() == len(batch)
    store.close()
