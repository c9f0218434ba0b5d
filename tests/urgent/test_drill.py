"""Urgent drills on the embedded site: each policy tested on the live site, its delays in
the advisor's history, and what a drill that cannot run says."""

from __future__ import annotations

import os
from pathlib import Path

from tests.cli import run_command

from elasticsite.batch.base import JobRequest
from elasticsite.config import load_config
from elasticsite.history.observations import HistoryStore, store_path
from elasticsite.urgent.drill import drill

from .test_embedded_site import running_site


def test_a_drill_per_policy_feeds_the_advisor(tmp_path: Path) -> None:
    with running_site(tmp_path, carol_runs=2) as (_, _, cfg):
        out = run_command(
            "urgent", "drill", "-c", str(cfg), "-p", "next_to_run", "-p", "preemption",
            "--command", "sleep 0.2", "--timeout", "60",
            timeout=120, env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "lab next_to_run: job" in out.stdout and "lab preemption: job" in out.stdout
        state = load_config(cfg).state_dir(cfg.parent)
        with HistoryStore(store_path(state)) as history:
            seen = {(o.phase, o.policy) for o in history.observations()}
            assert {("allocation", "next_to_run"), ("execution", "next_to_run"),
                    ("allocation", "preemption"), ("execution", "preemption")} <= seen  # fmt: skip
            ran = [o.value for o in history.observations() if o.phase == "execution"]
            assert all(v >= 0.2 for v in ran), ran


def test_a_drill_that_cannot_start_is_cancelled_and_records_nothing(tmp_path: Path) -> None:
    from elasticsite.batch.local import LocalBatch

    batch = LocalBatch(tmp_path / "batch.db")  # no node at all: nothing can start
    clock = iter(range(0, 10_000, 10))
    result = drill(batch, "lab", "next_to_run", ["true"], timeout=30, clock=lambda: next(clock),
                   sleep=lambda _: None)  # fmt: skip
    assert result.error == "did not start within 30 s; cancelled"
    assert result.observations(100.0) == []
    assert batch.snapshot().queued == []  # cancelled, not left behind
    batch.submit(JobRequest(["true"]))
