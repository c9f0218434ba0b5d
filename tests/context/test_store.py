"""The broker's store on its own: durable, bounded, secrets only as digests."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.context.admission import BrokerLimits, Refused, admit
from elasticsite.context.models import ContextPolicy, NodeIn
from elasticsite.context.store import ContextState, Store

from .conftest import node_info


def node(name: str, n: int = 1, **extra: str) -> NodeIn:
    return NodeIn.model_validate(node_info(name, n, **extra))


def body(ctx: ContextState, since: int) -> dict[str, object]:
    return dict(json.loads(ctx.updates_body(since)))


def view(ctx: ContextState, since: int) -> list[tuple[int, str, str]]:
    entries = body(ctx, since)["entries"]
    assert isinstance(entries, list)
    return [(e["id"], e["op"], e["node"]["short_hostname"]) for e in entries]


def test_everything_survives_reopening(tmp_path: Path) -> None:
    store = Store(tmp_path / "b.sqlite3")
    ctx, key, secret = store.create_context("site")
    a_id, a_secret, _ = store.join(ctx, node("a", 1))
    b_id, _, _ = store.join(ctx, node("b", 2))
    store.update(ctx, a_id, node("a", 3))  # a moves behind b in join order
    store.leave(ctx, [ctx.members[b_id]])
    c_id, _, _ = store.join(ctx, node("c", 4))
    before = {since: ctx.updates_body(since) for since in range(ctx.last_id + 1)}
    members_before = ctx.members_body()
    store.close()

    again = Store(tmp_path / "b.sqlite3")
    ctx2 = again.contexts[ctx.id]
    assert ctx2.name == "site" and ctx2.last_id == 6
    assert {since: ctx2.updates_body(since) for since in range(7)} == before
    assert ctx2.members_body() == members_before
    assert list(ctx2.members) == [a_id, c_id]
    assert ctx2.check_context(key, secret) and not ctx2.check_context(key, key)
    assert ctx2.check_node(a_id, a_secret) and not ctx2.check_node(a_id, secret)
    assert b_id in ctx2.departed


def test_secrets_are_stored_only_as_digests(tmp_path: Path) -> None:
    path = tmp_path / "b.sqlite3"
    store = Store(path)
    ctx, key, secret = store.create_context("site")
    _, node_secret, _ = store.join(ctx, node("a"))
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    for value in (key, secret, node_secret):
        assert value.encode() not in raw


def test_history_is_bounded_on_disk_and_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "b.sqlite3"
    store = Store(path, history=5)
    ctx, _, _ = store.create_context("")
    ids = []
    for n in range(20):
        nid, _, _ = store.join(ctx, node(f"w{n}", n))
        ids.append(nid)
        if n >= 2:
            store.leave(ctx, [ctx.members[ids[n - 2]]])
    assert ctx.last_id == 38 and len(ctx.entries) == 5 and ctx.first_id == 34
    assert len(ctx.departed) <= 5
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT count(*) FROM entries").fetchone()[0] == 5
    assert db.execute("SELECT count(*) FROM nodes WHERE left_entry IS NOT NULL").fetchone()[0] <= 5
    db.close()
    again = Store(path, history=5).contexts[ctx.id]
    assert again.first_id == 34 and view(again, 33) == view(ctx, 33)
    assert body(again, 32)["snapshot"] is True
    assert [e[2] for e in view(again, 32)] == ["w18", "w19"]


def test_deleting_a_context_removes_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "b.sqlite3"
    store = Store(path)
    ctx, _, _ = store.create_context("gone")
    keep, _, _ = store.create_context("kept")
    store.join(ctx, node("a"))
    store.join(keep, node("b"))
    assert store.delete_context(ctx.id) and not store.delete_context(ctx.id)
    store.close()
    assert list(Store(path).contexts) == [keep.id]


def _apply(state: dict[str, str], entries: list[dict[str, Any]]) -> dict[str, str]:
    for e in entries:
        if e["op"] == "join":
            state[e["node"]["node_id"]] = e["node"]["short_hostname"]
        else:
            state.pop(e["node"]["node_id"], None)
    return state


@settings(max_examples=40, deadline=None)
@given(
    script=st.lists(
        st.tuples(st.sampled_from(["join", "leave", "update"]), st.integers(0, 5)),
        min_size=1,
        max_size=30,
    ),
    history=st.integers(2, 8),
)
def test_any_caller_catches_up_exactly(script: list[tuple[str, int]], history: int) -> None:
    """Whatever a caller last applied, the answer is exactly the entries it misses (or a
    snapshot when they are no longer kept), and applying it yields the current members."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "b.sqlite3", history=history)
        ctx, _, _ = store.create_context("")
        log: list[dict[str, Any]] = []  # every entry ever recorded, captured as it happens
        for op, n in script:
            before = ctx.last_id
            host = f"w{n}.cluster.example.org"
            current = {m.hostname: m.node_id for m in ctx.members.values()}
            if op == "join":
                store.join(ctx, node(f"w{n}", n))
            elif host in current and op == "leave":
                store.leave(ctx, [ctx.members[current[host]]])
            elif host in current:
                store.update(ctx, current[host], node(f"w{n}", n, data="new"))
            log.extend(body(ctx, before)["entries"])  # type: ignore[arg-type]
        assert [e["id"] for e in log] == list(range(1, ctx.last_id + 1))
        final = {m.node_id: m.short_hostname for m in ctx.members.values()}
        for since in range(ctx.last_id + 1):
            answer = body(ctx, since)
            kept = since > 0 and since >= ctx.last_id - history
            assert answer["snapshot"] is not kept
            entries: list[dict[str, Any]] = answer["entries"]  # type: ignore[assignment]
            if kept:
                assert entries == log[since:]
                state = _apply({}, log[:since])
            else:
                state = {}
            assert _apply(state, entries) == final
        store.close()


def test_contexts_of_an_older_broker_keep_taking_loopback_addresses(tmp_path: Path) -> None:
    """A broker.sqlite3 written before loopback and link-local addresses were refused:
    its contexts keep the rule they were created under, new ones refuse them."""
    path = tmp_path / "b.sqlite3"
    store = Store(path)
    old, _, _ = store.create_context("embedded", ContextPolicy(replace_on_rejoin=True))
    store.join(old, node("w1", 1, address="127.0.0.9"))
    store.close()
    with sqlite3.connect(path) as db:  # as the older broker left it
        db.execute("PRAGMA user_version = 0")
        db.execute("UPDATE contexts SET policy = '{\"replace_on_rejoin\":true}'")
    again = Store(path)
    kept = again.contexts[old.id].policy
    assert (kept.allow_loopback, kept.allow_link_local, kept.replace_on_rejoin) == (
        True,
        True,
        True,
    )
    assert [m.address for m in again.contexts[old.id].members.values()] == ["127.0.0.9"]
    new, _, _ = again.create_context("new")
    again.close()
    reopened = Store(path)  # migrated once: a new context stays as it was created
    assert reopened.contexts[old.id].policy.allow_loopback
    assert not reopened.contexts[new.id].policy.allow_loopback
    reopened.close()


def test_rules_an_older_broker_took_still_load_and_still_bind(tmp_path: Path) -> None:
    """A stored domain or reserved name that today's checks refuse must not keep the
    broker from starting; the context keeps refusing what they refuse."""
    path = tmp_path / "b.sqlite3"
    store = Store(path)
    ctx, _, _ = store.create_context("old")
    store.close()
    stored = {"domain": "c.1.example.org", "reserved": ["10", "::ffff:10.0.0.254"]}
    with sqlite3.connect(path) as db:
        db.execute("UPDATE contexts SET policy = ?", (json.dumps(stored),))
    again = Store(path)
    loaded = again.contexts[ctx.id]
    assert loaded.policy.domain == "c.1.example.org"
    for record, detail in [
        (node("w1", 1), "hostname: 'w1.cluster.example.org' is not in this context's domain"),
        (node("w1", 254), "address: '10.0.0.254' is reserved in this context"),
    ]:
        with pytest.raises(Refused) as err:
            admit(loaded, record, 100, BrokerLimits(), 0.0)
        assert err.value.detail.startswith(detail)
    again.close()
