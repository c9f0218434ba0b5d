"""The manager's store keeps the departures the broker has not recorded yet."""

from __future__ import annotations

from pathlib import Path

from elasticsite.manager.store import StateStore


def test_the_store_keeps_departures_and_reads_those_an_older_manager_kept(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "manager.db")
    assert store.departures() == {}
    store.save_departures({"cloud7": "c0-00001", "c0-00002": "c0-00002"})
    assert StateStore(tmp_path / "manager.db").departures() == {
        "cloud7": "c0-00001",
        "c0-00002": "c0-00002",
    }
    # Before the core kept them, the broker link kept a list of host names.
    store.set_meta("context.pending_removals", '["cloud7", "c0-00003"]')
    assert store.departures() == {"cloud7": "", "c0-00003": ""}
    store.set_meta("context.pending_removals", "not json")
    assert store.departures() == {}
    store.close()
