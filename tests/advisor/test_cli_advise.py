"""``elasticsite advise --deadline``, run as a person runs it: a real process, real files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tests.advisor.test_routes import history
from tests.cli import MINIMAL_SITE, run_cli

SITE = (
    MINIMAL_SITE
    + """
[[advisor.resources]]
name = "hpc"
nodes = [4]
policies = ["default", "next_to_run", "preemption"]
app = "flash"
"""
)


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd)


def lines(text: str) -> list[str]:
    """What a person sees: trailing blanks (the table's title pads to its width) cut."""
    return [line.rstrip() for line in text.splitlines()]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "site.toml").write_text(SITE)
    history(tmp_path / "state")  # waits: 10 min next-to-run, 2 h default; runs: 1 h
    return tmp_path


NO_PREEMPTION_HISTORY = (
    "  hpc, 4 nodes, preemption: allocation: no history of hpc under policy preemption for "
    "3-4 nodes"
)
"""Why every deadline drops the preemption policy: the history has none of it."""


def heading(deadline: str) -> str:
    """The first line of ``advise``: the deadline, and how the phase bounds are drawn."""
    return (
        f"deadline {deadline}: phase bounds at quantiles 0.5, 0.75, 0.9, 0.95, 0.99 with 0.95 "
        "confidence, from 180 observations"
    )


def advice(site: Path, *args: str, exit_code: int) -> list[str]:
    """What ``advise`` run with ``args`` at ``site`` prints, having checked its exit code
    and that it said nothing on stderr."""
    out = run("advise", *args, "-c", "site.toml", cwd=site)
    assert (out.returncode, out.stderr) == (exit_code, "")
    return lines(out.stdout)


def test_the_ranking_as_a_person_sees_it(site: Path) -> None:
    assert advice(site, "--deadline", "6h", exit_code=0) == [
        heading("6h (21,600 s)"),
        "likely enough (probability >= 0.5); per phase: quantile bound",
        "resource  nodes  repository  policy       probability  bound   allocation   execution",
        "─" * 85,
        "hpc           4  -           next_to_run       0.9025  1h10m  0.95 10m00s  0.95 1h00m",
        "hpc           4  -           default           0.9025  3h00m   0.95 2h00m  0.95 1h00m",
        "suggested: hpc, 4 nodes, default: probability 0.9025 of finishing within 3h00m",
        "speculative: none (hpc, 4 nodes, next_to_run and hpc, 4 nodes, default share the "
        "resource hpc; no other configuration that can meet the deadline is independent of hpc, "
        "4 nodes, next_to_run)",
        "dropped (1):",
        NO_PREEMPTION_HISTORY,
    ]


def test_a_deadline_nothing_can_meet_exits_1(site: Path) -> None:
    assert advice(site, "-d", "1h", exit_code=1) == [
        heading("1h (3,600 s)"),
        "no configuration is likely enough (probability >= 0.5)",
        "speculative: none (no configuration can meet the deadline)",
        "dropped (3):",
        "  hpc, 4 nodes, default: even the shortest bound, 3h00m, is past the deadline of 1h00m",
        "  hpc, 4 nodes, next_to_run: even the shortest bound, 1h10m, is past the deadline of "
        "1h00m",
        NO_PREEMPTION_HISTORY,
    ]


def test_a_higher_threshold_drops_what_falls_below_it(site: Path) -> None:
    out = run("advise", "--deadline", "1h30m", "--threshold", "0.95", "-c", "site.toml", cwd=site)
    assert out.returncode == 1
    assert "  hpc, 4 nodes, next_to_run: probability 0.902 is below the threshold 0.95" in lines(
        out.stdout
    )


def test_json_for_scripts(site: Path) -> None:
    out = run("advise", "--deadline", "5400", "--json", "-c", "site.toml", cwd=site)
    assert out.returncode == 0
    answer = json.loads(out.stdout)
    assert answer["deadline"] == 5400.0
    assert [c["label"] for c in answer["ranked"]] == ["hpc, 4 nodes, next_to_run"]
    assert answer["ranked"][0]["bound"] == 4200.0
    assert answer["suggestion"]["label"] == "hpc, 4 nodes, next_to_run"
    assert [c["label"] for c in answer["dropped"]] == [
        "hpc, 4 nodes, default",
        "hpc, 4 nodes, preemption",
    ]


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (
            ["--deadline", "6 hours"],
            "error: --deadline: deadline '6 hours' is not a duration; write it like 6h, 90m, "
            "1h30m, 2d or 3600 (seconds)",
        ),
        (
            ["--deadline", "30m1h"],
            "error: --deadline: deadline '30m1h': give each unit once, largest first (d, h, m, "
            "s); write it like 6h, 90m, 1h30m, 2d or 3600 (seconds)",
        ),
        (
            ["--deadline", "0"],
            "error: --deadline: deadline '0' must be more than 0 seconds; write it like 6h, 90m, "
            "1h30m, 2d or 3600 (seconds)",
        ),
        ([], "error: give --deadline (e.g. --deadline 6h), or a command; see --help"),
    ],
)
def test_a_bad_deadline_is_one_line(site: Path, args: list[str], stderr: str) -> None:
    out = run("advise", *args, "-c", "site.toml", cwd=site)
    assert (out.returncode, out.stdout, out.stderr) == (2, "", stderr + "\n")


def test_a_site_with_nothing_to_rank_is_told_how_to_fix_it(tmp_path: Path) -> None:
    (tmp_path / "site.toml").write_text('[[clouds]]\nname = "local"\n')
    out = run("advise", "--deadline", "6h", "-c", "site.toml", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (
        "error: site.toml: no resources to rank: add [[advisor.resources]] to the site file "
        "(name, kind, nodes, policies, app)\n"
    )


def test_the_commands_of_the_group_still_run(site: Path) -> None:
    out = run(
        "advise", "record", "--phase", "allocation", "--resource", "hpc", "--policy",
        "preemption", "--nodes", "4", "--value", "30", "-c", "site.toml", cwd=site,
    )  # fmt: skip
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == "recorded allocation of 30 s on hpc (preemption, 4 nodes)\n"
