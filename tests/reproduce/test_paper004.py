"""Paper 004's claims on the quick variant, each a test; a claim that does not hold is
kept honest by the words its note must carry. Then the case study's history itself,
and the command line's refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.reproduce.quick import claim_tests, quick_reproduction, run_reproduce

from elasticsite.history.observations import PROBE
from elasticsite.reproduce import PAPER004_CLAIMS, Reproduction, reproduce_paper004
from elasticsite.reproduce.paper004_advisor import CASE_STUDIES, case_observations

# The module fixture runs the whole reproduction once: its tests share one xdist worker.
pytestmark = pytest.mark.xdist_group("paper004")

FAILS = {
    "queue_overpredicts_default": "grew",
    "bound_order": "idle",
    "cloud_conditions": "concurrent migrations",
}
"""Claims that do not hold on the quick variant, and words their note must carry."""
UNCHECKED = {"slurm_order": "--slurm"}


quick = quick_reproduction(reproduce_paper004)


test_every_claim_is_checked_in_order, test_claim = claim_tests(
    PAPER004_CLAIMS, fails=FAILS, unchecked=UNCHECKED
)


def test_the_report_says_what_is_real_and_what_is_synthesised(quick: Reproduction) -> None:
    assert {p.name for p in quick.plots} == {"tables-3.3-3.7.png", "tables-4.12-4.24.png"}
    assert all(p.exists() for p in quick.plots)
    setup = " ".join(quick.setup)
    assert "RICC" in setup and "Synthesised" in setup
    assert any(t.startswith("## Table 3.8") for t in quick.tables)


def test_a_case_study_history_is_seeded_and_shaped_like_runs() -> None:
    case = CASE_STUDIES[0]
    waits = [(i * 3600.0, float(i % 5) * 100.0) for i in range(20)]
    one = case_observations(case, waits, "preemption", seed=3)
    assert one == case_observations(case, waits, "preemption", seed=3)
    runs = [o for o in one if o.phase != PROBE]
    assert len(runs) == 4 * len(waits)
    assert {o.policy for o in runs} == {"preemption"}
    first = [o for o in runs if o.trial == runs[0].trial]
    by_phase = {o.phase: o for o in first}
    assert by_phase["allocation"].value == 0.0  # the first wait, as given
    assert by_phase["input"].at <= by_phase["allocation"].at <= by_phase["execution"].at
    assert by_phase["execution"].at <= by_phase["output"].at
    assert any(o.phase == PROBE for o in one)


def test_a_missing_trace_is_one_line(tmp_path: Path) -> None:
    done = run_reproduce(tmp_path, "paper004", "--quick", "--trace", "nope.swf")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: nope.swf: no such trace file"]
    assert not (tmp_path / "reproduce-out").exists()
