"""The demo ends by itself for every kind of policy, and reports in uncompressed time."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticsite.demo import DemoOptions, run_demo


@pytest.mark.parametrize(
    "policy,workers", [("steady_stream", None), ("dedicated", 4)], ids=["floor-of-one", "pool"]
)
def test_demo_with_a_worker_floor_still_ends(
    policy: str, workers: int | None, tmp_path: Path
) -> None:
    opts = DemoOptions(
        policy=policy,
        speed=40.0,
        dedicated_workers=workers or 10,
        max_instances=4,
        out_dir=tmp_path,
        time_limit=4 * 3600.0,
    )
    result = run_demo(opts)
    m = result.metrics
    assert m.jobs_done == 20 and m.jobs_not_done == 0
    # Every worker is gone at the end: the shutdown drained what the policy kept.
    assert all(w.ended_at is not None for w in m.workers)
    if policy == "dedicated":
        # Booted before the first job: 20 jobs of 60 s on 4 workers take 5 rounds.
        assert m.workers_launched == 4
        assert 300.0 <= m.elapsed < 300.0 + 60.0
        assert m.wait_max is not None and m.wait_max >= 240.0
    else:
        # Grows one worker at a time and never beyond the cap.
        assert m.peak_workers <= 4
    assert result.plot.exists() and result.wall_seconds < 120
