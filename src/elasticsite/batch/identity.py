"""Whose job it is, and running it as them: one rule for every batch system.

A request names the user the job is for (``JobRequest.user``; the urgent gate fills it
in from the kernel, never from the client). A job for the submitting account itself,
or for no one in particular (``""``), needs nothing. A job for another user is
submitted so that it runs as that user — ``sbatch --uid``, ``runuser -u USER --``
around ``qsub`` or ``condor_submit``, the embedded system's workers taking the user's
uid, gid and groups — which only root may do. Anyone else is refused, in one line,
rather than run another user's command as themself.

Jobs never inherit the environment of what submitted or started them (the gate, the
manager, a worker): the embedded system gives each job :func:`job_environment`, and
the submit tools of the other systems run as the user in an environment cleared but
for :data:`JOB_PATH`, ``LANG`` and the tool's own configuration variable.

Standard library only: every embedded worker process imports this module.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from elasticsite.batch.base import BatchError

__all__ = [
    "JOB_PATH",
    "ROOT_PATH",
    "Account",
    "account",
    "checked_submitter",
    "group_of",
    "is_own",
    "job_environment",
    "other_user",
    "own_account",
    "run_as",
    "this_account",
]

USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
"""A Unix user name as ``useradd`` takes it: never an option, a path or shell syntax."""
JOB_PATH = "/usr/local/bin:/usr/bin:/bin"
"""``PATH`` of a job (and of a submit tool run for a user)."""
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""``PATH`` of a job that runs as root."""
LANG = "C.UTF-8"


@dataclass(frozen=True, slots=True)
class Account:
    """A Unix account as a job runs under it."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    """Every group the account is in (its primary one included), from ``getgrouplist``."""
    home: str
    shell: str


def own_account() -> str:
    """The name of the account this process runs as (its number if it has none)."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def is_own(user: str) -> bool:
    """Whether a job for ``user`` is this process's own: ``""``, its account's name, or
    its uid as a number (``elasticsite submit`` without ``$USER``). The account's real
    name, never ``$USER``, which anyone can set."""
    return not user or user in (own_account(), str(os.geteuid()))


def other_user(user: str) -> str | None:
    """``user``, when a job for them is another user's and this process may submit it
    (it runs as root); None for this process's own job. Else BatchError, one line."""
    if is_own(user):
        return None
    if not isinstance(user, str) or not USER_NAME.fullmatch(user):
        raise BatchError(f"submit: {user!r} is not a valid user name")
    if os.geteuid() != 0:
        raise BatchError(
            f"submit: cannot submit as {user}: only root may submit for another user "
            f"(this runs as {own_account()})"
        )
    return user


def account(user: str) -> Account:
    """The account named ``user``; BatchError if this host has none."""
    try:
        pw = pwd.getpwnam(user)
    except (KeyError, ValueError):  # ValueError: a NUL in the name
        raise BatchError(f"submit: no user {user!r} on this host") from None
    groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))
    return Account(pw.pw_name, pw.pw_uid, pw.pw_gid, groups, pw.pw_dir, pw.pw_shell or "/bin/sh")


def this_account() -> Account:
    """The account this process runs as (a uid without a passwd entry: its number,
    home ``/``)."""
    uid, gid = os.geteuid(), os.getegid()
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return Account(str(uid), uid, gid, (gid,), "/", "/bin/sh")
    return Account(pw.pw_name, uid, gid, (gid,), pw.pw_dir, pw.pw_shell or "/bin/sh")


def checked_submitter(user: str) -> Account | None:
    """The account a job for ``user`` must run under when it is another user's
    (:func:`other_user`, then :func:`account`); None for this process's own job."""
    other = other_user(user)
    return None if other is None else account(other)


def group_of(user: str) -> str:
    """The primary group of ``user`` (a name or a uid number; ``""``: this process's
    account), by name where the group has one; ``""`` for a user this host lacks."""
    try:
        if not user:
            gid = pwd.getpwuid(os.geteuid()).pw_gid
        elif user.isdigit():
            gid = pwd.getpwuid(int(user)).pw_gid
        else:
            gid = pwd.getpwnam(user).pw_gid
    except (KeyError, ValueError, OverflowError):
        return ""
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def job_environment(acct: Account, job: dict[str, str]) -> dict[str, str]:
    """A job's whole environment: ``PATH``, ``HOME``, ``USER``, ``LOGNAME``, ``SHELL``,
    ``LANG`` for ``acct``, and the job's own ``ELASTICSITE_*`` variables ``job``."""
    env = {
        "PATH": ROOT_PATH if acct.uid == 0 else JOB_PATH,
        "HOME": acct.home,
        "USER": acct.name,
        "LOGNAME": acct.name,
        "SHELL": acct.shell,
        "LANG": LANG,
    }
    env.update({k: v for k, v in job.items() if k.startswith("ELASTICSITE_")})
    return env


def run_as(user: str, argv: Sequence[str], keep: Iterable[str] = ()) -> list[str]:
    """``argv`` (a batch system's submit tool) run as ``user`` by ``runuser``, in an
    environment holding only :data:`JOB_PATH`, ``LANG``, the variables ``runuser`` sets
    for the user (``HOME``, ``SHELL``, ``USER``, ``LOGNAME``) and those of ``keep`` this
    process has (the tool's configuration file, such as ``CONDOR_CONFIG``). The tool
    is found on this process's ``PATH``."""
    tool = shutil.which(argv[0]) or argv[0]
    runuser = shutil.which("runuser", path=ROOT_PATH) or "runuser"
    kept = [f"{name}={os.environ[name]}" for name in keep if name in os.environ]
    return ["env", "-i", f"PATH={JOB_PATH}", f"LANG={LANG}", *kept,
            runuser, "-u", user, "--", tool, *argv[1:]]  # fmt: skip
