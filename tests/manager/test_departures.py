"""A worker's departure the broker could not take survives in the manager's store and
is sent again, by the same manager at every step and by a restarted one.

The real :class:`~elasticsite.manager.loop.Manager` with its SQLite store and its
broker link, a real broker (uvicorn, TLS, 127.0.0.1) that is stopped and started
again, and the simulator's cloud and batch system on a virtual clock.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.context.conftest import TOKEN, LiveBroker, node_info, running_broker

from elasticsite import policies
from elasticsite.config import ContextConfig, ManagerConfig
from elasticsite.context.client import NodeClient
from elasticsite.manager.context_link import ContextLink, saved_context
from elasticsite.manager.loop import Manager
from elasticsite.manager.store import StateStore
from elasticsite.model import Job, WorkerState
from elasticsite.sim.batch import SimBatch
from elasticsite.sim.cloud import CloudModel, Durations, SimCloud
from elasticsite.sim.engine import Simulation

from .conftest import AtOnce

SITE = "depart"
INTERVAL = 10.0
RETRY = "broker: removing {} failed (will retry)"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LiveBroker]:
    yield from running_broker(tmp_path / "broker")


class Site:
    """A simulated cloud and batch system a manager steps on the virtual clock."""

    def __init__(self) -> None:
        self.sim = Simulation(start=0.0)
        self.batch = SimBatch(self.sim, "easy")
        self.model = CloudModel(
            name="c0", vm_limit=2, boot=Durations.constant(30.0),
            shutdown=Durations.constant(5.0), cores_per_vm=1, billing_increment=1.0,
        )  # fmt: skip
        self.cloud = SimCloud(self.model, self.sim, random.Random(1), self.batch)

    def manager(self, store: StateStore, link: ContextLink | None) -> Manager:
        return Manager(
            config=ManagerConfig(site_id=SITE, interval=INTERVAL),
            batch=self.batch,
            clouds={"c0": self.cloud},
            specs=[self.model.spec()],
            store=store,
            policy=policies.get("on_demand"),
            settings=policies.PolicySettings(),
            clock=lambda: self.sim.now,
            context=link,
            executor=AtOnce(),
        )

    def step(self, m: Manager) -> list[str]:
        """Let ``INTERVAL`` pass, then one step of ``m``; the problems it reported."""
        self.sim.run(until=self.sim.now + INTERVAL)
        return m.step().errors


def link(tmp_path: Path, store: StateStore, broker: LiveBroker) -> ContextLink:
    token = tmp_path / "admin.token"
    token.write_text(TOKEN)
    os.chmod(token, 0o600)
    config = ContextConfig(broker=broker.url, token_file=str(token), ca=str(broker.cert))
    return ContextLink(config, store, SITE)


def test_a_departure_the_broker_missed_is_retried_and_sent_by_the_next_manager(
    tmp_path: Path, broker: LiveBroker, caplog: pytest.LogCaptureFixture
) -> None:
    site = Site()
    store = StateStore(tmp_path / "manager.db")
    first = link(tmp_path, store, broker)
    coordinates = first.ensure()
    context_id = first.context_id
    assert context_id
    m = site.manager(store, first)
    site.sim.at(0.0, site.batch.arrive, Job("1", 1, 600.0, 0.0, runtime=60.0))

    for _ in range(30):  # the job's worker boots and joins
        site.step(m)
        if any(r.worker.state.joined for r in m.records.values()):
            break
    (rec,) = m.records.values()
    node = rec.worker.node
    assert node
    # Its agent joins the site's context under its node name.
    uri, key, secret = (coordinates[k] for k in ("context_uri", "context_key", "context_secret"))
    with NodeClient(uri, key, secret, ca=broker.cert.read_text()) as agent:
        agent.join(node_info(node))
    with broker.admin() as admin:
        assert [x.short_hostname for x in admin.members(context_id).members] == [node]

    broker.stop()  # the broker is down when the worker goes
    caplog.set_level(logging.WARNING, "elasticsite.manager.loop")
    failures = 0
    for _ in range(40):
        errors = site.step(m)
        failures += sum(e.startswith(RETRY.format(node)) for e in errors)
        if failures == 2:
            break
    assert not m.records, "the worker's record ended"
    assert failures == 2, "each failed attempt is one problem of its step"
    logged = [r.getMessage() for r in caplog.records if RETRY.format(node) in r.getMessage()]
    assert len(logged) == 2, "and one warning each"
    assert store.departures() == {node: rec.worker.id}
    saved = saved_context(store)
    assert saved is not None and saved.pending_removals == [node]  # what `status` shows
    first.close()
    store.close()  # the manager stops (it would be the same if killed)

    broker.start()
    store = StateStore(tmp_path / "manager.db")
    second = link(tmp_path, store, broker)
    second.ensure()
    assert second.context_id == context_id
    m = site.manager(store, second)
    assert not site.step(m)  # sends it at its first step
    with broker.admin() as admin:
        assert not admin.members(context_id).members, "the broker has the departure"
    site.step(m)  # settles it
    assert store.departures() == {}
    assert not [c for c in m.step().commands if c.kind == "forget"], "and sends it no more"
    second.close()
    store.close()


def test_the_store_keeps_departures_and_reads_those_an_older_manager_kept(
    tmp_path: Path,
) -> None:
    store = StateStore(tmp_path / "manager.db")
    assert store.departures() == {}
    store.save_departures({"cloud7": "c0-00001", "c0-00002": "c0-00002"})
    assert StateStore(tmp_path / "manager.db").departures() == {
        "cloud7": "c0-00001",
        "c0-00002": "c0-00002",
    }
    # Before the core kept them, the broker link kept a list of host names.
    store.set_meta("context.pending_removals", '["cloud7", "c0-00003"]')
    assert store.departures() == {"cloud7": "", "c0-00003": ""}
    store.set_meta("context.pending_removals", "not json")
    assert store.departures() == {}
    store.close()


def test_a_site_without_a_broker_keeps_no_departure(tmp_path: Path) -> None:
    site = Site()
    store = StateStore(tmp_path / "manager.db")
    m = site.manager(store, None)
    site.sim.at(0.0, site.batch.arrive, Job("1", 1, 600.0, 0.0, runtime=60.0))
    for _ in range(40):
        assert not site.step(m)
        if m.state.known and not m.records:
            break
    site.step(m)
    assert not m.records and m.state.known
    assert store.departures() == {} and not m.state.departures
    assert [t.to_state for t in store.transitions()][-1] is WorkerState.TERMINATED
    store.close()
