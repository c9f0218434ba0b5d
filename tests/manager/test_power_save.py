"""Slurm-native power saving, with the embedded site standing in for Slurm.

The hooks (``elasticsite slurm resume|suspend|fail``) only queue requests in the
state store; the manager carries them out. Here the embedded batch system plays the
part of slurmctld; tests/integration/slurm does the same against a real Slurm.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli import run_cli
from typer.testing import CliRunner

from elasticsite import policies
from elasticsite.cli import app
from elasticsite.config import ConfigError, parse_config
from elasticsite.manager.loop import Manager
from elasticsite.manager.site import Site, open_site
from elasticsite.manager.store import StateStore
from elasticsite.model import Cause, WorkerState

from .conftest import Running, kill_workers, site_config, wait_for


@pytest.fixture
def power_site(tmp_path: Path) -> Iterator[Running]:
    site: Site = open_site(site_config(tmp_path / "state", max_instances=2))
    manager = Manager(
        config=site.config.manager,
        batch=site.batch,
        clouds=site.clouds,
        specs=site.config.cloud_specs(),
        store=site.store,
        policy=policies.get("on_demand"),
        settings=site.config.policy_settings(),
        userdata=site.userdata(),
        power_save=True,
    )
    r = Running(site, manager)
    r.thread.start()
    yield r
    manager.stop()
    r.thread.join(30)
    kill_workers(site)


def by_node(r: Running) -> dict[str, WorkerState]:
    return {rec.worker.node or "": rec.worker.state for rec in r.site.store.load()}


def test_resumed_nodes_boot_under_their_slurm_names_and_suspend_takes_them_down(
    power_site: Running,
) -> None:
    r = power_site
    r.site.store.add_power_requests("resume", ["cloud1", "cloud2"], time.time())
    wait_for(
        lambda: by_node(r) == {"cloud1": WorkerState.IDLE, "cloud2": WorkerState.IDLE},
        30,
        "both nodes to join under the names asked for",
    )
    nodes = {n.name for n in r.site.batch.snapshot().nodes if n.state.value == "idle"}
    assert nodes == {"cloud1", "cloud2"}
    r.submit(0.2)
    wait_for(lambda: r.site.batch.counts().get("completed", 0) == 1, 30, "the job to run")

    r.site.store.add_power_requests("suspend", ["cloud1"], time.time())
    wait_for(lambda: "cloud1" not in by_node(r), 30, "cloud1's worker to terminate")
    done = [rec for rec in r.site.store.load(include_done=True, history=True)]
    gone = next(rec.worker for rec in done if rec.worker.node == "cloud1")
    assert gone.state is WorkerState.TERMINATED
    assert any(t.cause == Cause.POWER_DOWN for t in gone.history)
    assert by_node(r) == {"cloud2": WorkerState.IDLE}
    # Nothing launched on the policy's own initiative, though on_demand is configured.
    assert r.site.store.counters().get("launched") == 2


def test_resumes_beyond_the_cloud_cap_are_refused_and_counted(
    power_site: Running, caplog: pytest.LogCaptureFixture
) -> None:
    r = power_site
    caplog.set_level(logging.INFO, logger="elasticsite.manager.loop")
    r.site.store.add_power_requests("resume", ["c1", "c2", "c3"], time.time())
    wait_for(lambda: r.site.store.counters().get("power_refused") == 1, 10, "one refusal")
    wait_for(lambda: len(by_node(r)) == 2, 10, "two workers")
    assert set(by_node(r)) == {"c1", "c2"}
    said = [
        (rec.levelno, rec.getMessage())
        for rec in caplog.records
        if rec.name == "elasticsite.manager.loop" and "power saving" in rec.getMessage()
    ]
    assert (
        logging.WARNING,
        "power saving: no cloud may take c3 now (caps, spend limit or budget); "
        "Slurm's resume timeout will apply",
    ) in said
    assert (logging.INFO, "power saving: resume ['c1', 'c2', 'c3'], suspend -") in said


def test_hooks_queue_requests_and_return_at_once(tmp_path: Path) -> None:
    state = tmp_path / "state"
    cfg = tmp_path / "site.toml"
    cfg.write_text(
        f'[manager]\nstate_dir = "{state}"\n[batch]\ntype = "slurm"\nmode = "power_save"\n'
        '[[clouds]]\nname = "local"\n'
    )
    runner = CliRunner()
    for args in (["resume", "cloud[1-2]"], ["suspend", "cloud1"], ["fail", "cloud3"]):
        result = runner.invoke(app, ["slurm", *args, "-c", str(cfg)])
        assert result.exit_code == 0, result.output
    store = StateStore(state / "manager.db")
    assert [(a, n) for a, n, _ in store.take_power_requests()] == [
        ("resume", "cloud1"),
        ("resume", "cloud2"),
        ("suspend", "cloud1"),
        ("suspend", "cloud3"),
    ]
    assert store.take_power_requests() == []
    assert "resume failed cloud3" in (state / "power.log").read_text()


def test_hooks_only_acknowledge_in_external_mode(tmp_path: Path) -> None:
    cfg = tmp_path / "site.toml"
    cfg.write_text(
        f'[manager]\nstate_dir = "{tmp_path}"\n[batch]\ntype = "slurm"\n'
        '[[clouds]]\nname = "local"\n'
    )
    result = CliRunner().invoke(app, ["slurm", "resume", "n1", "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    assert StateStore(tmp_path / "manager.db").take_power_requests() == []
    assert "external mode" in (tmp_path / "power.log").read_text()


def test_hooks_refuse_a_site_without_slurm(tmp_path: Path) -> None:
    cfg = tmp_path / "site.toml"
    cfg.write_text(f'[manager]\nstate_dir = "{tmp_path}"\n[[clouds]]\nname = "local"\n')
    result = CliRunner().invoke(app, ["slurm", "resume", "n1", "-c", str(cfg)])
    assert result.exit_code == 2
    assert "not 'slurm'" in result.output


def test_power_save_needs_an_absolute_state_dir_given_without_a_file() -> None:
    data = {
        "manager": {"state_dir": "rel"},
        "batch": {"type": "slurm", "mode": "power_save"},
        "clouds": [{"name": "local"}],
    }
    with pytest.raises(ConfigError, match="must be an absolute path"):
        parse_config(data)


def test_the_hooks_say_what_they_did_and_find_the_state_next_to_the_file(
    tmp_path: Path,
) -> None:
    """slurmctld runs the hooks from a directory of its own: a relative state_dir is
    taken next to the site file, and each call says what it did."""
    cfg = tmp_path / "etc" / "site.toml"
    cfg.parent.mkdir()
    cfg.write_text(
        '[manager]\nsite_id = "lab"\nstate_dir = "state"\n[batch]\ntype = "slurm"\n'
        'mode = "power_save"\n[[clouds]]\nname = "local"\n'
    )
    elsewhere = tmp_path / "slurmctld"
    elsewhere.mkdir()
    state = cfg.parent / "state"
    said = [
        _hook(action, nodes, cfg, elsewhere)
        for action, nodes in (("resume", "cloud[1-3]"), ("suspend", "cloud2"), ("fail", "cloud3"))
    ]
    log = state / "power.log"
    assert said == [
        f"resume cloud[1-3]: 3 nodes queued for site 'lab'; its manager starts a worker for "
        f"each at its next step (log: {log})",
        f"suspend cloud2: 1 node queued for site 'lab'; its manager terminates their workers "
        f"at its next step (log: {log})",
        f"resume failed cloud3: 1 node queued for site 'lab'; its manager terminates "
        f"whatever was started for them at its next step (log: {log})",
    ]
    assert not (elsewhere / "state").exists()
    requests = StateStore(state / "manager.db").take_power_requests()
    assert [(a, n) for a, n, _ in requests] == [
        ("resume", "cloud1"), ("resume", "cloud2"), ("resume", "cloud3"),
        ("suspend", "cloud2"), ("suspend", "cloud3"),
    ]  # fmt: skip

    cfg.write_text(cfg.read_text().replace('mode = "power_save"\n', ""))
    assert _hook("resume", "cloud4", cfg, elsewhere) == (
        "resume cloud4: 1 node acknowledged, nothing queued: in external mode the manager "
        f"of site 'lab' brings its nodes up and down itself (log: {log})"
    )


def _hook(action: str, nodes: str, cfg: Path, cwd: Path) -> str:
    """``elasticsite slurm ACTION NODES`` as slurmctld runs it: what it printed."""
    done = run_cli("slurm", action, "-c", str(cfg), nodes, cwd=cwd, columns=80, timeout=60)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout.strip()
