"""A job's life on the embedded site, as a person sees it from the command line:
``elasticsite run`` as a process, jobs run by real worker processes, ``submit``,
``queue --all``, ``job`` and ``cancel`` run as commands. Every wait is for a state."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests import waiting
from tests.cli import run_command
from tests.manager.conftest import kill_workers

from elasticsite.batch.identity import own_account
from elasticsite.batch.local import LocalBatch
from elasticsite.config import load_config
from elasticsite.manager.site import open_site

SITE = """
[manager]
site_id = "lab"
state_dir = "state"
interval = 0.2
heartbeat_timeout = 5.0
retry_backoff = 0.2
on_shutdown = "leave"

[policy]
name = "on_demand"

[batch]
type = "local"

[[clouds]]
name = "local"
max_instances = 1
boot_time = 0.3
shutdown_time = 0.1
options = { poll_interval = 0.1 }
"""
ENV = {"COLUMNS": "200", "PATH": "/usr/bin:/bin", "HOME": "/"}


def cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    config = str(cwd / "site.toml")
    return run_command(args[0], "-c", config, *args[1:], cwd=cwd, env=ENV, check=check)


def wait_for(what: str, check: Callable[[], str | None]) -> str:
    """Poll ``check`` until it returns text; that text."""
    return waiting.wait_for(check, 60.0, what, every=0.1)


def field(shown: str, label: str) -> str:
    """A value of ``elasticsite job``'s output."""
    match = re.search(rf"^  {re.escape(label)} +(.*)$", shown, re.M)
    assert match, f"no {label!r} in:\n{shown}"
    return match.group(1)


def job_in(cwd: Path, job_id: str, state: str) -> Callable[[], str | None]:
    """``elasticsite job`` output once the job's state starts with ``state``."""

    def check() -> str | None:
        shown = cli("job", job_id, cwd=cwd).stdout
        return shown if field(shown, "state").startswith(state) else None

    return check


class RunningSite:
    """``elasticsite run`` as a process in ``cwd``; stopped, its workers killed, after."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        (cwd / "site.toml").write_text(SITE)
        self.log = cwd / "run.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "elasticsite", "run", "-c", str(cwd / "site.toml"), "-v"],
                cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=ENV,
            )  # fmt: skip

    def submit(self, *argv: str, walltime: int = 60) -> str:
        done = cli("submit", "--walltime", str(walltime), "--", *argv, cwd=self.cwd)
        return done.stdout.strip()

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)
        site = open_site(load_config(self.cwd / "site.toml"), self.cwd)
        kill_workers(site)
        return self.log.read_text()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[RunningSite]:
    running = RunningSite(tmp_path)
    yield running
    running.stop()


def test_a_missing_command_fails_with_127_and_says_where_its_stderr_is(
    site: RunningSite,
) -> None:
    job_id = site.submit("es-no-such-command", "--flag")
    shown = wait_for("the job to fail", job_in(site.cwd, job_id, "failed"))
    state_dir = site.cwd / "state"
    stderr = state_dir / "jobs" / job_id / "stderr"
    assert field(shown, "state") == "failed (exit 127: command not found (es-no-such-command))"
    assert field(shown, "command") == "es-no-such-command --flag"
    assert field(shown, "stderr") == str(stderr)
    assert field(shown, "stdout") == "-"  # it never started
    assert field(shown, "attempts") == "1"
    node = field(shown, "node")
    worker = node.split()[0]
    assert node == f"{worker} (worker {worker})"
    assert field(shown, "worker log") == str(state_dir / "logs" / f"{worker}.log")
    assert "cannot start ['es-no-such-command', '--flag']" in stderr.read_text()
    assert "No such file or directory" in stderr.read_text()
    queue = cli("queue", "--all", cwd=site.cwd).stdout
    assert re.search(rf"│ {job_id} +│ failed \(exit 127: command not found", queue), queue
    assert "failed 1" in queue.splitlines()[-1]
    line = f"job {job_id} failed (exit 127: command not found (es-no-such-command)) on {worker}"
    logged = wait_for("the site's log line", lambda: line if line in site.log.read_text() else None)
    said = [x for x in site.log.read_text().splitlines() if logged in x]
    assert len(said) == 1 and said[0].rstrip().endswith(f"; its stderr: {stderr}"), said


def test_a_job_killed_by_a_signal_fails_with_that_signal(site: RunningSite) -> None:
    job_id = site.submit("sh", "-c", "echo about to go; kill -9 $$")
    shown = wait_for("the job to fail", job_in(site.cwd, job_id, "failed"))
    assert field(shown, "state") == "failed (killed by signal 9 (SIGKILL))"
    stdout = Path(field(shown, "stdout"))
    assert stdout.read_text() == "about to go\n"
    assert field(shown, "started") != "-" and field(shown, "finished") != "-"


def test_cancel_stops_a_running_job_and_removes_a_queued_one(site: RunningSite) -> None:
    running = site.submit("sleep", "300")
    queued = site.submit("sleep", "300")  # one worker, one core: it waits
    shown = wait_for("the first job to run", job_in(site.cwd, running, "running"))
    worker = field(shown, "node").split()[0]
    pid = _job_pid(site.cwd, running)
    assert field(cli("job", queued, cwd=site.cwd).stdout, "state") == "queued"
    done = cli("cancel", queued, running, cwd=site.cwd)
    assert done.stdout.splitlines() == [
        f"job {queued}: cancelled (it was queued)",
        f"job {running}: cancelled (it was running on {worker})",
    ]
    assert done.stderr == ""
    for job_id in (queued, running):
        said = field(cli("job", job_id, cwd=site.cwd).stdout, "state")
        assert said == f"cancelled (by {own_account()})"
    wait_for("the worker to kill the job", lambda: "gone" if not _alive(pid) else None)
    again = cli("cancel", running, cwd=site.cwd)
    assert again.stdout == f"job {running}: already cancelled\n"


def test_a_job_whose_worker_is_killed_is_requeued_and_counts_its_runs(
    site: RunningSite,
) -> None:
    marker = site.cwd / "first-run"
    script = f"[ -e {marker} ] && exit 0; touch {marker}; sleep 300"
    job_id = site.submit("sh", "-c", script)
    shown = wait_for("the job to run", job_in(site.cwd, job_id, "running"))
    worker = field(shown, "node").split()[0]
    os.kill(_worker_pid(site.cwd, worker), signal.SIGTERM)  # its instance shuts down
    shown = wait_for("the job's second run to end", job_in(site.cwd, job_id, "completed"))
    assert field(shown, "attempts") == "2"
    assert field(shown, "node").split()[0] != worker  # a new worker ran it


def test_unknown_ids_and_jobs_that_ended_are_one_line_each(tmp_path: Path) -> None:
    (tmp_path / "site.toml").write_text(SITE)
    first = cli("submit", "--", "true", cwd=tmp_path).stdout.strip()
    db = tmp_path / "state" / "batch.db"
    with sqlite3.connect(db) as conn:  # as a worker would have recorded its end
        conn.execute(
            "UPDATE jobs SET state = 'completed', exit_code = 0, finished_at = 1 WHERE id = ?",
            (int(first),),
        )
    done = cli("cancel", first, "99", "x", cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: cancel: job {first} already ended (completed)",
        "error: no job '99' in the local batch system",
        "error: no job 'x': local batch job ids are integers",
    ]
    shown = cli("job", "99", cwd=tmp_path, check=False)
    assert (shown.returncode, shown.stdout) == (1, "")
    assert shown.stderr == "error: no job '99' in the local batch system\n"


def _job_pid(cwd: Path, job_id: str) -> int:
    with sqlite3.connect(cwd / "state" / "batch.db") as conn:
        (pid,) = conn.execute("SELECT pid FROM jobs WHERE id = ?", (int(job_id),)).fetchone()
    assert pid, f"job {job_id} has no recorded pid"
    return int(pid)


def _worker_pid(cwd: Path, name: str) -> int:
    with sqlite3.connect(cwd / "state" / "cloud-local.db") as conn:
        (pid,) = conn.execute("SELECT pid FROM instances WHERE name = ?", (name,)).fetchone()
    return int(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][:1] != "Z"
    except OSError:
        return False


def test_what_a_job_says_of_itself_is_shown_as_plain_text(tmp_path: Path) -> None:
    (tmp_path / "site.toml").write_text(SITE)
    job_id = cli("submit", "--", "echo", "[red]x[/]", "\x1b]0;owned\x07", cwd=tmp_path).stdout
    shown = cli("job", job_id.strip(), cwd=tmp_path).stdout
    assert "\x1b" not in shown and "\x07" not in shown
    assert field(shown, "command") == "echo '[red]x[/]' '\\x1b]0;owned\\x07'"
    done = cli("cancel", "[bold]1[/]", cwd=tmp_path, check=False)
    assert done.stderr == "error: no job '[bold]1[/]': local batch job ids are integers\n"


def test_queue_lists_held_and_requeued_jobs_and_cancel_says_what_they_were(
    tmp_path: Path,
) -> None:
    (tmp_path / "site.toml").write_text(SITE)
    held, requeued = (cli("submit", "--", "sleep", "60", cwd=tmp_path).stdout.strip()
                      for _ in range(2))  # fmt: skip
    batch = LocalBatch(tmp_path / "state" / "batch.db")
    batch.hold(held)
    batch.register_node("n1", 1)  # as a worker would: the other job starts there
    batch.drain("n1", "keep the preempted job waiting")
    batch.preempt(requeued)
    queue = cli("queue", cwd=tmp_path).stdout
    assert re.search(rf"│ {held} +│ held +│", queue), queue
    assert re.search(rf"│ {requeued} +│ requeued \(after 1 run: preempted\) +│", queue), queue
    assert queue.splitlines()[-1] == (
        "cancelled 0, completed 0, failed 0, held 1, queued 0, requeued 1, running 0"
    )
    assert field(cli("job", requeued, cwd=tmp_path).stdout, "attempts") == "1"
    done = cli("cancel", held, requeued, cwd=tmp_path)
    assert done.stdout.splitlines() == [
        f"job {held}: cancelled (it was held)",
        f"job {requeued}: cancelled (it was requeued)",
    ]
