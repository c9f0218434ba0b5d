"""Paper 003's claims on the quick variant, each a test; then the simulated runs the
claims stand on, and the command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.reproduce.quick import claim_tests, quick_reproduction, run_reproduce

from elasticsite.reproduce import PAPER003_CLAIMS, Reproduction, reproduce_paper003
from elasticsite.reproduce.paper003_live import restart_run
from elasticsite.reproduce.paper003_sim import EXPECTED, SAMPLES, Rebalance, failed, simulate

# The module fixture runs the whole reproduction once: its tests share one xdist worker.
pytestmark = pytest.mark.xdist_group("paper003")


quick = quick_reproduction(reproduce_paper003)


test_every_claim_is_checked_in_order, test_claim = claim_tests(PAPER003_CLAIMS)


def test_the_report_shows_the_shares_beside_the_papers(quick: Reproduction) -> None:
    assert [p.name for p in quick.plots] == ["fair-share.png"]
    assert quick.plots[0].stat().st_size > 0
    table = quick.tables[0]
    assert "12/0/0" in table and "6/6/0" in table and "4/4/4" in table


@pytest.mark.parametrize("rebalance", ["graceful", "immediate"])
def test_the_shares_follow_the_users_as_they_arrive(rebalance: Rebalance) -> None:
    run = simulate(rebalance, seed=2)
    assert [run.at(t) for t in SAMPLES] == [EXPECTED[t] for t in SAMPLES]
    assert not run.wrong_type()
    killed = "terminating" if rebalance == "immediate" else "draining"
    assert set(run.moves) == {killed}
    assert (run.requeued > 0) is (rebalance == "immediate")


def test_vms_in_error_fail_and_are_replaced() -> None:
    run = simulate("graceful", errors=2, seed=3)
    assert run.errors == 2 and len(failed(run)) >= 2
    assert all(j.state.value == "completed" for j in run.jobs)
    whole = simulate("graceful", seed=3)
    assert len(run.workers) >= len(whole.workers) + 2


def test_a_trace_is_refused(tmp_path: Path) -> None:
    done = run_reproduce(tmp_path, "paper003", "--quick", "--trace", "x.swf")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --trace applies to paper002 and paper004 only"
    ]


def test_a_restart_starts_from_a_fresh_state_whatever_the_last_run_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = tmp_path / "live" / "state"
    stale.mkdir(parents=True)
    (stale / "manager.db").write_bytes(b"not this run's")
    monkeypatch.chdir(tmp_path)
    run = restart_run(Path("live"))  # relative, as the command's default --out is
    assert not run.why_not, run.why_not
    assert len(run.before) == 4 and run.after == run.before
    assert not run.launched_after and not run.orphans
    assert run.exit_codes == [0] * 8
    assert run.types == ["small"] * 8
