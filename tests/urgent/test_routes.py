"""The urgent services over HTTPS on a real uvicorn on 127.0.0.1: every service of the
rights table against every kind of caller, allowed and denied, and the flows a token
manager and a team member go through."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.context.conftest import free_port, serve_in_thread

from elasticsite.context.tls import ensure_certificate
from elasticsite.server import build_server, create_app
from elasticsite.urgent.routes import UrgentService
from elasticsite.urgent.store import UrgentStore

HOUR = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Site:
    """A server with the urgent services, and a key for every kind of caller."""

    def __init__(self, tmp: Path) -> None:
        self.clock = Clock()
        self.store = UrgentStore(tmp / "urgent.db", max_failures=5, failure_window=60.0)
        self.service = UrgentService(self.store, clock=self.clock)
        p = self.service.principals
        now = self.clock()
        self.keys = {
            "admin": p.add("ops", "admin", now, resources=["cluster", "cloud"])[1],
            "other_admin": p.add("ops2", "admin", now, resources=["elsewhere"])[1],
            "user": p.add("ann", "user", now, identities={"cluster": "ann", "cloud": "ann@c"})[1],
            "stranger": p.add("bob", "user", now, identities={"cluster": "bob"})[1],
            "resource": p.add("cluster-submit", "resource", now, resources=["cluster"])[1],
        }
        cert, key = ensure_certificate(tmp / "tls", ["127.0.0.1"])
        self.cert = cert
        self.ca = ssl.create_default_context(cafile=str(cert))
        app = create_app(tmp / "broker", admin_token="a" * 43, urgent=self.service)
        self.port = free_port()
        self.server = build_server(app, host="127.0.0.1", port=self.port, certfile=cert,
                                   keyfile=key, log_level="warning")  # fmt: skip
        self.thread = serve_in_thread(self.server)
        self.http = httpx.Client(  # a bound on a hang: a busy machine answers late
            base_url=f"https://127.0.0.1:{self.port}", verify=self.ca, timeout=60
        )
        self.clients = [self.http]

    def client(self, source: str | None = None) -> httpx.Client:
        """A new client, its connections made from ``source`` (an address on the
        loopback range: the server sees it as the caller's address)."""
        transport = httpx.HTTPTransport(verify=self.ca, local_address=source)
        c = httpx.Client(base_url=f"https://127.0.0.1:{self.port}", transport=transport, timeout=60)
        self.clients.append(c)
        return c

    def call(self, method: str, path: str, who: str | None = None, token: str | None = None,
             **kw: Any) -> httpx.Response:  # fmt: skip
        headers = {}
        if who is not None:
            headers["Authorization"] = f"Bearer {self.keys[who]}"
        if token is not None:
            headers["X-Urgent-Token"] = token
        return self.http.request(method, path, headers=headers, **kw)

    def stop(self) -> None:
        for c in self.clients:
            c.close()  # no keep-alive connection left to hold the server's shutdown
        self.server.should_exit = True
        self.thread.join(20)


def auth(site: Site, who: str, resource: str, urgency: str, **more: Any) -> Any:
    body = {"resource": resource, "urgency": urgency, **more}
    return site.call("POST", "/urgent/authenticate", who, json=body)


def issue(site: Site, **body: Any) -> dict[str, Any]:
    body = {"resources": ["cluster"], "max_urgency": "orange", "session_seconds": HOUR, **body}
    r = site.call("POST", "/urgent/tokens", "admin", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


ADMIN_ONLY = [("POST", "/urgent/tokens", {"resources": ["cluster"], "max_urgency": "red",
                                          "session_seconds": 60}),
              ("GET", "/urgent/tokens", None), ("GET", "/urgent/audit", None)]  # fmt: skip
MANAGER_ONLY = [("GET", "/urgent/token", None), ("GET", "/urgent/token/time", None),
                ("POST", "/urgent/token/members", {"name": "x", "identities": {"cluster": "x"}}),
                ("POST", "/urgent/token/activate", None)]  # fmt: skip


@pytest.mark.parametrize("who", ["user", "stranger", "resource"])
@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ONLY)
def test_admin_services_refuse_every_other_role(
    site: Site, who: str, method: str, path: str, body: Any
) -> None:
    assert site.call(method, path, who, json=body).status_code == 403
    assert site.call(method, path, None, json=body).status_code == 401
    bad = site.http.request(method, path, json=body, headers={"Authorization": "Bearer esk_x"})
    assert bad.status_code == 401


@pytest.mark.parametrize("who", ["admin", "user", "resource", None])
@pytest.mark.parametrize(("method", "path", "body"), MANAGER_ONLY)
def test_token_manager_services_need_the_token_not_a_key(
    site: Site, who: str | None, method: str, path: str, body: Any
) -> None:
    assert site.call(method, path, who, json=body).status_code == 401
    assert site.call(method, path, who, token="ABCD-EFGH-JKLM-NPQR", json=body).status_code == 401


def test_an_admin_issues_only_for_their_resources_and_sees_only_their_tokens(site: Site) -> None:
    mine = issue(site)
    assert len(mine["token"]) == 16 and mine["state"] == "issued"
    r = site.call("POST", "/urgent/tokens", "other_admin", json={
        "resources": ["cluster"], "max_urgency": "red", "session_seconds": 60})  # fmt: skip
    assert r.status_code == 403 and "not an administrator of cluster" in r.text
    listed = site.call("GET", "/urgent/tokens", "admin").json()
    assert [t["id"] for t in listed] == [mine["id"]] and "token" not in listed[0]
    assert site.call("GET", "/urgent/tokens", "other_admin").json() == []
    r = site.call("POST", f"/urgent/tokens/{mine['id']}/expire", "other_admin")
    assert r.status_code == 404


def test_the_token_manager_and_team_members_through_a_session(site: Site) -> None:
    value = issue(site, resources=["cluster", "cloud"])["token"]
    info = site.call("GET", "/urgent/token", token=value).json()
    assert info["state"] == "issued" and info["seconds_left"] is None
    ann = {"name": "ann", "identities": {"cluster": "ann", "cloud": "ann@c"}}
    add = site.call("POST", "/urgent/token/members", token=value.lower(), json=ann)
    assert add.status_code == 200 and add.json()["members"] == {
        "ann": {"cloud": "ann@c", "cluster": "ann"}
    }
    # Before the session starts, ann is refused and says why.
    r = auth(site, "user", "cluster", "orange")
    assert r.json() == {"ok": False, "token_id": None, "compensation": False, "policy": None,
                        "reason": "the session has not been started"}  # fmt: skip
    assert site.call("POST", "/urgent/token/activate", token=value).json()["state"] == "active"
    assert site.call("POST", "/urgent/token/activate", token=value).status_code == 409
    site.clock.now += 600
    assert site.call("GET", "/urgent/token/time", token=value).json() == {
        "state": "active",
        "seconds_left": HOUR - 600,
    }
    assert auth(site, "user", "cluster", "orange").json()["ok"] is True
    red = auth(site, "user", "cluster", "red").json()
    assert red["reason"] == "urgency above the token's maximum"
    # A user cannot claim another identity; the cluster's submit path names it.
    assert auth(site, "stranger", "cluster", "yellow", identity="ann").status_code == 403
    assert auth(site, "resource", "cluster", "yellow", identity="ann").json()["ok"] is True
    assert auth(site, "resource", "cloud", "yellow", identity="ann@c").status_code == 403
    # Her sessions; bob has none; a member added now submits at once, removed cannot.
    me = site.call("GET", "/urgent/me", "user").json()
    assert [s["state"] for s in me["sessions"]] == ["active"] and "token" not in me["sessions"][0]
    assert site.call("GET", "/urgent/me", "stranger").json()["sessions"] == []
    bob = {"name": "bob", "identities": {"cluster": "bob"}}
    site.call("POST", "/urgent/token/members", token=value, json=bob)
    assert auth(site, "stranger", "cluster", "yellow").json()["ok"] is True
    assert site.call("DELETE", "/urgent/token/members/bob", token=value).status_code == 200
    assert auth(site, "stranger", "cluster", "yellow").json()["ok"] is False
    # The session ends on time; the admin's audit log has every attempt, on their resources.
    site.clock.now += HOUR
    assert auth(site, "user", "cluster", "yellow").json()["reason"] == "the session has expired"
    log = site.call("GET", "/urgent/audit", "admin", params={"identity": "ann"}).json()
    assert [(e["actor"], e["ok"]) for e in log] == [  # newest first
        ("ann", False), ("ann", True), ("bob", False), ("ann", False), ("ann", True),
        ("ann", False),
    ]  # fmt: skip
    assert log[2]["reason"].startswith("a user submits as their own identity")
    assert site.call("GET", "/urgent/audit", "admin", params={"resource": "elsewhere"}
                     ).status_code == 403  # fmt: skip


def test_guessing_tokens_is_rate_limited(site: Site) -> None:
    codes = [site.call("GET", "/urgent/token", token=f"ABCD-EFGH-JKLM-NP{c}2").status_code
             for c in "QRSTUVW"]  # fmt: skip
    assert codes[:5] == [401] * 5 and codes[5:] == [429, 429]
    value = issue(site)["token"]
    assert site.call("GET", "/urgent/token", token=value).status_code == 429  # still waiting
    site.clock.now += 61
    assert site.call("GET", "/urgent/token", token=value).status_code == 200
