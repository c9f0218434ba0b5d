"""End to end on the embedded site: the manager's records feed ``elasticsite advise``.

The manager runs real jobs on real local cloud workers; every queue wait it saw and
every launch it made become history, drills add the application's run times, and the
advisor ranks the batch queue and the cloud against a deadline from that history.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest
from tests.cli import local_cloud, run_cli, site_toml
from tests.manager.conftest import kill_workers, wait_for

from elasticsite.batch.base import JobRequest
from elasticsite.config import load_config
from elasticsite.history.observations import HistoryStore, store_path
from elasticsite.manager.site import open_site
from elasticsite.model import JobState

LAUNCHES = 6
"""Launches recorded before asking: enough for a bound on the median (5 at 0.95)."""

ADVISOR = """\
[advisor]
threshold = 0.2

[[advisor.resources]]
name = "lab"
nodes = [1]
app = "sleep"

[[advisor.resources]]
name = "local"
kind = "cloud"
nodes = [1]
app = "sleep"
"""
SITE = site_toml(
    "lab",
    local_cloud("local", 2, boot_time=0.5, jitter=0.2, seed=7),
    state_dir="state",
    stall_timeout=20.0,
    on_shutdown="drain",
    shutdown_timeout=30.0,
    extra=ADVISOR,
)


def advise(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("advise", *args, "-c", "site.toml", cwd=cwd, timeout=120)


@pytest.mark.slow
def test_the_managers_records_feed_the_advisor(tmp_path: Path) -> None:
    (tmp_path / "site.toml").write_text(SITE)
    config = load_config(tmp_path / "site.toml")
    site = open_site(config, tmp_path)
    manager = site.manager()
    thread = threading.Thread(target=manager.run, daemon=True)
    thread.start()
    try:
        # One job at a time on an empty site: each waits for a worker of its own,
        # launched for it, which leaves once the job is done.
        for _ in range(LAUNCHES):
            job = site.batch.submit(JobRequest(["sleep", "0.3"], 1, 30.0))
            wait_for(lambda j=job: site.batch.job(j).state is JobState.DONE, 60, f"job {job}")
            wait_for(
                lambda: not any(r.worker.state.live for r in site.store.load()),
                60,
                "the worker to leave",
            )
    finally:
        manager.stop()
        thread.join(60)
        kill_workers(site)
    assert not thread.is_alive()

    # What the manager recorded is what happened, once each.
    jobs = site.batch.jobs()
    workers = site.store.load(include_done=True)
    with HistoryStore(store_path(tmp_path / "state")) as store:
        waits = store.observations("allocation", resource="lab")
        launches = store.observations("allocation", resource="local")
    assert {o.ref: o.value for o in waits} == pytest.approx(
        {j.id: j.started_at - j.submitted_at for j in jobs if j.started_at is not None}
    )
    assert len(waits) == LAUNCHES
    assert {(o.policy, o.nodes, o.source) for o in waits + launches} == {("default", 1, "manager")}
    assert sorted(o.value for o in launches) == pytest.approx(
        sorted(w.joined_at - w.requested_at for w in (r.worker for r in workers) if w.joined_at)
    )
    assert len(launches) == LAUNCHES

    # Drills measured the application's run time; they are imported as history.
    drills = tmp_path / "drills.csv"
    drills.write_text(
        "phase,resource,app,nodes,value,at,ref\n"
        + "".join(
            f"execution,{resource},sleep,1,{j.finished_at - j.started_at!r},{j.finished_at!r},"
            f"{resource}-{j.id}\n"
            for j in jobs
            for resource in ("lab", "local")
            if j.started_at is not None and j.finished_at is not None
        )
    )
    imported = advise(tmp_path, "import", str(drills))
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(f"{drills}: {2 * LAUNCHES} new observations of ")

    out = advise(tmp_path, "--deadline", "1m")
    assert (out.returncode, out.stderr) == (0, ""), out.stdout
    shown = [line.rstrip() for line in out.stdout.splitlines()]
    assert shown[0] == (
        "deadline 1m (60 s): phase bounds at quantiles 0.5, 0.75, 0.9, 0.95, 0.99 with 0.95 "
        f"confidence, from {4 * LAUNCHES} observations"
    )
    assert shown[1] == "likely enough (probability >= 0.2); per phase: quantile bound"
    rows = sorted(line.split()[:6] for line in shown[4:6])
    # Six waits and six run times bound the median of each, at 0.95 confidence: 0.5 x 0.5.
    assert rows == [
        ["lab", "1", "-", "default", "0.2500", rows[0][5]],
        ["local", "1", "-", "default", "0.2500", rows[1][5]],
    ]
    assert shown[6].startswith("suggested: ")
    assert shown[7].startswith("speculative: ")
    assert "lab, 1 node, default" in shown[7] and "local, 1 node, default" in shown[7]
    assert shown[7].endswith("probability 0.4375 that one finishes in time")
    assert len(shown) == 8  # nothing dropped
