"""A job for another user on PBS and HTCondor: submitted as that user, or refused.

The submit tools are real processes here: small stand-ins for ``qsub`` and
``condor_submit`` (no PBS or HTCondor can run on this machine) that report whom they
ran as, with what environment, and what they were given. Root tests create a real user.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.batch.htcondor_fake import FakeCondorPool
from tests.batch.pbs_fake import FakePbs
from tests.users import real_users

from elasticsite.batch.base import BatchError, JobRequest
from elasticsite.batch.htcondor import CondorBatch
from elasticsite.batch.htcondor_submit import description_text, submit_as
from elasticsite.batch.identity import JOB_PATH
from elasticsite.batch.pbs import PbsBatch

SECRET = "ELASTICSITE_TEST_GATE_SECRET"
REPORT = """#!/bin/sh
# Stands in for the real tool: says whom it runs as, its environment and its input.
report="$(dirname "$0")/report/$(basename "$0").txt"
{{ echo "uid=$(id -u)"; env | sort | sed 's/^/env:/'; {body}; }} > "$report"
echo "{answer}"
"""


@pytest.fixture
def not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as an unprivileged account (the site's, say) would be."""
    monkeypatch.setattr("os.geteuid", lambda: 4242)


@pytest.fixture
def tools(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory any user can reach holding fake ``qsub`` and ``condor_submit``, first
    on PATH; its ``report/`` is where they write (made the user's by each test)."""
    where = Path(tempfile.mkdtemp(prefix="es-tools-"))
    where.chmod(0o755)
    (where / "report").mkdir()
    (where / "report").chmod(0o777)  # the tools run as the test's user
    body = 'for last; do :; done; echo "owner=$(stat -c %u "$last")"; cat "$last"'
    (where / "qsub").write_text(REPORT.format(body=body, answer="4242.pbs-fake"))
    (where / "condor_submit").write_text(REPORT.format(body="cat", answer="77.0 - 77.0"))
    for tool in ("qsub", "condor_submit"):
        (where / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{where}:{os.environ['PATH']}")
    monkeypatch.setenv(SECRET, "the gate's own")
    try:
        yield where
    finally:
        shutil.rmtree(where)


def report(tools: Path, tool: str) -> tuple[int, dict[str, str], list[str]]:
    lines = (tools / "report" / f"{tool}.txt").read_text().splitlines()
    env = dict(line[4:].split("=", 1) for line in lines if line.startswith("env:"))
    rest = [line for line in lines[1:] if not line.startswith("env:")]
    return int(lines[0].removeprefix("uid=")), env, rest


# -- PBS -------------------------------------------------------------------------------


def test_pbs_refuses_another_users_job_unless_root(not_root: None) -> None:
    fake = FakePbs("openpbs")
    batch = PbsBatch("openpbs", runner=fake)
    with pytest.raises(BatchError, match="cannot submit as nobody: only root may submit for an"):
        batch.submit(JobRequest(["id"], user="nobody"))
    assert not any("qsub" in " ".join(c) for c in fake.calls) and not fake.jobs


def test_pbs_submits_another_users_job_as_them_with_a_clean_environment(tools: Path) -> None:
    batch = PbsBatch("openpbs")  # the real runner: the fake qsub is a real program
    with real_users() as (ann,):
        assert batch.submit(JobRequest(["echo", "two words"], user=ann.pw_name)) == "4242.pbs-fake"
        uid, env, rest = report(tools, "qsub")
    assert uid == ann.pw_uid
    assert env["USER"] == ann.pw_name and env["HOME"] == ann.pw_dir and env["PATH"] == JOB_PATH
    assert SECRET not in env
    assert rest[0] == f"owner={ann.pw_uid}"  # the script is theirs to read
    assert rest[-1] == "exec echo 'two words'"


def test_pbs_submits_the_callers_own_job_as_before() -> None:
    fake = FakePbs("openpbs")
    PbsBatch("openpbs", runner=fake).submit(JobRequest(["true"], user=""))
    (qsub,) = [c for c in fake.calls if c[0] == "qsub"]
    assert "runuser" not in qsub


# -- HTCondor ---------------------------------------------------------------------------


def test_htcondor_refuses_another_users_job_unless_root(not_root: None) -> None:
    pool = FakeCondorPool()
    with pytest.raises(BatchError, match="only root may submit for another user"):
        CondorBatch(pool).submit(JobRequest(["/bin/id"], user="nobody"))
    assert not pool.queue


def test_htcondor_hands_another_users_job_to_their_own_submit() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: submits for another user")
    pool = FakeCondorPool()
    job = CondorBatch(pool).submit(JobRequest(["/bin/id"], user="nobody"))
    assert pool.owners == {int(job.split(".")[0]): "nobody"}
    CondorBatch(pool).submit(JobRequest(["/bin/id"], user=""))  # our own: the bindings
    assert len(pool.queue) == 2 and len(pool.owners) == 1


def test_condor_submit_runs_as_the_user_with_the_description_on_stdin(tools: Path) -> None:
    description = {"universe": "vanilla", "executable": "/bin/echo", "arguments": '"a b"',
                   "+ElasticsiteCommand": '"echo \'a b\'"'}  # fmt: skip
    with real_users() as (ann,):
        assert submit_as(ann.pw_name, description) == 77
        uid, env, rest = report(tools, "condor_submit")
    assert uid == ann.pw_uid and env["USER"] == ann.pw_name and SECRET not in env
    assert "\n".join(rest) + "\n" == description_text(description)
    assert rest[-1] == "queue"


def test_a_line_break_never_reaches_condor_submit() -> None:
    with pytest.raises(BatchError, match="line break"):
        description_text({"executable": "/bin/true\nqueue 1000"})
