"""The command line as a person uses it: real subprocesses, real files."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pytest
from tests.cli import run_cli

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, check=check)


def test_demo_runs_the_embedded_site_and_writes_a_plot(tmp_path: Path) -> None:
    out = run("demo", "--speed", "30", "--out", "out", cwd=tmp_path)
    text = out.stdout
    assert "workload1 (20 jobs) with the bursts policy" in text
    assert "elapsed workload time" in text and "reactivity time max" in text
    assert "jobs done " in text.replace("│", " ")
    done = next(line for line in text.splitlines() if "jobs done" in line)
    assert done.split("│")[2].strip() == "20"
    png = tmp_path / "out" / "workload1-bursts.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = (tmp_path / "out" / "workload1-bursts-jobs.csv").read_text().splitlines()
    assert len(rows) == 21


def test_demo_rejects_unknown_names(tmp_path: Path) -> None:
    out = run("demo", "--policy", "nope", cwd=tmp_path, check=False)
    assert out.returncode == 2
    assert "unknown policy 'nope'; choose one of bursts, cloud_scheduler, core_demand" in out.stderr
    out = run("demo", "--workload", "nope", cwd=tmp_path, check=False)
    assert out.returncode == 2 and "unknown workload 'nope'" in out.stderr


def test_submit_queue_status_share_the_site(tmp_path: Path) -> None:
    cfg = tmp_path / "site.toml"
    cfg.write_text((ROOT / "examples" / "local.toml").read_text())
    first = run(
        "submit", "-c", str(cfg), "--walltime", "60", "--", "echo", "hello world", cwd=tmp_path
    )
    assert first.stdout.strip() == "1"
    run("submit", "-c", str(cfg), "--cores", "2", "--count", "2", "--", "sleep", "5", cwd=tmp_path)
    q = run("queue", "-c", str(cfg), cwd=tmp_path).stdout
    assert "echo 'hello world'" in q
    assert q.strip().splitlines()[-1] == (
        "cancelled 0, completed 0, failed 0, held 0, queued 3, requeued 0, running 0"
    )
    status = run("status", "-c", str(cfg), cwd=tmp_path).stdout
    assert "site local" in status and "queued 3" in status
    assert "recent transitions" not in status  # no manager has run yet
    assert "\nspending: 0.00 USD per hour now\n" in status
    assert "\nspent: 0.00 USD so far (private 0.00 USD, public 0.00 USD)\n" in status
    assert "budget" not in status
    assert (tmp_path / "elasticsite-state" / "batch.db").exists()


def test_submit_attributes_reach_the_batch_system_and_bad_ones_are_refused(
    tmp_path: Path,
) -> None:
    from elasticsite.batch.local import LocalBatch

    cfg = tmp_path / "site.toml"
    cfg.write_text((ROOT / "examples" / "local.toml").read_text())
    run("submit", "-c", str(cfg), "--attr", "qos=high", "--attr", "account=phys", "--", "true",
        cwd=tmp_path)  # fmt: skip
    bad = run("submit", "-c", str(cfg), "--attr", "qos", "--", "true", cwd=tmp_path, check=False)
    assert bad.returncode != 0 and "expected KEY=VALUE" in bad.stderr
    (job,) = LocalBatch(tmp_path / "elasticsite-state" / "batch.db").jobs()
    assert dict(job.attributes) == {"account": "phys", "qos": "high"}


def test_a_vm_type_no_cloud_offers_is_refused_at_submission(tmp_path: Path) -> None:
    from elasticsite.batch.local import LocalBatch

    cfg = tmp_path / "site.toml"
    cfg.write_text((ROOT / "examples" / "local.toml").read_text())
    out = run("submit", "-c", str(cfg), "--attr", "vm_type=gpu", "--", "true", cwd=tmp_path,
              check=False)  # fmt: skip
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == (
        "error: --attr vm_type=gpu: no cloud of this site offers that VM type "
        "(it has: m1.small, small)"
    )
    run("submit", "-c", str(cfg), "--attr", "vm_type=m1.small", "--", "true", cwd=tmp_path)
    (job,) = LocalBatch(tmp_path / "elasticsite-state" / "batch.db").jobs()
    assert job.attributes == {"vm_type": "m1.small"}


def test_submit_for_another_user_as_root(tmp_path: Path) -> None:
    from tests.users import real_users

    from elasticsite.batch.local import LocalBatch

    cfg = tmp_path / "site.toml"
    cfg.write_text((ROOT / "examples" / "local.toml").read_text())
    bad = run("submit", "-c", str(cfg), "--user", "-rf /", "--", "true", cwd=tmp_path,
              check=False)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --user: '-rf /' is not a user name"
    with real_users(1) as (ann,):
        run("submit", "-c", str(cfg), "--user", ann.pw_name, "--", "true", cwd=tmp_path)
        (job,) = LocalBatch(tmp_path / "elasticsite-state" / "batch.db").jobs()
        assert job.user == ann.pw_name
        nobody = run("submit", "-c", str(cfg), "--user", "es-no-such-user", "--", "true",
                     cwd=tmp_path, check=False)  # fmt: skip
        assert nobody.returncode == 2 and "es-no-such-user" in nobody.stderr
        assert len(nobody.stderr.strip().splitlines()) == 1


def test_status_says_why_a_cloud_is_closed_and_cloud_reset_opens_it(tmp_path: Path) -> None:
    from elasticsite.manager.store import StateStore

    cfg = tmp_path / "site.toml"
    cfg.write_text((ROOT / "examples" / "local.toml").read_text())
    run("submit", "-c", str(cfg), "--", "true", cwd=tmp_path)  # the site's state begins
    store = StateStore(tmp_path / "elasticsite-state" / "manager.db")
    store.save_cloud_health(
        {"public": {"closed_until": None, "kind": "credentials", "reason": "AuthFailure",
                    "failures": 0}}
    )  # fmt: skip
    out = run("status", "-c", str(cfg), cwd=tmp_path).stdout
    assert "cloud public: closed until reset" in out and "credentials: AuthFailure" in out
    done = run("cloud", "reset", "public", "-c", str(cfg), cwd=tmp_path).stdout
    assert "reset requested (was credentials: AuthFailure)" in done
    assert store.take_cloud_resets() == ["public"]
    bad = run("cloud", "reset", "nowhere", "-c", str(cfg), cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "no cloud named 'nowhere'" in bad.stderr


def test_bad_config_gives_one_clear_error(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[[clouds]]\nname = "c"\nmax_instances = -1\n')
    out = run("run", "-c", str(cfg), cwd=tmp_path, check=False)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "clouds[0].max_instances" in lines[0] and "-1" in lines[0]


@pytest.mark.parametrize(
    "section, message",
    [
        ('[site]\ncurrency = "euros"\n',
         "site.currency: must be a three-letter currency code such as USD or EUR (got 'euros')"),
        ('[policy]\nbudget = { amount = 500, period = "year" }\n',
         "policy.budget.period: Input should be 'day', 'week' or 'month' (got 'year')"),
        ("[policy]\nbudget = 500\n",
         'policy.budget: must be a table like { amount = 500, period = "month" } (periods: day, '
         "week, month; got 500)"),
    ],
)  # fmt: skip
def test_a_bad_currency_or_budget_is_one_error_line(
    tmp_path: Path, section: str, message: str
) -> None:
    cfg = tmp_path / "site.toml"
    cfg.write_text(section + '[[clouds]]\nname = "c"\n')
    for command in ("run", "status"):
        out = run(command, "-c", str(cfg), cwd=tmp_path, check=False)
        assert out.returncode == 2
        assert out.stderr.strip() == f"error: {cfg}: {message}", out.stderr


def test_policies_lists_every_builtin(tmp_path: Path) -> None:
    out = run("policies", cwd=tmp_path).stdout
    names = [line.split(":")[0] for line in out.splitlines()]
    assert names == [
        "bursts", "cloud_scheduler", "core_demand", "dedicated", "naive", "on_demand", "selective",
        "selective_global", "shortest_queue", "steady_stream", "weighted_queue",
    ]  # fmt: skip
    assert "goes to a cloud that can (paper 002)" in out


def test_simulate_replays_a_builtin_workload(tmp_path: Path) -> None:
    out = run("simulate", "--workload", "workload1", "--policy", "on_demand", "--billing", "1",
              "--out", "o", cwd=tmp_path).stdout  # fmt: skip
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines()
            if line.count("│") == 4}  # fmt: skip
    assert rows["jobs done"] == "20" and rows["workers launched"] == "10"
    # On paper 000's UChicago cloud ten boots at once take 94 (±3) + 9 x 35 s, then
    # two rounds of 60 s.
    assert 406.0 + 120.0 <= float(rows["elapsed workload time"]) <= 412.0 + 120.0
    assert (tmp_path / "o" / "workload1-on_demand.png").read_bytes()[:4] == b"\x89PNG"
    # The dedicated baseline's pool is booted and joined before the first job.
    out = run("simulate", "--workload", "workload1", "--policy", "dedicated", "--out", "o",
              cwd=tmp_path).stdout  # fmt: skip
    assert "│ elapsed workload time │   120.0 │ s" in out
    # Without the calibrated cloud: 60 s boots, no contention.
    out = run("simulate", "--workload", "workload1", "--policy", "on_demand", "--cloud", "none",
              "--out", "o", cwd=tmp_path).stdout  # fmt: skip
    assert "│ elapsed workload time │   180.0 │ s" in out


def test_simulate_reads_swf_and_names_bad_input(tmp_path: Path) -> None:
    trace = tmp_path / "t.swf"
    trace.write_text(
        "; MaxProcs: 4\n"
        "1 0 -1 100 1 -1 -1 1 200 -1 1 1 1 -1 1 -1 -1 -1\n"
        "2 10 -1 50 2 -1 -1 2 100 -1 1 1 1 -1 1 -1 -1 -1\n"
    )
    out = run("simulate", "--workload", str(trace), "--cores-per-vm", "2", "--out", "o",
              cwd=tmp_path).stdout  # fmt: skip
    assert "t.swf (2 jobs)" in out
    bad = run("simulate", "--workload", str(trace), "--out", "o", cwd=tmp_path, check=False)
    assert bad.returncode == 2
    assert "needs 2 processors but a VM has 1" in bad.stderr
    bad = run("simulate", "--boot", "9:1", cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "bad duration '9:1'" in bad.stderr


def _site(tmp_path: Path, clouds: str = '[[clouds]]\nname = "local"\n') -> Path:
    cfg = tmp_path / "site.toml"
    cfg.write_text(f'[manager]\nstate_dir = "{tmp_path / "state"}"\n{clouds}')
    return cfg


def _one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_unusable_state_files_are_one_error_line_each(tmp_path: Path) -> None:
    cfg = _site(tmp_path)
    state = tmp_path / "state"
    run("submit", "-c", str(cfg), "--", "true", cwd=tmp_path)  # the state exists
    commands = (["run"], ["status"], ["queue"], ["submit", "--", "true"])
    garbage = b"not a database at all\n" + bytes(range(256)) * 16
    for name in ("manager.db", "batch.db"):
        path = state / name
        kept = path.read_bytes()
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        path.write_bytes(garbage)
        for command in commands:
            out = run(command[0], "-c", str(cfg), *command[1:], cwd=tmp_path, check=False)
            line = _one_error_line(out)
            assert line == f"error: {path}: not an SQLite database (corrupt?)", command
        path.write_bytes(kept)
    # Unwritable: as root no mode stops a write, so a directory stands where the file goes.
    manager_db = state / "manager.db"
    manager_db.unlink()
    manager_db.mkdir()
    for command in commands:
        out = run(command[0], "-c", str(cfg), *command[1:], cwd=tmp_path, check=False)
        assert _one_error_line(out) == f"error: {manager_db}: cannot write (is a directory)"


def test_a_state_directory_that_cannot_be_made_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("")
    cfg = tmp_path / "site.toml"
    cfg.write_text('[manager]\nstate_dir = "blocker/state"\n[[clouds]]\nname = "local"\n')
    out = run("submit", "-c", str(cfg), "--", "true", cwd=tmp_path, check=False)
    line = _one_error_line(out)
    assert line.startswith(f"error: {tmp_path}/blocker/state: cannot create directory ("), line
    out = run("demo", "--out", "blocker/out", cwd=tmp_path, check=False)
    assert _one_error_line(out) == "error: blocker/out: cannot write (not a directory)"


@pytest.mark.parametrize(
    "options, message",
    [
        ("fail_boot = 2.0", "options.fail_boot: must be a probability in [0, 1] (got 2.0)"),
        ('seed = "x"', "options.seed: must be an integer (got 'x')"),
        ('boot_delay = "soon"', "options.boot_delay: must be a number of seconds in [0, 86400]"),
        ("poll_interval = inf", "options.poll_interval: must be in [0.001, 3600] s (got inf)"),
    ],
)
def test_bad_cloud_options_are_one_error_line(tmp_path: Path, options: str, message: str) -> None:
    cfg = _site(tmp_path, f'[[clouds]]\nname = "local"\noptions = {{ {options} }}\n')
    out = run("run", "-c", str(cfg), cwd=tmp_path, check=False)
    assert _one_error_line(out).startswith(f"error: {cfg}: clouds[0].{message}"), out.stderr


def test_a_broken_gzip_trace_is_one_error_line(tmp_path: Path) -> None:
    jobs = "".join(f"{i} 0 -1 100 1 -1 -1 1 200 -1 1 1 1 -1 1 -1 -1 -1\n" for i in range(1, 500))
    whole = gzip.compress(jobs.encode())
    (tmp_path / "cut.swf.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "junk.gz").write_bytes(b"\x1f\x8b" + bytes(range(256)) * 4)
    for name in ("cut.swf.gz", "junk.gz"):
        out = run("simulate", "--workload", name, "--out", "o", cwd=tmp_path, check=False)
        assert _one_error_line(out) == f"error: {name}: not a valid gzip stream (truncated?)"
