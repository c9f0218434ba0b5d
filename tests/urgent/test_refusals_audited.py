"""Every refused request to the urgent services and portals is in the audit log, for the
administrators to read, and no key or token value is in it or in any log line."""

from __future__ import annotations

import logging
import re

import pytest

from .test_routes import Site, auth, issue

P = "/urgent/portal"


def test_every_refusal_is_audited_for_the_administrators_without_a_secret(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    value = issue(site)["token"]
    wrong_key, wrong_token = "esk_" + "x" * 43, "ABCD-EFGH-JKLM-NPQR"
    c = site.client("127.0.0.4")
    assert c.get("/urgent/tokens").status_code == 401
    assert c.get("/urgent/tokens", headers={"Authorization": f"Bearer {wrong_key}"}
                 ).status_code == 401  # fmt: skip
    assert c.get("/urgent/token", headers={"X-Urgent-Token": wrong_token}).status_code == 401
    assert site.call("GET", "/urgent/tokens", "user").status_code == 403
    foreign = {"resources": ["cluster"], "max_urgency": "red", "session_seconds": 60}
    assert site.call("POST", "/urgent/tokens", "other_admin", json=foreign).status_code == 403
    assert auth(site, "stranger", "cluster", "red", identity="ann").status_code == 403
    assert site.call("POST", "/urgent/tokens/nosuch/expire", "admin").status_code == 404
    form = c.get(P + "/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)  # type: ignore[union-attr]
    c.post(P + "/login", data={"credential": site.keys["resource"], "csrf": csrf})
    c.post(P + "/login", data={"credential": wrong_key, "csrf": csrf})
    assert c.post(P + "/admin/tokens", data={"csrf": "forged"}).status_code == 403

    log = site.call("GET", "/urgent/audit", "admin", params={"ok": False}).json()
    seen = {(e["action"], e["actor"], e["reason"], e["source"]) for e in log}
    assert {
        ("GET /urgent/tokens", "", "no key", "127.0.0.4"),
        ("GET /urgent/tokens", "", "wrong key", "127.0.0.4"),
        ("GET /urgent/token", "", "wrong token", "127.0.0.4"),
        ("GET /urgent/tokens", "ann", "this service is not for a user", "127.0.0.1"),
        ("POST /urgent/tokens", "ops2", "not an administrator of cluster", "127.0.0.1"),
        ("POST /urgent/tokens/{token_id}/expire", "ops", "no such token among your resources",
         "127.0.0.1"),
        ("sign in", "cluster-submit", "a resource key is for submit paths", "127.0.0.4"),
        ("sign in", "", "wrong key", "127.0.0.4"),
        ("POST /urgent/portal/admin/tokens", "",
         "not signed in, or a stale form: load the page again", "127.0.0.4"),
    } <= seen, seen  # fmt: skip
    claim = [e for e in log if e["actor"] == "bob"]
    assert [(e["resource"], e["identity"]) for e in claim] == [("cluster", "ann")]
    # The same rows on the administrators' audit page; none of it for another's eyes.
    admin = site.client()
    form = admin.get(P + "/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)  # type: ignore[union-attr]
    admin.post(P + "/login", data={"credential": site.keys["admin"], "csrf": csrf})
    page = admin.get(P + "/admin/audit", params={"outcome": "refused"}).text
    assert "wrong token" in page and "a resource key is for submit paths" in page
    elsewhere = site.call("GET", "/urgent/audit", "other_admin").json()
    assert not any(e["resource"] == "cluster" for e in elsewhere)
    # No credential's value anywhere.
    text = caplog.text + repr(list(site.store.audit(limit=10_000))) + page
    for secret in (value, wrong_key, wrong_token, *site.keys.values()):
        assert secret not in text and secret.replace("-", "") not in text
