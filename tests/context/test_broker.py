"""The broker over real HTTPS (uvicorn on 127.0.0.1), as agents and administrators use it."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from elasticsite.context.client import BrokerUnavailable, ContextError, NodeClient
from elasticsite.context.models import Updates

from .conftest import TOKEN, BrokerProcess, LiveBroker, free_port, node_info, one_member, raw


def ops(updates: Updates) -> list[tuple[int, str, str]]:
    return [(e.id, e.op, e.node.short_hostname) for e in updates.entries]


def test_joins_and_leaves_are_entries_in_order(live_broker: LiveBroker) -> None:
    with live_broker.admin() as admin:
        ctx = admin.create("site-a")
        assert ctx.uri == f"{live_broker.url}/ctx/{ctx.id}"
        assert len(ctx.id) == 16 and len(ctx.key) >= 22 and len(ctx.secret) >= 22
        nodes = {name: live_broker.node(ctx) for name in ("w1", "w2", "w3")}
        for n, (name, client) in enumerate(nodes.items(), start=1):
            assert client.join(node_info(name, n)).entry_id == n
        assert nodes["w2"].leave() == 4
        assert nodes["w1"].update(node_info("w1", 9, data="gpus=2")) == 6
        assert admin.remove_host(ctx.id, "w3") == 7

        reader = live_broker.node(ctx)
        full = reader.updates(since=1)
        assert not full.snapshot and full.last_id == 7
        assert ops(full) == [
            (2, "join", "w2"),
            (3, "join", "w3"),
            (4, "leave", "w2"),
            (5, "leave", "w1"),
            (6, "join", "w1"),
            (7, "leave", "w3"),
        ]
        assert full.entries[3].node.address == "10.0.0.1"
        assert full.entries[3].node.data == "slots=1"
        assert full.entries[4].node.data == "gpus=2" and full.entries[4].node.address == "10.0.0.9"
        assert full.entries[4].node.node_id == full.entries[3].node.node_id == nodes["w1"].node_id
        assert reader.updates(since=5).entries == full.entries[4:]
        assert reader.updates(since=7).entries == []

        members = admin.members(ctx.id)
        assert [m.short_hostname for m in members.members] == ["w1"]
        assert members.members[0].address == "10.0.0.9"
        assert admin.show(ctx.id).members == 1 and admin.show(ctx.id).last_id == 7
        assert [c.id for c in admin.list()] == [ctx.id]


def test_late_joiner_gets_a_snapshot_of_current_members(live_broker: LiveBroker) -> None:
    with live_broker.admin() as admin:
        ctx = admin.create()
        a, b, c = (live_broker.node(ctx) for _ in range(3))
        a.join(node_info("a", 1))
        b.join(node_info("b", 2))
        b.leave()
        c.join(node_info("c", 3))
        snap = live_broker.node(ctx).updates(since=0)
        assert snap.snapshot and snap.last_id == 4
        assert ops(snap) == [(1, "join", "a"), (4, "join", "c")]


def test_long_poll_answers_when_a_node_joins(live_broker: LiveBroker) -> None:
    ctx, first = one_member(live_broker)
    got: list[Updates] = []
    started = time.monotonic()
    poller = threading.Thread(target=lambda: got.append(first.updates(since=1, wait=30)))
    poller.start()
    time.sleep(0.3)
    assert not got, "the long poll answered before anything changed"
    live_broker.node(ctx).join(node_info("w2", 2))
    poller.join(timeout=30)
    assert got and ops(got[0]) == [(2, "join", "w2")]
    assert time.monotonic() - started < 20, "the long poll waited for its timeout"


def test_long_poll_answers_empty_after_its_timeout(live_broker: LiveBroker) -> None:
    ctx, node = one_member(live_broker)
    started = time.monotonic()
    quiet = node.updates(since=1, wait=0.5)
    assert time.monotonic() - started >= 0.5
    assert quiet.last_id == 1 and not quiet.snapshot and quiet.entries == []
    empty = live_broker.node(ctx)
    with live_broker.admin() as admin:
        fresh = admin.create()
    nothing = live_broker.node(fresh).updates(since=0, wait=0.2)
    assert nothing.last_id == 0 and nothing.entries == []
    empty.close()


@pytest.mark.slow
def test_broker_crash_mid_long_poll_loses_nothing(broker_process: BrokerProcess) -> None:
    with broker_process.admin() as admin:
        ctx = admin.create("durable")
    w1, w2 = broker_process.node(ctx), broker_process.node(ctx)
    w1.join(node_info("w1", 1))
    w2.join(node_info("w2", 2))
    poller = broker_process.node(ctx)
    outcome: list[BaseException | Updates] = []

    def poll() -> None:
        try:
            outcome.append(poller.updates(since=2, wait=30))
        except ContextError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.5)
    broker_process.kill()
    thread.join(timeout=30)
    assert outcome and isinstance(outcome[0], BrokerUnavailable)

    broker_process.start()
    w3 = broker_process.node(ctx)
    w3.join(node_info("w3", 3))
    assert w1.leave() == 4  # node credentials survive the restart
    again = poller.updates(since=2)
    assert ops(again) == [(3, "join", "w3"), (4, "leave", "w1")]
    with broker_process.admin() as admin:
        assert admin.show(ctx.id).name == "durable"
        assert [m.short_hostname for m in admin.members(ctx.id).members] == ["w2", "w3"]


def test_restart_in_process_loses_nothing(live_broker: LiveBroker) -> None:
    ctx, w1 = one_member(live_broker)
    live_broker.stop(force=False)
    live_broker.start()
    live_broker.node(ctx).join(node_info("w2", 2))
    assert ops(w1.updates(since=1)) == [(2, "join", "w2")]
    assert w1.leave() == 3


def test_graceful_stop_answers_waiting_long_polls(live_broker: LiveBroker) -> None:
    _, node = one_member(live_broker)
    got: list[Updates] = []
    thread = threading.Thread(target=lambda: got.append(node.updates(since=1, wait=50)))
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    live_broker.stop(force=False)
    thread.join(timeout=30)
    assert got and got[0].entries == [] and got[0].last_id == 1
    assert time.monotonic() - started < 20


def test_wrong_key_or_secret_gets_401_and_no_data(live_broker: LiveBroker) -> None:
    ctx, member = one_member(live_broker)
    assert member.node_id is not None
    bad = [
        (ctx.key, "wrong"),
        ("wrong", ctx.secret),
        (ctx.secret, ctx.key),
        (member.node_id, "wrong"),
        (member.node_id, ctx.secret),
    ]
    with raw(live_broker) as http:
        for user, password in bad:
            for method, path in [
                ("GET", f"/ctx/{ctx.id}/updates?since=0"),
                ("GET", f"/ctx/{ctx.id}/members"),
                ("POST", f"/ctx/{ctx.id}/nodes"),
                ("DELETE", f"/ctx/{ctx.id}/nodes/{member.node_id}"),
            ]:
                r = http.request(method, path, auth=(user, password), json=node_info("x"))
                assert r.status_code == 401, (method, path, user)
                assert r.json() == {"detail": "invalid or missing credentials"}
                assert "WWW-Authenticate" in r.headers
        assert http.get(f"/ctx/{ctx.id}/updates?since=0").status_code == 401
        assert http.get("/ctx", headers={"Authorization": "Bearer nope"}).status_code == 401
        garbled = {"Authorization": "Basic %%%not-base64"}
        assert http.get(f"/ctx/{ctx.id}/members", headers=garbled).status_code == 401
        # Unknown contexts look the same as wrong credentials, except to the admin.
        r = http.get("/ctx/0000000000000000/updates?since=0", auth=(ctx.key, ctx.secret))
        assert r.status_code == 401
        admin_hdr = {"Authorization": f"Bearer {TOKEN}"}
        assert http.get("/ctx/0000000000000000", headers=admin_hdr).status_code == 404
        r = http.delete(f"/ctx/{ctx.id}/nodes/0000000000000000", headers=admin_hdr)
        assert r.status_code == 404
        assert http.delete(f"/ctx/{ctx.id}/hosts/nope", headers=admin_hdr).status_code == 404
        # The context's key and secret, or a node, cannot act as the administrator.
        assert http.get(f"/ctx/{ctx.id}", auth=(ctx.key, ctx.secret)).status_code == 401
        r = http.delete(f"/ctx/{ctx.id}/hosts/w1", auth=(ctx.key, ctx.secret))
        assert r.status_code == 401


def test_one_context_never_reads_another(live_broker: LiveBroker) -> None:
    with live_broker.admin() as admin:
        a, b = admin.create("a"), admin.create("b")
    node_a, node_b = live_broker.node(a), live_broker.node(b)
    node_a.join(node_info("a1", 1))
    node_b.join(node_info("b1", 2))
    assert node_b.node_id is not None
    a_as_b = NodeClient(
        b.uri,
        a.key,
        a.secret,
        ca=live_broker.cert,
        node_id=node_a.node_id,
        node_secret=node_a.node_secret,
    )
    key_of_a_on_b = NodeClient(b.uri, a.key, a.secret, ca=live_broker.cert)
    for client in (a_as_b, key_of_a_on_b):
        for call in (
            lambda c=client: c.updates(since=0),
            lambda c=client: c.members(),
            lambda c=client: c.join(node_info("intruder", 3)),
        ):
            with pytest.raises(ContextError) as err:
                call()
            assert err.value.status == 401 and "a1" not in err.value.detail
    with raw(live_broker) as http:
        r = http.delete(
            f"/ctx/{b.id}/nodes/{node_b.node_id}",
            auth=(node_a.node_id or "", node_a.node_secret or ""),
        )
        assert r.status_code == 401
        r = http.put(
            f"/ctx/{a.id}/nodes/{node_b.node_id}",
            auth=(node_b.node_id, node_b.node_secret or ""),
            json=node_info("b1"),
        )
        assert r.status_code == 401
    with live_broker.admin() as admin:
        assert [m.short_hostname for m in admin.members(b.id).members] == ["b1"]


def test_a_node_that_left_is_told_so_and_reads_nothing(live_broker: LiveBroker) -> None:
    _, node = one_member(live_broker)
    node.leave()
    with pytest.raises(ContextError) as err:
        node.leave()
    assert err.value.status == 404
    with pytest.raises(ContextError) as err:
        node.updates(since=0)
    assert err.value.status == 401


def test_deleting_a_context_revokes_its_credentials(live_broker: LiveBroker) -> None:
    with live_broker.admin() as admin:
        ctx = admin.create()
        node = live_broker.node(ctx)
        node.join(node_info("w1", 1))
        outcome: list[Any] = []

        def poll() -> None:
            try:
                outcome.append(node.updates(since=1, wait=30))
            except ContextError as exc:
                outcome.append(exc.status)

        thread = threading.Thread(target=poll)
        thread.start()
        time.sleep(0.3)
        admin.delete(ctx.id)
        thread.join(timeout=30)
        assert outcome == [401]
        with pytest.raises(ContextError) as err:
            admin.show(ctx.id)
        assert err.value.status == 404
        with pytest.raises(ContextError) as err:
            admin.delete(ctx.id)
        assert err.value.status == 404


def test_bad_payloads_are_refused_with_4xx(live_broker: LiveBroker) -> None:
    with live_broker.admin() as admin:
        ctx = admin.create()
    auth = (ctx.key, ctx.secret)
    url = f"/ctx/{ctx.id}/nodes"
    with raw(live_broker) as http:
        big = node_info("w1", data="x" * (70 * 1024))
        assert http.post(url, auth=auth, json=big).status_code == 413

        def chunks() -> Any:
            for _ in range(100):
                yield b"x" * 1024

        r = http.post(
            url, auth=auth, content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 413 and "exceeds" in r.json()["detail"]
        r = http.post(
            url,
            auth=auth,
            content=b'{"short_hostname": ',
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 400 and r.json() == {"detail": "the request body is not valid JSON"}
        for field, value in [
            ("short_hostname", "-bad"),
            ("short_hostname", "a" * 64),
            ("hostname", "w1..example"),
            ("address", "10.0.0.256"),
            ("ssh_host_key", "not a key\nsecond line"),
            ("data", "x" * (32 * 1024 + 1)),
            ("data", "nul\x00inside"),
        ]:
            r = http.post(url, auth=auth, json={**node_info("w1"), field: value})
            assert r.status_code == 422, (field, value)
            detail = r.json()["detail"]
            assert isinstance(detail, str) and detail.startswith(field), detail
        r = http.post(url, auth=auth, content=b'{"short_hostname": "\\ud800"}')
        assert r.status_code == 422
        assert http.post(url, auth=auth, json=[1, 2]).status_code == 422
        updates = f"/ctx/{ctx.id}/updates"
        assert http.get(updates, auth=auth, params={"since": -1}).status_code == 422
        assert http.get(updates, auth=auth, params={"since": 0, "wait": 61}).status_code == 422
        assert http.get(updates, auth=auth, params={"since": "x"}).status_code == 422
        r = http.get(updates, auth=auth, params={"since": 5})
        assert r.status_code == 409 and r.json()["last_id"] == 0
        admin_hdr = {"Authorization": f"Bearer {TOKEN}"}
        r = http.post("/ctx", headers=admin_hdr, json={"name": "n" * 129})
        assert r.status_code == 422
    with live_broker.admin() as admin:
        assert admin.show(ctx.id).last_id == 0


def test_history_is_bounded_and_old_callers_get_a_snapshot(tmp_path: Path) -> None:
    broker = LiveBroker(tmp_path / "state", free_port(), history=3)
    broker.start()
    try:
        with broker.admin() as admin:
            ctx = admin.create()
        nodes = [broker.node(ctx) for _ in range(4)]
        for n, node in enumerate(nodes, start=1):
            node.join(node_info(f"w{n}", n))
        nodes[0].leave()  # entries 1..5; the broker keeps 3..5
        reader = broker.node(ctx)
        assert ops(reader.updates(since=2)) == [
            (3, "join", "w3"),
            (4, "join", "w4"),
            (5, "leave", "w1"),
        ]
        old = reader.updates(since=1)
        assert old.snapshot and old.last_id == 5
        assert ops(old) == [(2, "join", "w2"), (3, "join", "w3"), (4, "join", "w4")]
    finally:
        broker.stop()
    broker.start()
    try:
        assert broker.node(ctx).updates(since=1).snapshot
        assert ops(broker.node(ctx).updates(since=3)) == [(4, "join", "w4"), (5, "leave", "w1")]
    finally:
        broker.stop()


def test_nothing_secret_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    broker = LiveBroker(tmp_path / "state", free_port(), access_log=True)
    broker.start()
    try:
        with broker.admin() as admin:
            ctx = admin.create("logged")
            node = broker.node(ctx)
            joined = node.join(node_info("w1", 1))
            node.updates(since=0)
            node.members()
            node.leave()
    finally:
        broker.stop()
    text = caplog.text
    assert "GET /ctx/" in text, "the access log was not captured"
    for secret in (TOKEN, ctx.key, ctx.secret, joined.node_secret):
        assert secret not in text
    assert "Authorization" not in text and "Basic " not in text


def test_healthz_needs_no_credentials(live_broker: LiveBroker) -> None:
    with raw(live_broker) as http:
        r = http.get("/healthz")
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        assert http.get("/openapi.json").status_code == 404  # served only with --docs
        assert live_broker.server is not None
        assert "/ctx/{cid}/updates" in live_broker.server.config.app.openapi()["paths"]


def test_fast_path_and_route_answer_alike(live_broker: LiveBroker) -> None:
    """Plain long-poll queries are served beneath FastAPI; any other spelling goes through
    the documented route. A client cannot tell which one answered."""
    with live_broker.admin() as admin:
        ctx = admin.create()
    for n in range(1, 4):
        live_broker.node(ctx).join(node_info(f"w{n}", n))
    auth = (ctx.key, ctx.secret)
    url = f"/ctx/{ctx.id}/updates"
    with raw(live_broker) as http:
        for since in range(4):
            fast = http.get(f"{url}?since={since}", auth=auth)
            routed = http.get(f"{url}?since={since}&unused=1", auth=auth)
            assert fast.status_code == routed.status_code == 200
            assert fast.content == routed.content
            assert fast.headers["content-type"] == routed.headers["content-type"]
        started = time.monotonic()
        routed = http.get(f"{url}?wait=0.4&since=3&unused=1", auth=auth)
        assert routed.json() == {"last_id": 3, "snapshot": False, "entries": []}
        assert time.monotonic() - started >= 0.4
        for query in ("since=9", "since=0&wait=nan", "since=0&wait=inf", "since=-1"):
            fast = http.get(f"{url}?{query}", auth=auth)
            assert fast.status_code in (409, 422), query
        assert http.get(f"{url}?since=0", auth=(ctx.key, "x")).status_code == 401
