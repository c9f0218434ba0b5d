"""An embedded worker's jobs run as whom they are for, with nothing of the worker's:
not its account, its environment, its open files nor its state directory."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from tests.users import real_users

from elasticsite.batch.identity import JOB_PATH, Account
from elasticsite.batch.local_schema import Assignment
from elasticsite.clouds.local_jobs import CANNOT_RUN, NOT_FOUND, JobLauncher, JobRun, Refused

SECRET = "ELASTICSITE_TEST_WORKER_SECRET"
JOB_VARS = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "ELASTICSITE_JOB_ID",
            "ELASTICSITE_NODE", "ELASTICSITE_CORES"}  # fmt: skip
PROBE = """
import json, os, sys
try:
    open(sys.argv[1]).read()
    key = "READ"
except OSError as exc:
    key = exc.strerror
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
                  "cwd": os.getcwd(), "env": dict(os.environ), "key": key,
                  "fds": sorted(int(f) for f in os.listdir("/proc/self/fd"))}))
"""


def launcher(tmp_path: Path) -> JobLauncher:
    return JobLauncher(tmp_path / "state" / "jobs", "w1", "lab", preexec=lambda: None)


def finished(run: JobRun | Refused) -> int:
    assert isinstance(run, JobRun), run
    return run.proc.wait()


def refused(run: JobRun | Refused) -> int:
    assert isinstance(run, Refused), run
    return run.code


def test_another_users_job_runs_as_them_in_their_own_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "resource.key"  # the site's secret, 0600
    key.write_text("esk_secret")
    key.chmod(0o600)
    monkeypatch.setenv(SECRET, "the worker's own")
    leaked = os.open(key, os.O_RDONLY)  # an open file of the worker's, even inheritable
    os.set_inheritable(leaked, True)
    try:
        with real_users() as (ann,):
            argv = ["python3", "-c", PROBE, str(key)]
            run = launcher(tmp_path).start(Assignment("7", 1, argv, 2, 60.0, ann.pw_name))
            assert finished(run) == 0
            job_dir = Path(ann.pw_dir) / "elasticsite-jobs" / "lab" / "7"
            seen = json.loads((job_dir / "stdout").read_text())
            modes = {p.name: (p.stat().st_uid, stat.S_IMODE(p.stat().st_mode))
                     for p in (job_dir, job_dir / "stdout", job_dir / "stderr")}  # fmt: skip
    finally:
        os.close(leaked)
    assert (seen["uid"], seen["gid"]) == (ann.pw_uid, ann.pw_gid)
    assert set(seen["groups"]) == set(os.getgrouplist(ann.pw_name, ann.pw_gid))
    assert seen["cwd"] == str(job_dir)
    assert seen["key"] == "Permission denied"
    assert leaked not in seen["fds"] and seen["fds"][:3] == [0, 1, 2]
    env = seen["env"]
    assert set(env) == JOB_VARS and SECRET not in env
    assert (env["USER"], env["HOME"], env["PATH"]) == (ann.pw_name, ann.pw_dir, JOB_PATH)
    assert (env["ELASTICSITE_JOB_ID"], env["ELASTICSITE_CORES"]) == ("7", "2")
    assert modes == {n: (ann.pw_uid, 0o700 if n == "7" else 0o600) for n in modes}
    assert not (tmp_path / "state" / "jobs" / "7").exists()  # nothing of the site's for it


def test_a_worker_that_is_not_root_runs_no_one_elses_job(tmp_path: Path) -> None:
    jobs = launcher(tmp_path)
    jobs.me = Account("svc", 4242, 4242, (4242,), "/home/svc", "/bin/sh")
    assert refused(jobs.start(Assignment("3", 1, ["id"], 1, 60.0, "nobody"))) == CANNOT_RUN
    told = (tmp_path / "state" / "jobs" / "3" / "stderr").read_text()
    assert "it is nobody's, and this worker runs as svc, not as root" in told


def test_a_job_whose_user_is_gone_or_homeless_does_not_start(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: runs jobs as other users")
    jobs = launcher(tmp_path)
    assert refused(jobs.start(Assignment("4", 1, ["id"], 1, 60.0, "es-gone"))) == CANNOT_RUN
    assert "no user 'es-gone'" in (tmp_path / "state" / "jobs" / "4" / "stderr").read_text()
    if os.path.isdir("/nonexistent"):
        return
    assert refused(jobs.start(Assignment("5", 1, ["id"], 1, 60.0, "nobody"))) == CANNOT_RUN
    assert "cannot use /nonexistent/elasticsite-jobs/lab/5" in capfd.readouterr().err


def test_a_missing_command_is_refused_with_127_and_says_so_on_stderr(tmp_path: Path) -> None:
    result = launcher(tmp_path).start(Assignment("9", 1, ["es-no-such-command", "-x"], 1, 60.0))
    assert isinstance(result, Refused)
    assert (result.code, result.reason) == (NOT_FOUND, "command not found (es-no-such-command)")
    assert result.workdir == str(tmp_path / "state" / "jobs" / "9")
    told = (tmp_path / "state" / "jobs" / "9" / "stderr").read_text()
    assert told.startswith("elasticsite: cannot start ['es-no-such-command', '-x']: ")
    assert "No such file or directory" in told


def test_the_workers_own_job_gets_a_clean_environment_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET, "the worker's own")
    monkeypatch.setenv("ELASTICSITE_USERDATA", "/state/userdata/w1.json")
    argv = ["python3", "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
    assert finished(launcher(tmp_path).start(Assignment("8", 1, argv, 1, 60.0, ""))) == 0
    env = json.loads((tmp_path / "state" / "jobs" / "8" / "stdout").read_text())
    assert set(env) == JOB_VARS
