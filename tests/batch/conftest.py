"""Fixtures for the embedded batch system: a real SQLite file and a clock the test moves."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticsite.batch.local import LocalBatch


class FakeClock:
    """A clock that only moves when the test says so."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def batch(tmp_path: Path, clock: FakeClock) -> LocalBatch:
    return LocalBatch(tmp_path / "batch.db", clock=clock, heartbeat_timeout=30.0)
