"""A credential taken away stops working at once, everywhere it was used: a key removed
(by another process, the command line) in the REST services and in every portal
session opened with it; a token expired or revoked in its manager's portal session and
for every change through REST; a member removed from the team in the submit filter and
on their portal page. Each through the real server."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from tests.cli import run_command

from elasticsite.urgent.tokens import Urgency

from .test_routes import HOUR, Site, auth, issue

P = "/urgent/portal"


def signed_in(site: Site, credential: str) -> tuple[httpx.Client, str]:
    """A browser signed in with ``credential``, and its session's CSRF token."""
    c = site.client()
    form = c.get(P + "/login").text
    token = re.search(r'name="csrf" value="([^"]+)"', form)
    assert token, form
    r = c.post(P + "/login", data={"credential": credential, "csrf": token.group(1)},
               follow_redirects=True)  # fmt: skip
    assert r.status_code == 200 and r.url.path != P + "/login", r.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', r.text)
    assert csrf, r.text
    return c, csrf.group(1)


def gone(c: httpx.Client, page: str) -> bool:
    """Whether the browser's session is over: the page sends it to sign in."""
    r = c.get(P + page)
    return r.status_code == 303 and r.headers["location"] == P + "/login"


def remove_key(site: Site, name: str, state_dir: Path) -> None:
    done = run_command(
        "urgent", "key", "remove", name, "--state-dir", str(state_dir),
        timeout=60, env={"COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_removed_key_stops_working_at_once_over_rest_and_in_its_portal_sessions(
    site: Site, tmp_path: Path
) -> None:
    admin, admin_csrf = signed_in(site, site.keys["admin"])
    other_admin, _ = signed_in(site, site.keys["admin"])  # a second session, same key
    user, _ = signed_in(site, site.keys["user"])
    assert site.call("GET", "/urgent/tokens", "admin").status_code == 200
    remove_key(site, "ops", tmp_path)
    remove_key(site, "ann", tmp_path)
    assert site.call("GET", "/urgent/tokens", "admin").status_code == 401
    assert site.call("GET", "/urgent/me", "user").status_code == 401
    assert auth(site, "user", "cluster", "red").status_code == 401
    assert gone(admin, "/admin") and gone(other_admin, "/admin/audit") and gone(user, "/me")
    form = {"r:cluster": "on", "max_urgency": "red", "hours": "1", "csrf": admin_csrf}
    assert admin.post(P + "/admin/tokens", data=form).status_code == 403
    assert site.store.tokens() == []
    # The same name made again with a new key does not bring the old sessions back.
    site.service.principals.add("ops", "admin", site.clock(), resources=["cluster"])
    assert gone(admin, "/admin")


def test_a_managers_portal_session_ends_when_the_token_is_expired(site: Site) -> None:
    value = issue(site)["token"]
    manager, csrf = signed_in(site, value)
    tid = site.store.by_value(value).id  # type: ignore[union-attr]
    assert site.call("POST", f"/urgent/tokens/{tid}/expire", "admin").json()["state"] == "expired"
    assert gone(manager, "/token")
    r = manager.post(P + "/token/members", data={"name": "x", "id:cluster": "x", "csrf": csrf})
    assert r.status_code == 403 and site.store.get(tid).members == {}  # type: ignore[union-attr]
    # Over REST its value still tells its manager what became of it, and changes nothing.
    assert site.call("GET", "/urgent/token", token=value).json()["state"] == "expired"
    member = {"name": "x", "identities": {"cluster": "x"}}
    assert site.call("POST", "/urgent/token/members", token=value, json=member).status_code == 403
    assert site.call("DELETE", "/urgent/token/members/x", token=value).status_code == 403
    assert site.call("POST", "/urgent/token/activate", token=value).status_code == 403
    # ... nor can it sign in again.
    c = site.client()
    form = c.get(P + "/login").text
    csrf_login = re.search(r'name="csrf" value="([^"]+)"', form).group(1)  # type: ignore[union-attr]
    r = c.post(P + "/login", data={"credential": value, "csrf": csrf_login},
               follow_redirects=True)  # fmt: skip
    assert "That token has expired or was revoked" in r.text


def test_a_managers_portal_session_ends_when_the_token_is_revoked_or_runs_out(
    site: Site,
) -> None:
    revoked, value = site.store.issue(["cluster"], Urgency.RED, HOUR, site.clock(),
                                      issued_by="ops")  # fmt: skip
    manager, _ = signed_in(site, value)
    site.store.revoke(revoked.id, site.clock(), "ops")
    assert gone(manager, "/token")
    _, value = site.store.issue(["cluster"], Urgency.RED, HOUR, site.clock(),
                                       issued_by="ops")  # fmt: skip
    manager, csrf = signed_in(site, value)
    assert manager.post(P + "/token/activate", data={"csrf": csrf}).status_code == 303
    site.clock.now += HOUR - 1
    assert not gone(manager, "/token")
    site.clock.now += 1
    assert gone(manager, "/token")


def test_a_member_removed_from_the_team_loses_access_at_once(site: Site) -> None:
    value = issue(site)["token"]
    ann = {"name": "ann", "identities": {"cluster": "ann"}}
    assert site.call("POST", "/urgent/token/members", token=value, json=ann).is_success
    assert site.call("POST", "/urgent/token/activate", token=value).is_success
    member, _ = signed_in(site, site.keys["user"])
    assert "1 active session(s)" in member.get(P + "/me").text
    assert auth(site, "user", "cluster", "yellow").json()["ok"] is True
    assert site.call("DELETE", "/urgent/token/members/ann", token=value).is_success
    assert auth(site, "user", "cluster", "yellow").json() == {
        "ok": False, "token_id": None, "reason": "no active session", "compensation": False,
        "policy": None,
    }  # fmt: skip
    r = auth(site, "resource", "cluster", "yellow", identity="ann")
    assert r.json()["ok"] is False
    page = member.get(P + "/me").text
    assert "No active session" in page and value not in page
