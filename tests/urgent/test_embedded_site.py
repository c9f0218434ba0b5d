"""Urgent jobs on the embedded site with its cluster full: `elasticsite urgent submit`
against a real server, preemption and next-to-run, and the preempted owner's
compensation."""

from __future__ import annotations

import getpass
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType

import pytest
from tests.cli import local_cloud, run_command, site_toml, toml_table
from tests.manager.conftest import kill_workers, wait_for

from elasticsite.batch.base import JobRequest
from elasticsite.config import load_config
from elasticsite.manager.site import Site as EmbeddedSite
from elasticsite.manager.site import open_site
from elasticsite.model import Job, JobState
from elasticsite.urgent.store import COMPENSATION
from elasticsite.urgent.tokens import TokenState, Urgency

from .test_routes import Site as Server

ME = getpass.getuser()
CAROL = {"account": "carol"}


@pytest.fixture
def full(tmp_path: Path) -> Iterator[tuple[EmbeddedSite, Server, Path]]:
    """A running embedded site whose two workers are busy with carol's jobs, and the
    urgent server with a red token whose team is whoever runs the tests.

    Carol's jobs are charged to her account but run as whoever runs the tests: a job is
    run as the user it is for, and only root may submit for another (real) user."""
    with running_site(tmp_path) as found:
        yield found


def carol_gate(cfg: Path) -> Path:
    """The file whose creation ends carol's jobs (those started by :func:`running_site`
    without ``carol_runs``): the cluster stays full, however slow the machine, until the
    test says otherwise."""
    return cfg.parent / "carol.gate"


def until(gate: Path) -> list[str]:
    """A job's command that runs until ``gate`` exists."""
    return ["sh", "-c", 'while [ ! -e "$1" ]; do sleep 0.1; done', "job", str(gate)]


@contextmanager
def running_site(
    tmp_path: Path,
    policy: Mapping[str, object] = MappingProxyType({}),
    cloud: Mapping[str, object] = MappingProxyType({}),
    carol_runs: float | None = None,
) -> Iterator[tuple[EmbeddedSite, Server, Path]]:
    """The site of :func:`full`, with the settings ``policy`` and ``cloud`` added to its
    policy and its cloud;
    carol's jobs run ``carol_runs`` seconds, or by default until :func:`carol_gate`."""
    (tmp_path / "server").mkdir()
    server = Server(tmp_path / "server")
    # The site's submit path: a resource principal for "lab", its key in a 0600 file.
    _, key = server.service.principals.add("lab-submit", "resource", time.time(),
                                           resources=["lab"])  # fmt: skip
    key_file = tmp_path / "lab.key"
    key_file.write_text(key)
    key_file.chmod(0o600)
    token, _ = server.store.issue(["lab"], Urgency.RED, 3600, server.clock(), issued_by="ops")
    server.store.add_member(token.id, "me", {"lab": ME}, server.clock(), "manager")
    server.store.activate(token, server.clock(), "manager")
    cfg = tmp_path / "site.toml"
    urgent = {"server": f"https://127.0.0.1:{server.port}", "ca": str(server.cert),
              "key_file": str(key_file)}  # fmt: skip
    text = site_toml(
        "lab",
        local_cloud("lab", 2, seed=2, **cloud),
        state_dir=str(tmp_path / "state"),
        on_shutdown="leave",
        policy={"name": "on_demand", **policy},
        extra=toml_table("urgent", urgent),
    )
    cfg.write_text(text)
    site = open_site(load_config(cfg), tmp_path)
    manager = site.manager()
    thread = threading.Thread(target=manager.run, daemon=True)
    thread.start()
    try:
        command = until(carol_gate(cfg)) if carol_runs is None else ["sleep", str(carol_runs)]
        for _ in range(2):
            site.batch.submit(JobRequest(command, 1, 600.0, ME, attributes=CAROL))
        wait_for(lambda: sum(j.state is JobState.RUNNING for j in site.batch.jobs()) == 2,
                 60, "the cluster full")  # fmt: skip
        yield site, server, cfg
    finally:
        manager.stop()
        thread.join(30)
        server.stop()
        kill_workers(site)


def carol(command: list[str], walltime: float) -> JobRequest:
    return JobRequest(command, 1, walltime, ME, attributes=CAROL)


def carols(site: EmbeddedSite) -> list[Job]:
    return [j for j in site.batch.jobs() if j.attributes.get("account") == "carol"]


def urgent(cfg: Path, urgency: str, *command: str) -> subprocess.CompletedProcess[str]:
    return run_command(
        "urgent", "submit", "-c", str(cfg), "--urgency", urgency, "--", *command,
        timeout=60, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip


def test_red_with_preemption_starts_at_once_and_the_preempted_owner_is_compensated(
    full: tuple[EmbeddedSite, Server, Path],
) -> None:
    site, server, cfg = full
    done = urgent(cfg, "red", *until(carol_gate(cfg)))
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip()
    assert "red, preemption; preempted" in done.stderr
    # At once: it starts while carol's jobs would still run (they wait for their gate).
    wait_for(lambda: site.batch.job(job).state is not JobState.QUEUED, 60, "the urgent job")
    assert site.batch.job(job).user == ME
    assert sorted(j.state for j in carols(site)) == [JobState.REQUEUED, JobState.RUNNING]
    carol_gate(cfg).touch()
    wait_for(lambda: all(j.state is JobState.DONE for j in site.batch.jobs()), 60, "all done")
    sessions = server.store.sessions_of("lab", ME, server.clock())  # the preempted owner's
    assert [(s.single_use, s.state(server.clock())) for s in sessions
            if s.label == COMPENSATION] == [(True, TokenState.ACTIVE)]  # fmt: skip


def test_orange_is_next_to_run_and_refusals_say_why(
    full: tuple[EmbeddedSite, Server, Path],
) -> None:
    site, _, cfg = full
    waiting = [
        site.batch.submit(JobRequest(["sleep", "1"], 1, 60.0, ME, attributes=CAROL))
        for _ in range(2)
    ]
    done = urgent(cfg, "orange", "sleep", "1")
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip()
    assert "orange, next_to_run" in done.stderr and "preempted" not in done.stderr
    carol_gate(cfg).touch()  # carol's running jobs end only now: all three are queued
    wait_for(lambda: site.batch.job(job).state is JobState.DONE, 60, "the urgent job")
    started = site.batch.job(job).started_at
    assert started is not None
    assert all((site.batch.job(w).started_at or 1e18) >= started for w in waiting)
    # A second red job is fine; the cluster has no yellow-only rule, but a wrong key is not.
    Path(load_config(cfg).urgent.key_file).write_text("esk_wrong")  # type: ignore[union-attr]
    refused = urgent(cfg, "red", "true")
    assert refused.returncode == 1
    assert "urgent submit refused: the urgent services answered 401" in refused.stderr
