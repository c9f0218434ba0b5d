"""Whose job it is on the embedded batch system: another user's job is taken from root
only, for a real user with a home; anyone else is refused at submission, in one line,
and nothing is queued. Such a job is cancelled by root only too."""

from __future__ import annotations

import grp
import os

import pytest
from tests.users import real_users

from elasticsite.batch.base import BatchError, JobRequest
from elasticsite.batch.identity import own_account
from elasticsite.batch.local import LocalBatch
from elasticsite.model import JobState


@pytest.fixture
def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        monkeypatch.setattr("os.geteuid", lambda: 0)  # only the check needs it


def test_an_unprivileged_site_refuses_another_users_job(
    batch: LocalBatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 4242)  # the site's own account, not root
    for user in ("root", "nobody"):
        with pytest.raises(BatchError, match=f"^submit: cannot submit as {user}: only root may"):
            batch.submit(JobRequest(["id"], user=user))
    assert batch.jobs() == []
    batch.submit(JobRequest(["id"], user="4242"))  # its own, by number
    batch.submit(JobRequest(["id"], user=""))  # or no one's in particular
    assert len(batch.jobs()) == 2


def test_the_own_account_is_the_real_one_not_whatever_user_says(
    batch: LocalBatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 4242)
    monkeypatch.setenv("USER", "root")
    monkeypatch.setenv("LOGNAME", "root")
    with pytest.raises(BatchError, match="cannot submit as root"):
        batch.submit(JobRequest(["id"], user="root"))


@pytest.mark.parametrize(
    ("user", "why"),
    [
        ("es-no-such-user", "no user 'es-no-such-user' on this host"),
        ("nobody", r"user nobody has no home directory \(/nonexistent\)"),
        ("-x", "'-x' is not a valid user name"),
        ("ann;id", "is not a valid user name"),
        ("$(id)", "is not a valid user name"),
        ("1000", "is not a valid user name"),
    ],
)
def test_root_refuses_a_job_it_could_not_run_as_its_user(
    batch: LocalBatch, as_root: None, user: str, why: str
) -> None:
    if user == "nobody" and os.path.isdir("/nonexistent"):
        pytest.skip("this host gives nobody a home")
    with pytest.raises(BatchError, match=f"^submit: .*{why}"):
        batch.submit(JobRequest(["id"], user=user))
    assert batch.jobs() == []


def test_root_takes_a_real_users_job_for_them(batch: LocalBatch) -> None:
    with real_users() as (ann,):
        job = batch.submit(JobRequest(["id"], user=ann.pw_name))
    assert batch.job(job).user == ann.pw_name
    assert batch.job(batch.submit(JobRequest(["id"], user=own_account()))).user == "root"


def test_another_users_job_is_cancelled_by_root_only(
    batch: LocalBatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    with real_users() as (ann,):
        theirs = batch.submit(JobRequest(["sleep", "60"], user=ann.pw_name))
        own = batch.submit(JobRequest(["sleep", "60"]))
        with monkeypatch.context() as unprivileged:
            unprivileged.setattr("os.geteuid", lambda: 4242)  # the site's account, not root
            with pytest.raises(BatchError) as refused:
                batch.cancel(theirs)
            assert str(refused.value) == (
                f"cancel: job {theirs} is {ann.pw_name}'s; only root may cancel another "
                "user's job (this runs as 4242)"
            )
            assert batch.job(theirs).state is JobState.QUEUED
            batch.cancel(own)  # no one's in particular: the site's own
        batch.cancel(theirs)  # as root
        assert batch.job(theirs).state is JobState.CANCELLED
        assert batch.job(theirs).group == grp.getgrgid(ann.pw_gid).gr_name
