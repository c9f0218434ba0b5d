"""No silent long run: a simulation shows where it is when asked (or on a terminal), and
one that explodes past its workload's stated limits stops in one line naming why."""

from __future__ import annotations

import io
import math
import subprocess
from pathlib import Path

import pytest
from tests.cli import run_cli

from elasticsite.cli.status import StatusLine
from elasticsite.sim.cloud import sim_cloud
from elasticsite.sim.elastic import RunStatus, SimulationExploded, simulate_elastic
from elasticsite.sim.watch import RunLimits
from elasticsite.sim.workload import load_workload

from ..clouds.conftest import wait_for


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd)


def test_the_readme_scalability_example_finishes_on_its_own_cloud() -> None:
    # `simulate --workload scalability --cloud-limit 1000 --boot 74:205 --shutdown 4`:
    # a cloud of its own boot times and size shares no boot path, so the site grows to
    # the hundreds of VMs the bursts formula asks for and is done within the hour.
    model = sim_cloud("uchicago", "74:205", "4", vm_limit=1000)
    assert not model.path.shared
    work = load_workload("scalability", seed=0)
    m = simulate_elastic(work.arrivals(), [model], "bursts").metrics()
    assert m.jobs_done == m.jobs_total == 1150
    assert m.elapsed is not None and m.elapsed <= 3600.0
    assert 150 <= m.peak_workers <= 1000


def test_limits_are_stated_from_the_workload_and_the_clouds() -> None:
    work = load_workload("workload1", seed=0)  # 20 jobs at once, walltime 120 s
    limits = RunLimits.of(work.arrivals(), [sim_cloud("uchicago")], 10.0)
    # nominal: no span + 120 s walltime + 97 s boot + 7 s shutdown
    assert limits.nominal == 224.0 and limits.until == 100 * 224.0
    assert limits.wasted == 10 * 10 + 20
    # A workload too big for the cloud to run fast: its serial length is the limit.
    serial = RunLimits.of([(0.0, 1, 3600.0, 7200.0)] * 500, [sim_cloud("none")], 10.0)
    assert serial.until == 500 * (7200.0 + 60.0 + 6.0 + 20.0)


def test_boots_longer_than_the_stall_timeout_stop_the_run_naming_it() -> None:
    # Every worker stalls before it joins and is replaced, forever: stopped, and why.
    work = load_workload("workload1", seed=0)
    with pytest.raises(SimulationExploded) as err:
        simulate_elastic(work.arrivals(), [sim_cloud("uchicago", "1000")], "bursts")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("stopped at ") and "past 100x the workload's nominal 0:18:47" in text
    assert text.endswith("cloud 'cloud' boots in up to 1000 s, longer than stall_timeout (600 s)")
    # Held to a tighter limit on workers that never joined, it stops on that.
    with pytest.raises(SimulationExploded, match=r" 10 workers ended without joining \(limit 4\)"):
        simulate_elastic(work.arrivals(), [sim_cloud("uchicago", "1000")], "on_demand",
                         limits=RunLimits(math.inf, 4, 0.0))  # fmt: skip


def test_a_contended_cloud_too_big_for_its_boot_path_is_named() -> None:
    # UChicago's link and ten places at 1,000 VMs: 1,000 boots at once would take hours,
    # far past the stall timeout; held to a tight limit the run says so.
    model = sim_cloud("uchicago", vm_limit=1000, image_transfer=35.0, parallel_boots=10)
    work = load_workload("scalability", seed=0)
    with pytest.raises(SimulationExploded) as err:
        simulate_elastic(work.arrivals(), [model], "bursts",
                         limits=RunLimits(math.inf, 50, 0.0))  # fmt: skip
    assert str(err.value).endswith(
        "cloud 'cloud' boots its 1,000 VMs at once in up to 41,200 s over its shared boot "
        "path (image_transfer 35 s, parallel_boots 10), longer than stall_timeout (600 s): "
        "lower its VM limit or its contention"
    )


def test_a_run_reports_its_status_from_the_first_decision() -> None:
    seen: list[RunStatus] = []
    work = load_workload("workload1", seed=0)
    simulate_elastic(work.arrivals(), [sim_cloud("none")], "on_demand", status=seen.append)
    first = seen[0]
    assert (first.elapsed, first.jobs_done, first.jobs_total) == (0.0, 0, 20)
    assert first.line() == (
        "simulated 0:00:00, jobs 0/20 done, 10 workers (10 booting), 10 launched"
    )


def test_the_status_line_shows_only_when_asked_or_on_a_terminal() -> None:
    quiet = io.StringIO()
    with StatusLine(None, quiet) as line:  # not a terminal, not asked
        line.update("simulated 0:00:10")
    assert quiet.getvalue() == ""
    asked = io.StringIO()
    with StatusLine(True, asked) as line:
        line.update("simulated 0:00:10")
        line.update("simulated 0:00:20")  # too soon after the first: left out
    assert asked.getvalue() == "simulated 0:00:10\n"
    ticks = io.StringIO()
    with StatusLine(True, ticks) as line:
        line.ticking(lambda: "3/10 runs done")
        wait_for("a tick", lambda: ticks.getvalue())
    assert ticks.getvalue().startswith("3/10 runs done\n")


def test_simulate_progress_goes_to_stderr_only_when_asked(tmp_path: Path) -> None:
    args = ("simulate", "--workload", "workload1", "--cloud", "none", "--out", "o")
    quiet = cli(*args, cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == ""
    asked = cli(*args, "--progress", cwd=tmp_path)
    assert asked.returncode == 0
    assert asked.stderr.splitlines()[0] == (
        "simulated 0:00:00, jobs 0/20 done, 10 workers (10 booting), 10 launched"
    )
    assert "simulated" not in asked.stdout


def test_simulate_stops_an_exploding_run_in_one_line(tmp_path: Path) -> None:
    out = cli("simulate", "--workload", "workload1", "--boot", "1000", "--out", "o", cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: stopped at ")
    assert "longer than stall_timeout (600 s)" in lines[0]


def test_the_old_slowdown_option_names_its_replacement(tmp_path: Path) -> None:
    for command in ("simulate", "demo"):
        out = cli(command, "--boot-slowdown", "35", cwd=tmp_path)
        assert out.returncode == 2
        assert out.stderr.strip() == (
            "error: --boot-slowdown is gone: boots now share a finite boot path; use "
            "--image-transfer SECONDS and --parallel-boots N (docs/boot-model.md)"
        )
