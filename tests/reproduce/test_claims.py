"""Claims and the report: verdicts, the one-line form, and what report.md holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticsite.reproduce.claims import Reproduction, Verdict, check, write_report
from elasticsite.reproduce.paper002 import table1_eq3_orderings


def test_a_verdict_follows_the_check() -> None:
    assert check("a", "Figure 1", "x", True, "1 s").verdict is Verdict.HOLDS
    assert check("b", "Figure 1", "x", False, "2 s").verdict is Verdict.FAILS
    unchecked = check("c", "Figure 1", "x", None, "-", "the trace is not shipped")
    assert unchecked.verdict is Verdict.UNCHECKED


def test_a_claim_that_cannot_be_checked_must_say_why() -> None:
    with pytest.raises(ValueError, match="needs a note"):
        check("c", "Figure 1", "x", None, "-")


def test_the_report_lists_every_claim_its_notes_and_its_plots(tmp_path: Path) -> None:
    plot = tmp_path / "fig" / "a.png"
    plot.parent.mkdir()
    plot.write_bytes(b"png")
    repro = Reproduction(
        "paperX",
        "paper X",
        quick=True,
        setup=["one site"],
        claims=[
            check("fast", "Figure 2", "A is fast | very", True, "1 s"),
            check("cheap", "Figure 3", "B is cheap", False, "$3", "B pays hourly"),
        ],
        plots=[plot],
        seconds=1.25,
    )
    text = write_report(repro, tmp_path).read_text()
    assert text.startswith("# Reproducing paper X\n")
    assert "2 claims: 1 hold, 1 do not hold, 0 cannot be checked. Runs took 1.2 s." in text
    assert "| `fast` | Figure 2 | A is fast \\| very | 1 s | **holds** |" in text
    assert "- `cheap` (does not hold): B pays hourly" in text
    assert "![a](fig/a.png)" in text
    assert "- one site" in text


def test_table_1s_published_numbers_order_eq3_only_beyond_a_base_awrt() -> None:
    lines = table1_eq3_orderings()
    # amount spent / AWRT improvement: Selective 4880.16 / 14632.34 = 0.334 is lowest,
    # but its improvement is also the smallest, so it wins only for a large base AWRT.
    assert "Selective below Naive when the base AWRT exceeds 19,413 s" in lines
    assert lines[-1].startswith(
        "for a large base AWRT the eq. 3 order is "
        "Selective < Naive < Weighted Queue < Shortest Queue"
    )
