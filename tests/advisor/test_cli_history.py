"""``elasticsite advise`` import, record, probe and evaluate, run as a person runs them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from elasticsite.advisor.history import HistoryStore

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"


def run(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "elasticsite", "advise", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=check,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin", "HOME": str(cwd)},
    )


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """The embedded example site with an [advisor] section: one command repository."""
    cfg = tmp_path / "site.toml"
    cfg.write_text(
        (ROOT / "examples" / "local.toml").read_text()
        + "\n[advisor]\n"
        + "[[advisor.repositories]]\n"
        + 'name = "scratch"\n'
        + f'command = ["{sys.executable}", "-c", "pass"]\n'
        + "bytes = 1048576\n"
    )
    return cfg


def history(tmp_path: Path) -> HistoryStore:
    return HistoryStore(tmp_path / "elasticsite-state" / "advisor.db")


def test_import_adds_a_file_once(site: Path, tmp_path: Path) -> None:
    shutil.copy(DATA / "sacct-23.11.json", tmp_path / "mila.json")
    out = run("import", "mila.json", "-c", "site.toml", cwd=tmp_path)
    assert out.stdout == "mila.json: 6 new observations of 6 into elasticsite-state/advisor.db\n"
    again = run("import", "mila.json", "-c", "site.toml", cwd=tmp_path)
    assert again.stdout == "mila.json: 0 new observations of 6 into elasticsite-state/advisor.db\n"
    assert history(tmp_path).count("execution") == 2
    shutil.copy(DATA / "RICC-2010-2-first3000.swf.gz", tmp_path / "ricc.swf.gz")
    swf = run("import", "ricc.swf.gz", "--resource", "ricc", "-c", "site.toml", cwd=tmp_path)
    assert swf.stdout.startswith("ricc.swf.gz: 3,000 new observations of 3,000 into")
    assert {k.resource for k in history(tmp_path).keys("allocation")} == {
        "main",
        "ricc:q1",
        "ricc:q2",
    }


def test_import_names_a_bad_file_and_line_and_adds_nothing(site: Path, tmp_path: Path) -> None:
    (tmp_path / "drills.csv").write_text(
        "phase,resource,value,at\nallocation,hpc,60,1700000000\nallocation,hpc,soon,1700000100\n"
    )
    out = run("import", "drills.csv", "-c", "site.toml", cwd=tmp_path, check=False)
    assert out.returncode == 2
    assert out.stderr == "error: drills.csv:3: value: not a number: 'soon'\n"
    assert out.stdout == ""
    assert history(tmp_path).count() == 0
    missing = run("import", "nope.json", "-c", "site.toml", cwd=tmp_path, check=False)
    assert (missing.returncode, missing.stderr) == (2, "error: nope.json: no such file\n")


def test_record_adds_one_drill_observation(site: Path, tmp_path: Path) -> None:
    args = ["record", "-c", "site.toml", "--phase", "allocation", "--resource", "hpc"]
    drill = ["--nodes", "4", "--policy", "next_to_run", "--ref", "drill-7", "--trial", "t7"]
    first = run(*args, "--value", "120", *drill, "--at", "2024-05-01T12:00:00", cwd=tmp_path)
    assert first.stdout == "recorded allocation of 120 s on hpc (next_to_run, 4 nodes)\n"
    again = run(*args, "--value", "120", "--ref", "drill-7", cwd=tmp_path)
    assert again.stdout == "already recorded: allocation of drill-7 on hpc\n"
    (stored,) = history(tmp_path).observations()
    assert (stored.source, stored.policy, stored.nodes, stored.trial, stored.at) == (
        "drill",
        "next_to_run",
        4,
        "t7",
        1714564800.0,
    )
    bad = run(*args[:-4], "--phase", "queue", "--resource", "hpc", "--value", "1",
              cwd=tmp_path, check=False)  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr == (
        "error: phase: must be one of input, allocation, execution, output, probe (got 'queue')\n"
    )
    when = run(*args, "--value", "1", "--at", "May 1st", cwd=tmp_path, check=False)
    assert when.stderr == "error: --at: not epoch seconds or an ISO 8601 time: 'May 1st'\n"


def test_probe_once_records_each_repository(site: Path, tmp_path: Path) -> None:
    out = run("probe", "-c", "site.toml", "--once", "--resource", "hpc", cwd=tmp_path)
    name, rest = out.stdout.split(": ", 1)
    assert name == "scratch" and rest.startswith("1.0 MiB in ") and rest.endswith(" MiB/s)\n")
    (probe,) = history(tmp_path).observations("probe")
    assert (probe.resource, probe.repository, probe.nbytes) == ("hpc", "scratch", 1048576)


def test_probe_without_repositories_says_so(tmp_path: Path) -> None:
    (tmp_path / "site.toml").write_text((ROOT / "examples" / "local.toml").read_text())
    out = run("probe", "-c", "site.toml", "--once", cwd=tmp_path, check=False)
    assert (out.returncode, out.stderr) == (
        2,
        "error: site.toml: no [[advisor.repositories]] to probe\n",
    )
