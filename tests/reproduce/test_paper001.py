"""Paper 001's claims on the quick variant: each one a test.

The simulated figures (3, 5 and 6) are the quick run's own, so their verdicts are
fixed by the seed; a claim that does not hold is listed in ``EXCEPTIONS`` with a word
its note must carry. Figure 4 is measured here on a smaller cluster (8 nodes, polling
every half second) against the real broker and real agents: its verdicts are timings
of a shared machine, so only that each claim was checked, and that every node applied
every join, is asserted.
"""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest
from tests.reproduce.quick import assert_in_order, assert_verdict, quick_reproduction, run_reproduce

from elasticsite.reproduce import PAPER001_CLAIMS, Reproduction, Verdict, paper001_rig, write_report
from elasticsite.reproduce.paper001 import QUICK, recontext_plan, reproduce_paper001
from elasticsite.reproduce.paper001_broker import RecontextPlan, RecontextRig
from elasticsite.reproduce.paper001_clouds import (
    FIG3_TEXT_RUNS,
    calibrate,
    ec2_micro,
    joined_by,
    stall_probability,
)
from elasticsite.reproduce.paper001_sim import reactivity_run
from elasticsite.sim.cloud import CloudModel

# The module fixture runs the whole reproduction once: its tests share one xdist worker.
pytestmark = pytest.mark.xdist_group("paper001")

EXCEPTIONS: dict[str, str] = {
    "fig5_hotel_fills_3000": "every job has started",
    "fig6_trails_off_400": "even rate",
    "fig6_short_of_512": "could not diagnose",
}
"""Claims that do not hold here, and a word their note must carry."""
FIG4 = {"fig4_256_within_1s", "fig4_all_within_1s", "fig4_larger_nearer_period"}
SMALL_FIG4 = RecontextPlan((2, 8), 1, 0.5, long_sizes=(8,))


quick = quick_reproduction(reproduce_paper001, settings=replace(QUICK, recontext=SMALL_FIG4))


def test_every_claim_is_checked_in_order(quick: Reproduction) -> None:
    assert_in_order(quick, PAPER001_CLAIMS)


@pytest.mark.parametrize("key", [k for k in PAPER001_CLAIMS if k not in FIG4])
def test_simulated_claim(quick: Reproduction, key: str) -> None:
    assert_verdict(quick.claim(key), fails=EXCEPTIONS)


def test_figure_4_is_measured_at_every_size_in_both_modes(quick: Reproduction) -> None:
    table = next(t for t in quick.tables if "Figure 4" in t)
    for row in ("| periodic | 2 |", "| periodic | 8 |", "| long poll | 8 |"):
        assert row in table
    checked = {quick.claim(k).verdict for k in FIG4 - {"fig4_256_within_1s"}}
    assert checked <= {Verdict.HOLDS, Verdict.FAILS}
    too_small = quick.claim("fig4_256_within_1s")
    assert too_small.verdict is Verdict.UNCHECKED
    assert "no 256-node cluster" in too_small.note


def test_the_report_has_the_plots_tables_and_calibration(
    quick: Reproduction, tmp_path: Path
) -> None:
    names = {p.name for p in quick.plots}
    assert {"fig3-reactivity.png", "fig4-recontext.png", "fig6-ec2.png"} <= names
    assert all(p.stat().st_size > 10_000 for p in quick.plots)
    assert all(p.with_suffix(".csv").exists() for p in quick.plots)
    text = write_report(quick, tmp_path).read_text()
    assert "Figure 3: reactivity time" in text
    assert "most likely value for Figure 3's text" in text


def test_a_boot_that_never_ends_is_replaced_after_ten_minutes() -> None:
    failing = reactivity_run(32, 0, ec2_micro(0.2), seed=7)
    assert failing.stalled > 0
    assert failing.seconds > 600
    sound = reactivity_run(32, 0, ec2_micro(0.0), seed=7)
    assert sound.stalled == 0
    assert sound.seconds < 600


def test_boot_failure_must_be_a_probability_below_one() -> None:
    with pytest.raises(ValueError, match="boot_failure"):
        CloudModel("c", boot_failure=1.0)
    with pytest.raises(ValueError, match="boot_failure"):
        CloudModel("c", boot_failure=-0.1)


def test_the_calibration_keeps_the_sentences_it_was_fitted_to() -> None:
    cal = calibrate()
    p = stall_probability()
    assert cal.boot_failure == p
    one_size = stall_probability({32: (3, 2)})  # then 1 - (1 - p)^32 = 2/3 exactly
    assert one_size == pytest.approx(1 - (1 / 3) ** (1 / 32), abs=1e-5)
    odds = {n: 1 - (1 - p) ** n for n in FIG3_TEXT_RUNS}
    assert odds[16] < 0.5 < odds[64]  # small clusters rarely stall, 64 nodes mostly
    lo, hi = cal.hotel_range
    assert lo <= cal.hotel_transfer <= hi
    assert 100 < joined_by(cal.hotel_transfer, 128, 1800) < 128
    assert 2 * (cal.hotel_limit + cal.sierra_limit) < 512


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("paper001", "--trace", "x.swf"), "--trace applies to paper002 only"),
        (("paper000", "--period", "5"), "--period applies to paper001 only"),
        (("paper001", "--period", "121"), "the polling period must be in 0.1..120 s, got 121"),
    ],
)
def test_a_misplaced_option_is_refused_in_one_line(
    tmp_path: Path, args: tuple[str, ...], error: str
) -> None:
    done = run_reproduce(tmp_path, *args, "--out", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {error}"]
    assert not (tmp_path / "report.md").exists()


def test_the_papers_period_gives_one_join_per_size_and_a_short_one_three() -> None:
    assert recontext_plan().period == 120
    assert recontext_plan().trials == 1
    assert recontext_plan(2.0).trials == 3
    assert recontext_plan(2.0).sizes == recontext_plan().sizes == (2, 4, 8, 16, 32, 64, 128, 256)


def test_a_broker_port_taken_before_it_listens_is_given_up_for_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        first = paper001_rig._free_port
        monkeypatch.setattr(paper001_rig, "_free_port", lambda: next(ports, None) or first())
        with RecontextRig(tmp_path, SMALL_FIG4, seed=1) as rig:
            rig.start_broker()
            rig.start_agents()
            assert rig.port != taken.getsockname()[1]
            assert rig.ctx is not None
