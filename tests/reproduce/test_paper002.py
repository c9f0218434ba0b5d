"""Paper 002's claims on the quick variant: each one a test (see test_paper000.py for
how a claim that does not hold is kept honest); the command line with a trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.reproduce.quick import claim_tests, quick_reproduction, run_reproduce

from elasticsite.reproduce import PAPER002_CLAIMS, Reproduction, reproduce_paper002

# The module fixture runs the whole reproduction once: its tests share one xdist worker.
pytestmark = pytest.mark.xdist_group("paper002")

EXCEPTIONS = {
    "aggressive_costlier_normal_many": "fewer jobs to the cloud",
    "table1_selective_spends_least": "--trace",
}
"""Claims that do not hold here, and words their note must carry."""

SMALL_SWF = Path(__file__).parents[1] / "sim" / "data" / "small.swf"


quick = quick_reproduction(reproduce_paper002)


test_every_claim_is_checked_in_order, test_claim = claim_tests(PAPER002_CLAIMS, fails=EXCEPTIONS)


def test_the_plots_and_tables_are_there(quick: Reproduction) -> None:
    names = {p.name for p in quick.plots}
    assert "performance_cost.png" in names
    assert {"money-sf0.9.png", "rejected-sf0.9.png"} <= names
    assert all(p.exists() for p in quick.plots)
    assert any(t.startswith("## Table 1 measured (Lublin99 stand-in") for t in quick.tables)


def test_a_missing_trace_is_one_line(tmp_path: Path) -> None:
    done = run_reproduce(tmp_path, "paper002", "--quick", "--trace", "nope.swf")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: nope.swf: no such trace file"]


def test_a_trace_too_short_for_its_rounds_is_refused_clearly(tmp_path: Path) -> None:
    done = run_reproduce(tmp_path, "paper002", "--trace", str(SMALL_SWF), "--out", "o")
    assert done.returncode == 2
    assert "holds 1 two-month interval(s); the full reproduction replays 5" in done.stderr
