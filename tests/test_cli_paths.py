"""Where a site's files are, whatever directory a command runs in, and commands that
only look: the commands as a person runs them, real subprocesses in directories of
their own."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli import run_cli

SITE = """\
[manager]
site_id = "paths"
state_dir = "state"

[[clouds]]
name = "local"
"""


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, columns=200)


def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The site file's directory (with the file), and two others to run commands from."""
    conf, home, other = tmp_path / "conf", tmp_path / "home", tmp_path / "other"
    for d in (conf, home, other):
        d.mkdir()
    (conf / "site.toml").write_text(SITE)
    return conf, home, other


def test_a_relative_state_dir_is_next_to_the_site_file_wherever_commands_run(
    tmp_path: Path,
) -> None:
    conf, home, other = dirs(tmp_path)
    # The site file named relative to where the command runs, as a person types it.
    done = run("submit", "-c", "../conf/site.toml", "--", "echo", "hi", cwd=home)
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
    assert (conf / "state" / "batch.db").exists() and (conf / "state" / "manager.db").exists()
    # From elsewhere, the same site: its queue, its status, its job.
    cfg = str(conf / "site.toml")
    queue = run("queue", "-c", cfg, cwd=other)
    assert queue.returncode == 0 and "echo hi" in queue.stdout, queue.stderr
    status = run("status", "-c", cfg, cwd=other)
    assert status.returncode == 0 and "queue: " in status.stdout, status.stderr
    assert "queued 1" in status.stdout
    job = run("job", "-c", cfg, "1", cwd=other)
    assert job.returncode == 0 and "  state       queued" in job.stdout, job.stderr
    # Nothing was made where the commands ran.
    assert sorted(p.name for p in home.iterdir()) == []
    assert sorted(p.name for p in other.iterdir()) == []


def test_commands_that_look_create_nothing_and_say_where_they_looked(tmp_path: Path) -> None:
    conf, home, _ = dirs(tmp_path)
    cfg = conf / "site.toml"
    said = (
        f"error: no site state at {conf / 'state'} (the state_dir of {cfg}): its manager has "
        f"not run and no job was submitted there; `elasticsite run -c {cfg}` starts it\n"
    )
    for command in (
        ["status"],
        ["queue"],
        ["job", "1"],
        ["cancel", "1"],
        ["cloud", "reset", "local"],
    ):
        out = run(*command, "-c", str(cfg), cwd=home)
        assert (out.returncode, out.stderr, out.stdout) == (2, said, ""), command
    assert sorted(p.name for p in conf.iterdir()) == ["site.toml"]
    assert sorted(p.name for p in home.iterdir()) == []
