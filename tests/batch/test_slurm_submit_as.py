"""Submitting for another user on Slurm: only root may, with ``--uid`` and an
``--export`` of the job's own environment (sbatch would pass on the gate's)."""

from __future__ import annotations

import getpass
import os
import pwd

import pytest

from elasticsite.batch.base import BatchError
from elasticsite.batch.identity import JOB_PATH
from elasticsite.batch.slurm_submit import as_user as _as_user


def test_the_caller_needs_no_flag() -> None:
    assert _as_user("") == [] and _as_user(getpass.getuser()) == []
    assert _as_user(str(os.geteuid())) == []  # `elasticsite submit` without $USER


def test_root_submits_for_another_user_with_uid_and_their_own_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setenv("ELASTICSITE_TEST_GATE_SECRET", "the gate's own")  # never exported
    nobody = pwd.getpwnam("nobody")
    assert _as_user("nobody") == [
        "--uid=nobody",
        f"--export=PATH={JOB_PATH},HOME={nobody.pw_dir},USER=nobody,LOGNAME=nobody,"
        f"SHELL={nobody.pw_shell},LANG=C.UTF-8",
    ]
    with pytest.raises(BatchError, match="no user 'es-no-such-user' on this host"):
        _as_user("es-no-such-user")


def test_anyone_else_is_refused_rather_than_running_the_job_as_themself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    monkeypatch.setattr("getpass.getuser", lambda: "svc")
    with pytest.raises(BatchError, match="only root may submit for another user"):
        _as_user("ann")


@pytest.mark.parametrize("name", ["-x", "a b", "ann;id", "x" * 40, "$(id)"])
def test_names_that_are_no_user_names_are_refused(name: str) -> None:
    with pytest.raises(BatchError, match="not a valid user name"):
        _as_user(name)
