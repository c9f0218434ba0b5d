"""The manager and the recontextualization broker: every worker runs a real agent.

A real broker (uvicorn, TLS, 127.0.0.1) and the embedded site: the manager creates
the site's context, its workers' agents join and learn about each other, and the
nodes the manager takes down leave the context.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.context.conftest import TOKEN, LiveBroker, running_broker

from elasticsite.batch.base import JobRequest
from elasticsite.clouds.local import LocalCloud
from elasticsite.config import ContextConfig, SiteConfig
from elasticsite.manager.site import Site, open_site

from .conftest import Running, kill_workers, site_config, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # a real agent per worker, on time


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LiveBroker]:
    yield from running_broker(tmp_path / "broker")


@pytest.fixture
def context_site(tmp_path: Path, broker: LiveBroker) -> Iterator[Callable[[], Running]]:
    token = tmp_path / "admin.token"
    token.write_text(TOKEN)
    os.chmod(token, 0o600)
    cfg: SiteConfig = site_config(tmp_path / "state", "on_demand", max_instances=3)
    cfg = cfg.model_copy(
        update={
            "context": ContextConfig(broker=broker.url, token_file=str(token), ca=str(broker.cert))
        }
    )
    started: list[Running] = []
    sites: list[Site] = []

    def start() -> Running:
        site = open_site(cfg)
        sites.append(site)
        r = Running(site, site.manager())
        started.append(r)
        r.thread.start()
        return r

    yield start
    for r in started:
        r.manager.stop()
        r.thread.join(30)
    for site in sites:
        kill_workers(site)


def hosts_block(r: Running, worker_id: str) -> str:
    path = r.site.state_dir / "agents" / worker_id / "etc" / "hosts"
    return path.read_text() if path.exists() else ""


def test_workers_join_the_sites_context_learn_each_other_and_leave_when_released(
    context_site: Callable[[], Running], broker: LiveBroker
) -> None:
    r = context_site()
    context_id = r.site.store.get_meta("context.id")
    assert context_id, "the manager created no context"
    with broker.admin() as admin:
        shown = admin.show(context_id)
        assert shown.name == "test"
        assert shown.allow_loopback, "the local cloud's workers publish 127.x addresses"
        assert not shown.allow_link_local
        # The jobs hold their workers until the test lets them go: a worker booting late
        # on a busy machine must not find the first one already released.
        go = r.site.state_dir / "go"
        hold = ["sh", "-c", f'while [ ! -e "{go}" ]; do sleep 0.1; done']
        for _ in range(3):
            r.site.batch.submit(JobRequest(hold, 1, 300.0))
        wait_for(lambda: len(admin.members(context_id).members) == 3, 120, "3 members")
        members = admin.members(context_id).members
        names = {m.short_hostname for m in members}
        workers = {rec.worker.id for rec in r.site.store.load()}
        assert names == workers
        assert len({m.address for m in members}) == 3, "each instance has its own address"
        assert all(m.ssh_host_key.startswith("ssh-ed25519 ") for m in members)

        # Every worker's agent ran the shipped scripts: its hosts block lists all three.
        def converged() -> bool:
            return all(all(n in hosts_block(r, w) for n in names) for w in workers)

        wait_for(converged, 60, "every hosts file to list every worker")

        # Jobs end, on_demand releases the workers; they leave the context.
        go.touch()
        wait_for(lambda: not admin.members(context_id).members, 90, "the context to empty")
    assert r.site.store.departures() == {}, "every departure reached the broker"


def test_a_restarted_manager_reuses_its_context(
    context_site: Callable[[], Running], broker: LiveBroker
) -> None:
    first = context_site()
    context_id = first.site.store.get_meta("context.id")
    first.stop()
    second = context_site()
    assert second.site.store.get_meta("context.id") == context_id
    with broker.admin() as admin:
        assert [c.id for c in admin.list()] == [context_id]


def test_the_manager_removes_a_worker_whose_agent_could_not_say_goodbye(
    context_site: Callable[[], Running], broker: LiveBroker
) -> None:
    r = context_site()
    context_id = r.site.store.get_meta("context.id")
    assert context_id
    with broker.admin() as admin:
        r.submit(30.0, n=1, walltime=60.0)
        wait_for(lambda: len(admin.members(context_id).members) == 1, 60, "the worker to join")
        [rec] = r.site.store.load()
        cloud = r.site.clouds[rec.worker.cloud]
        assert isinstance(cloud, LocalCloud)
        cloud.kill_all()  # the instance dies at once: no agent leaves, no node says goodbye
        wait_for(lambda: not admin.members(context_id).members, 90, "the manager's removal")
