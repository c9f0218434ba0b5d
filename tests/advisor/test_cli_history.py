"""``elasticsite advise`` import, record, probe and evaluate, run as a person runs them."""

from __future__ import annotations

import csv
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli import run_cli

from elasticsite.history.observations import HistoryStore

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"


def run(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_cli("advise", *args, cwd=cwd, check=check)


def example_without_repositories() -> str:
    """The example site file, cut before its repositories (which come last)."""
    return (ROOT / "examples" / "local.toml").read_text().split("[[advisor.repositories]]")[0]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """The embedded example site (its [advisor] section) with one command repository."""
    cfg = tmp_path / "site.toml"
    cfg.write_text(
        example_without_repositories()
        + "\n[[advisor.repositories]]\n"
        + 'name = "scratch"\n'
        + f'command = ["{sys.executable}", "-c", "pass"]\n'
        + "bytes = 1048576\n"
    )
    return cfg


def history(tmp_path: Path) -> HistoryStore:
    return HistoryStore(tmp_path / "elasticsite-state" / "advisor.db")


def test_import_adds_a_file_once(site: Path, tmp_path: Path) -> None:
    shutil.copy(DATA / "sacct-23.11.json", tmp_path / "mila.json")
    out = run("import", "mila.json", "--qos", "urgent=next_to_run", "-c", "site.toml", cwd=tmp_path)
    # the site file's state_dir, taken from the file's own directory
    db = tmp_path / "elasticsite-state" / "advisor.db"
    assert out.stdout == f"mila.json: 6 new observations of 6 into {db}\n"
    assert [k.policy for k in history(tmp_path).keys("allocation")] == ["default", "next_to_run"]
    again = run("import", "mila.json", "-c", "site.toml", cwd=tmp_path)
    assert again.stdout == f"mila.json: 0 new observations of 6 into {db}\n"
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
    qos = run("import", "drills.csv", "--qos", "urgent", "-c", "site.toml", cwd=tmp_path,
              check=False)  # fmt: skip
    assert qos.stderr == (
        "error: --qos: expected QOS=POLICY with a policy among default, next_to_run, preemption, "
        "qos, suspension, migration, got 'urgent'\n"
    )


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
    (tmp_path / "site.toml").write_text(example_without_repositories())
    out = run("probe", "-c", "site.toml", "--once", cwd=tmp_path, check=False)
    assert (out.returncode, out.stderr) == (
        2,
        "error: site.toml: no [[advisor.repositories]] to probe\n",
    )


def test_evaluate_a_real_trace(tmp_path: Path) -> None:
    shutil.copy(DATA / "RICC-2010-2-first3000.swf.gz", tmp_path / "ricc.swf.gz")
    out = run("evaluate", "ricc.swf.gz", "--resource", "ricc", cwd=tmp_path)
    assert out.stdout == RICC_EVALUATION


RICC_EVALUATION = """\
ricc.swf.gz: 3,000 observations; bounds on the 0.95 quantile at 0.95 confidence
predicted 2,399, not predicted 601 (listed last), seeded 0

correctness: the share of delays at or under their bound
┏━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━┳━━━━━━━┓
┃ resource ┃ policy  ┃ trials ┃ queue ┃
┡━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━╇━━━━━━━┩
│ ricc:q1  │ default │      - │ 80.4% │
│ ricc:q2  │ default │      - │     - │
└──────────┴─────────┴────────┴───────┘
accuracy: over-prediction, 100 x (sum of bounds - sum of delays) / sum of delays
┏━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━┓
┃ resource ┃ policy  ┃ queue ┃
┡━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━┩
│ ricc:q1  │ default │ 17.6% │
│ ricc:q2  │ default │     - │
└──────────┴─────────┴───────┘
queue by size class (nodes): correctness, over-prediction
┏━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━┳━━━━━━┳━━━━━━━━┳━━━━━━━━━┳━━━━━━┳━━━━━━━━━┳━━━━━━━┓
┃ resource ┃ policy  ┃         ┃    1 ┃      2 ┃     3-4 ┃  5-8 ┃    9-16 ┃ 17-32 ┃
┡━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━╇━━━━━━╇━━━━━━━━╇━━━━━━━━━╇━━━━━━╇━━━━━━━━━╇━━━━━━━┩
│ ricc:q1  │ default │ correct │  78% │    97% │    100% │  93% │    100% │   85% │
│          │         │ over    │ -10% │ 2,190% │ 35,437% │ 233% │ 12,459% │   -9% │
└──────────┴─────────┴─────────┴──────┴────────┴─────────┴──────┴─────────┴───────┘
not predicted:
  ricc:q1 default queue nodes 1: 59 of 2,002 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 58)
  ricc:q1 default queue nodes 2: 59 of 208 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 58)
  ricc:q1 default queue nodes 3-4: 95 of 114 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 55)
  ricc:q1 default queue nodes 5-8: 117 of 193 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 58)
  ricc:q1 default queue nodes 9-16: 59 of 86 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 58)
  ricc:q1 default queue nodes 17-32: 181 of 366 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 22)
  ricc:q1 default queue nodes 33-64: 16 of 16 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 13)
  ricc:q1 default queue nodes 65-128: 2 of 2 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 1)
  ricc:q1 default queue nodes 129-256: 4 of 4 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 3)
  ricc:q2 default queue nodes 1: 2 of 2 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 1)
  ricc:q2 default queue nodes 2: 6 of 6 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 5)
  ricc:q2 default queue nodes 3-4: 1 of 1 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 0)
"""  # noqa: E501


def drills(path: Path, trials: int = 70) -> None:
    """Urgent drills on one resource under two policies: probes of the input repository
    before each, then its four phases. Transfers are a little slower than the probes,
    output transfers more so, as paper 004 saw with small probes."""
    rng = random.Random(14)
    rows = []
    t = 1_700_000_000.0
    for policy, count, queue in (("default", trials, 1800.0), ("next_to_run", trials - 5, 120.0)):
        for n in range(count):
            for i in range(3):
                spb = f"{rng.uniform(0.8e-8, 1.2e-8):.4g}"
                rows.append(["probe", "hpc", "", "", spb, t + i * 60, "archive", "", 2**26, ""])
            t += 600
            trial = f"{policy}-{n}"
            staged = {"repository": "archive", "nbytes": 10**9}
            for phase, value, extra in (
                ("input", 1e9 * rng.uniform(0.8e-8, 1.3e-8), staged),
                ("allocation", rng.expovariate(1 / queue), {}),
                ("execution", rng.uniform(3300, 3900), {"app": "flash"}),
                ("output", 1e8 * rng.uniform(0.8e-8, 1.5e-8), {**staged, "nbytes": 10**8}),
            ):
                value = round(value, 2)
                t += value
                rows.append([phase, "hpc", policy, 16, value, t, extra.get("repository", ""),
                             extra.get("app", ""), extra.get("nbytes", ""), trial])  # fmt: skip
            t += 3600
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["phase", "resource", "policy", "nodes", "value", "at", "repository", "app",
                      "nbytes", "trial"])  # fmt: skip
        out.writerows(rows)


def test_evaluate_drills_lays_out_every_phase_and_trials_overall(tmp_path: Path) -> None:
    drills(tmp_path / "drills.csv")
    out = run("evaluate", "drills.csv", cwd=tmp_path)
    assert out.stdout == DRILLS_EVALUATION
    figures = json.loads(run("evaluate", "drills.csv", "--json", cwd=tmp_path).stdout)
    (default, urgent) = figures["rows"]
    assert (default["policy"], default["trials"], urgent["trials"]) == ("default", 70, 65)
    assert default["phases"]["overall"]["predicted"] == 70 - 59
    assert figures["predicted"] + figures["not_predicted"] == figures["observations"] == 540


DRILLS_EVALUATION = """\
drills.csv: 540 observations; bounds on the 0.95 quantile at 0.95 confidence
predicted 363, not predicted 177 (listed last), seeded 0

correctness: the share of delays at or under their bound
┏━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━┓
┃ resource ┃ policy      ┃ trials ┃ input ┃  queue ┃ execution ┃ output ┃ overall ┃
┡━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━┩
│ hpc      │ default     │     70 │ 75.7% │ 100.0% │    100.0% │  68.6% │  100.0% │
│ hpc      │ next_to_run │     65 │ 78.5% │  83.3% │     98.5% │  53.8% │  100.0% │
└──────────┴─────────────┴────────┴───────┴────────┴───────────┴────────┴─────────┘
accuracy: over-prediction, 100 x (sum of bounds - sum of delays) / sum of delays
┏━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━┓
┃ resource ┃ policy      ┃ input ┃  queue ┃ execution ┃ output ┃ overall ┃
┡━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━┩
│ hpc      │ default     │ 14.9% │ 714.9% │      6.8% │   7.1% │  158.5% │
│ hpc      │ next_to_run │ 14.4% │ 175.6% │      7.8% │   3.4% │   13.9% │
└──────────┴─────────────┴───────┴────────┴───────────┴────────┴─────────┘
queue by size class (nodes): correctness, over-prediction
┏━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━┓
┃ resource ┃ policy      ┃         ┃ 9-16 ┃
┡━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━┩
│ hpc      │ default     │ correct │ 100% │
│          │             │ over    │ 715% │
│ hpc      │ next_to_run │ correct │  83% │
│          │             │ over    │ 176% │
└──────────┴─────────────┴─────────┴──────┘
execution by size class (nodes): correctness, over-prediction
┏━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━┓
┃ resource ┃ policy      ┃         ┃ 9-16 ┃
┡━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━┩
│ hpc      │ default     │ correct │ 100% │
│          │             │ over    │   7% │
│ hpc      │ next_to_run │ correct │  98% │
│          │             │ over    │   8% │
└──────────┴─────────────┴─────────┴──────┘
not predicted:
  hpc default queue nodes 9-16: 59 of 70 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 58)
  hpc execution flash nodes 9-16: 59 of 135 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 58)
  hpc next_to_run queue nodes 9-16: 59 of 65 (needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 58)
"""  # noqa: E501


def test_evaluate_the_sites_own_history_and_bad_input(site: Path, tmp_path: Path) -> None:
    empty = run("evaluate", "-c", "site.toml", cwd=tmp_path, check=False)
    db = tmp_path / "elasticsite-state" / "advisor.db"
    assert (empty.returncode, empty.stderr) == (2, f"error: {db}: no observations to evaluate\n")
    shutil.copy(DATA / "sacct-23.11.json", tmp_path / "mila.json")
    run("import", "mila.json", "-c", "site.toml", cwd=tmp_path)
    out = run("evaluate", "-c", "site.toml", cwd=tmp_path)
    assert out.stdout.startswith(
        f"{db}: 6 observations; bounds on the 0.95 quantile at 0.95 "
        "confidence\npredicted 0, not predicted 6 (listed last), seeded 0\n"
    )
    assert "  main default queue nodes 1: 4 of 4 (needs at least 59 observations" in out.stdout
    bad = run("evaluate", "mila.json", "--quantile", "1.5", cwd=tmp_path, check=False)
    assert bad.returncode == 2
    assert (
        "Invalid value for '--quantile': must be strictly between 0 and 1 (got 1.5)" in bad.stderr
    )
