"""Attacks on the rate limit itself, on a real server on 127.0.0.1 called from two
addresses of the loopback range: a guesser, or a submit path hammered with made-up
names, locks out only himself; being held back adds no refusal and no audit row each;
and whoever has a right credential and has not misbehaved gets in."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from elasticsite.urgent.refusals import principal_subject, source_subject
from elasticsite.urgent.store import RATE_LIMITED, UrgentStore
from elasticsite.urgent.tokens import Urgency

from .test_routes import HOUR, Site, issue

GUESSER, OTHER = "127.0.0.2", "127.0.0.3"
P = "/urgent/portal"
LIMIT = 5  # the Site's max_failures, in a window of 60 s


def wrong(i: int) -> str:
    return f"ABCD-EFGH-JKLM-{'NPQRSTUVWXYZ'[i % 12]}{'23456789'[i // 12 % 8]}22"


def as_manager(c: httpx.Client, value: str, method: str = "GET", path: str = "/urgent/token",
               **kw: Any) -> httpx.Response:  # fmt: skip
    return c.request(method, path, headers={"X-Urgent-Token": value}, **kw)


def with_key(site: Site, c: httpx.Client, who: str, **body: Any) -> httpx.Response:
    return c.post("/urgent/authenticate", json=body,
                  headers={"Authorization": f"Bearer {site.keys[who]}"})  # fmt: skip


def sign_in(site: Site, source: str, credential: str) -> httpx.Response:
    c = site.client(source)
    form = c.get(P + "/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    assert csrf, form
    return c.post(P + "/login", data={"credential": credential, "csrf": csrf.group(1)},
                  follow_redirects=True)  # fmt: skip


def test_a_token_guesser_locks_out_only_his_own_address(site: Site) -> None:
    value = issue(site)["token"]
    guesser = site.client(GUESSER)
    codes = [as_manager(guesser, wrong(i)).status_code for i in range(LIMIT + 20)]
    assert codes == [401] * LIMIT + [429] * 20
    assert as_manager(guesser, value).status_code == 429  # his address waits, right token or not
    # The token's manager, elsewhere, is not his hostage: every token call works.
    manager = site.client(OTHER)
    assert as_manager(manager, value).json()["state"] == "issued"
    member = {"name": "ann", "identities": {"cluster": "ann"}}
    assert as_manager(manager, value, "POST", "/urgent/token/members", json=member).is_success
    assert as_manager(manager, value, "POST", "/urgent/token/activate").json()["state"] == "active"
    assert as_manager(manager, value, "GET", "/urgent/token/time").is_success
    # So is every other manager, and the REST services of every key, from anywhere.
    other_value = issue(site)["token"]
    assert as_manager(site.client(OTHER), other_value).is_success
    assert site.call("GET", "/urgent/tokens", "admin").is_success


def test_a_flood_held_back_is_no_new_refusal_and_one_audit_row(site: Site) -> None:
    guesser = site.client(GUESSER)
    for i in range(LIMIT):
        assert as_manager(guesser, wrong(i)).status_code == 401
    # He keeps at it for the whole window: every request is held back, none is heard...
    for step in range(59):
        site.clock.now += 1
        assert as_manager(guesser, wrong(step)).status_code == 429
    # ... and none of them counted: once his refusals are a window old he is heard again.
    site.clock.now += 2
    assert as_manager(guesser, wrong(99)).status_code == 401
    rows = [r for r in site.store.audit(limit=10_000) if r.source == GUESSER]
    assert [(r.action, r.reason, r.count) for r in rows] == [
        ("GET /urgent/token", "wrong token", 1),
        ("rate limited", RATE_LIMITED, 59),
        *[("GET /urgent/token", "wrong token", 1)] * LIMIT,
    ]


def test_a_portal_guesser_locks_out_only_his_own_address(site: Site) -> None:
    _, value = site.store.issue(["cluster"], Urgency.RED, HOUR, site.clock(), issued_by="ops")
    for _ in range(LIMIT):
        assert "not known here" in sign_in(site, GUESSER, "ABCD-EFGH-JKLM-NPQR").text
    assert "too many refused attempts" in sign_in(site, GUESSER, site.keys["admin"]).text
    for credential, lands in ((site.keys["admin"], "/admin"), (site.keys["user"], "/me"),
                              (value, "/token")):  # fmt: skip
        r = sign_in(site, OTHER, credential)
        assert r.status_code == 200 and r.url.path == P + lands, lands
    held = [r for r in site.store.audit() if r.action == "rate limited"]
    assert [(r.source, r.count) for r in held] == [(GUESSER, 1)]


def active_team(site: Site) -> None:
    """An active session on the cluster whose team is ann."""
    t, _ = site.store.issue(["cluster"], Urgency.RED, HOUR, site.clock(), issued_by="ops")
    site.store.add_member(t.id, "ann", {"cluster": "ann"}, site.clock(), "manager")
    site.store.activate(t, site.clock(), "manager")


def test_made_up_names_through_a_submit_path_lock_out_no_member(site: Site) -> None:
    active_team(site)
    path = site.client(GUESSER)
    # A local user tries name after name through the cluster's submit path: each is
    # refused for what it is, and none of it holds back anyone else.
    for i in range(3 * LIMIT):
        r = with_key(site, path, "resource", resource="cluster", urgency="red",
                     identity=f"nobody{i}")  # fmt: skip
        assert (r.status_code, r.json()["reason"]) == (200, "no active session")
    # The same made-up name over and over holds back that name, and only it.
    codes = [with_key(site, path, "resource", resource="cluster", urgency="red",
                      identity="mallory").status_code for _ in range(LIMIT + 3)]  # fmt: skip
    assert codes == [200] * LIMIT + [429] * 3
    for c in (path, site.client(OTHER)):
        r = with_key(site, c, "resource", resource="cluster", urgency="red", identity="ann")
        assert r.json()["ok"] is True
        assert with_key(site, c, "user", resource="cluster", urgency="red").json()["ok"] is True


def test_a_member_refused_again_and_again_holds_back_only_herself(site: Site) -> None:
    active_team(site)
    bob = site.client(GUESSER)  # bob is no member: his own key, refused each time
    codes = [with_key(site, bob, "stranger", resource="cluster", urgency="red").status_code
             for _ in range(LIMIT + 2)]  # fmt: skip
    assert codes == [200] * LIMIT + [429] * 2
    assert with_key(site, bob, "user", resource="cluster", urgency="red").json()["ok"] is True
    # The submit path asking for bob is held back as well: it is bob who is limited.
    r = with_key(site, bob, "resource", resource="cluster", urgency="red", identity="bob")
    assert r.status_code == 429


def test_sources_are_counted_by_network_and_mapped_addresses_as_their_ipv4() -> None:
    assert source_subject("2001:db8:1:2:aaaa::1") == source_subject("2001:db8:1:2:ffff::9")
    assert source_subject("2001:db8:1:2::1") != source_subject("2001:db8:1:3::1")
    assert source_subject("::ffff:192.0.2.7") == source_subject("192.0.2.7")
    assert source_subject("192.0.2.7") != source_subject("192.0.2.8")
    assert source_subject("fe80::1%eth0") == source_subject("fe80::2")
    assert source_subject("") == source_subject("") != source_subject("192.0.2.7")


def test_a_guesser_rotating_addresses_in_his_ipv6_network_is_held_back_there_only(
    tmp_path: Path,
) -> None:
    store = UrgentStore(tmp_path / "u.db", max_failures=3, failure_window=60.0)
    for i in range(3):
        store.refuse(1.0, [source_subject(f"2001:db8:0:7::{i + 1}")], "sign in", "wrong token",
                     source=f"2001:db8:0:7::{i + 1}")  # fmt: skip
    held = [source_subject(a) for a in ("2001:db8:0:7:1:2:3:4", "2001:db8::7")]
    assert store.held_back(2.0, held[:1], source="2001:db8:0:7:1:2:3:4")
    assert not store.held_back(2.0, held[1:], source="2001:db8::7")
    for _ in range(3):
        store.refuse(3.0, [source_subject("::ffff:192.0.2.7")], "sign in", "wrong token")
    assert store.held_back(4.0, [source_subject("192.0.2.7")])
    assert not store.held_back(4.0, [source_subject("192.0.2.8")])


def test_a_long_flood_writes_one_audit_row_a_window(tmp_path: Path) -> None:
    store = UrgentStore(tmp_path / "u.db", max_failures=2, failure_window=60.0)
    who = principal_subject("eve")
    store.refuse(0.0, [who], "GET /urgent/tokens", "this service is not for a user")
    store.refuse(0.0, [who], "GET /urgent/tokens", "this service is not for a user")
    # She goes on for ten minutes, ten requests a second, each refused.
    held = [store.refuse(t / 10, [who], "GET /urgent/tokens", "this service is not for a user")
            for t in range(1, 6000)]  # fmt: skip
    assert held[:599] == [True] * 599  # held back while her two refusals are in the window
    rows = list(store.audit(limit=10_000))
    assert len(rows) <= 3 * (600 // 60 + 1)  # two refusals and one held row a window
    assert sum(r.count for r in rows) == 2 + 5999
