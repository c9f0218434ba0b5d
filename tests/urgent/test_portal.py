"""The urgent portals over HTTPS on a real uvicorn: who sees what, CSRF, cookies, and
that a token's value never shows twice."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from elasticsite.urgent.tokens import Urgency

from .test_routes import HOUR, Site

P = "/urgent/portal"


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    s = Site(tmp_path)
    yield s
    for c in _clients.pop(id(s), []):
        c.close()  # no keep-alive connection left to hold the server's shutdown
    s.stop()


_clients: dict[int, list[httpx.Client]] = {}


def browser(site: Site) -> httpx.Client:
    c = httpx.Client(base_url=f"https://127.0.0.1:{site.port}", verify=site.ca)
    _clients.setdefault(id(site), []).append(c)
    return c


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def sign_in(site: Site, credential: str) -> tuple[httpx.Client, httpx.Response]:
    c = browser(site)
    form = c.get(P + "/login")
    r = c.post(P + "/login", data={"credential": credential, "csrf": csrf(form.text)},
               follow_redirects=True)  # fmt: skip
    return c, r


def test_each_kind_of_visitor_lands_on_their_own_portal(site: Site) -> None:
    _, value = site.store.issue(["cluster"], Urgency.RED, HOUR, site.clock(), issued_by="ops")
    for who, credential, lands in (
        ("admin", site.keys["admin"], "/admin"),
        ("user", site.keys["user"], "/me"),
        ("manager", value, "/token"),
    ):
        c, r = sign_in(site, credential)
        assert r.status_code == 200 and r.url.path == P + lands, who
        # ... and is turned away from the others'.
        for other in {"/admin", "/me", "/token"} - {lands}:
            assert c.get(P + other).headers["location"] == P + "/login", (who, other)
    _, r = sign_in(site, site.keys["resource"])
    assert "Resource keys are for submit paths" in r.text


def test_the_session_cookie_is_secure_httponly_and_strict(site: Site) -> None:
    c = browser(site)
    form = c.get(P + "/login")
    r = c.post(P + "/login", data={"credential": site.keys["admin"], "csrf": csrf(form.text)})
    cookie = r.headers["set-cookie"]
    for flag in ("HttpOnly", "Secure", "SameSite=strict", "Path=/urgent/portal"):
        assert flag.lower() in cookie.lower(), cookie
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]


def test_forms_without_the_session_csrf_token_are_refused(site: Site) -> None:
    c, _ = sign_in(site, site.keys["admin"])
    bad = c.post(P + "/admin/tokens", data={"r:cluster": "on", "max_urgency": "red",
                                            "hours": "1", "csrf": "forged"})  # fmt: skip
    assert bad.status_code == 403 and site.store.tokens() == []
    login = browser(site).post(P + "/login", data={"credential": site.keys["admin"],
                                                   "csrf": "x"})  # fmt: skip
    assert login.status_code == 403  # no sign-in form cookie: a cross-site post


def test_an_admin_issues_sees_once_maps_policies_and_expires(site: Site) -> None:
    c, page = sign_in(site, site.keys["admin"])
    token = csrf(page.text)
    r = c.post(P + "/admin/tokens", data={"r:cluster": "on", "r:elsewhere": "on",
                                          "max_urgency": "orange", "hours": "2",
                                          "label": "storm <b>", "csrf": token})  # fmt: skip
    assert r.status_code == 201
    value = re.search(r'id="token-value">([A-Z0-9-]+)<', r.text).group(1)  # type: ignore[union-attr]
    (t,) = site.store.tokens()
    assert t.resources == {"cluster"}  # not an admin of "elsewhere": not in the token
    assert site.store.by_value(value) is not None
    assert "storm &lt;b&gt;" in r.text  # escaped
    again = c.get(P + "/admin").text
    assert value not in again and value.replace("-", "") not in again
    m = c.post(P + "/admin/resources/cluster", data={"red": "preemption", "orange": "next_to_run",
                                                     "csrf": token})  # fmt: skip
    assert m.status_code == 303
    assert site.service.resources.of("cluster") == {"red": "preemption", "orange": "next_to_run"}
    foreign = c.post(P + "/admin/resources/elsewhere", data={"red": "preemption", "csrf": token})
    assert foreign.status_code == 403
    bad = c.post(P + "/admin/resources/cluster", data={"red": "nuke", "csrf": token})
    assert bad.status_code == 422 and "unknown policy &#39;nuke&#39;" in bad.text
    c.post(P + "/admin/tokens/" + t.id + "/expire", data={"csrf": token})
    assert site.store.get(t.id).state(site.clock()).value == "expired"  # type: ignore[union-attr]


def test_the_audit_log_filters_and_shows_only_the_admins_resources(site: Site) -> None:
    t, _ = site.store.issue(["cluster"], Urgency.RED, HOUR, site.clock(), issued_by="ops")
    site.store.add_member(t.id, "ann", {"cluster": "ann"}, site.clock(), "m")
    site.store.activate(t, site.clock(), "m")
    now = site.clock()
    site.store.authenticate("cluster", "ann", Urgency.RED, now, "10.0.0.1")
    site.store.authenticate("cluster", "eve", Urgency.RED, now, "10.0.0.2")
    site.store.authenticate("elsewhere", "zed", Urgency.RED, now, "10.0.0.3")
    c, _ = sign_in(site, site.keys["admin"])
    everything = c.get(P + "/admin/audit").text
    assert "eve" in everything and "ann" in everything and "zed" not in everything
    refused = c.get(P + "/admin/audit", params={"outcome": "refused"}).text
    assert "eve" in refused and ">ann<" not in refused.split('id="audit"')[1]
    assert "not an administrator of elsewhere" in c.get(
        P + "/admin/audit", params={"resource": "elsewhere"}).text  # fmt: skip


def test_the_token_manager_starts_the_session_and_manages_the_team(site: Site) -> None:
    t, value = site.store.issue(["cluster", "cloud"], Urgency.RED, HOUR, site.clock(),
                                issued_by="ops")  # fmt: skip
    c, page = sign_in(site, value)
    token = csrf(page.text)
    assert 'id="state">issued<' in page.text
    r = c.post(P + "/token/members", data={"name": "ann", "id:cluster": "ann", "csrf": token},
               follow_redirects=True)  # fmt: skip
    assert 'id="member-ann"' in r.text
    bad = c.post(P + "/token/members", data={"name": "x y", "id:cluster": "x", "csrf": token})
    assert bad.status_code == 422 and "without spaces" in bad.text
    r = c.post(P + "/token/activate", data={"csrf": token}, follow_redirects=True)
    assert 'id="state">active<' in r.text and "1 h 00 min" in r.text
    site.clock.now += 600
    assert "50 min" in c.get(P + "/token").text
    c.post(P + "/token/members/ann/remove", data={"csrf": token})
    assert site.store.get(t.id).members == {}  # type: ignore[union-attr]


def test_a_member_sees_their_sessions_and_submissions(site: Site) -> None:
    t, _ = site.store.issue(["cluster"], Urgency.ORANGE, HOUR, site.clock(), issued_by="ops",
                            label="surge")  # fmt: skip
    site.store.add_member(t.id, "ann", {"cluster": "ann"}, site.clock(), "m")
    site.store.activate(t, site.clock(), "m")
    site.store.authenticate("cluster", "ann", Urgency.RED, site.clock(), "10.0.0.1")
    _, r = sign_in(site, site.keys["user"])
    assert "1 active session(s)" in r.text and "surge" in r.text
    assert "urgency above the token" in r.text  # the refused red attempt, and why


def test_wrong_credentials_are_audited_and_rate_limited(site: Site) -> None:
    for _ in range(6):
        _, r = sign_in(site, "ABCD-EFGH-JKLM-NPQR")
    assert "too many refused attempts" in r.text
    _, r = sign_in(site, site.keys["admin"])  # even a good key, from that source, waits
    assert "too many refused attempts" in r.text


def test_the_servers_metrics_count_sessions_and_decisions(site: Site) -> None:
    t, _ = site.store.issue(["cluster"], Urgency.RED, HOUR, site.clock(), issued_by="ops")
    site.store.issue(["cluster"], Urgency.RED, HOUR, site.clock(), issued_by="ops")
    site.store.add_member(t.id, "ann", {"cluster": "ann"}, site.clock(), "m")
    site.store.activate(t, site.clock(), "m")
    site.store.authenticate("cluster", "ann", Urgency.RED, site.clock(), "10.0.0.1")
    site.store.authenticate("cluster", "eve", Urgency.RED, site.clock(), "10.0.0.1")
    r = browser(site).get("/metrics", headers={"Authorization": "Bearer " + "a" * 43})
    assert r.status_code == 200
    for line in (
        'elasticsite_urgent_sessions{state="active"} 1.0',
        'elasticsite_urgent_sessions{state="issued"} 1.0',
        'elasticsite_urgent_authentications_total{outcome="allowed"} 1.0',
        'elasticsite_urgent_authentications_total{outcome="refused"} 1.0',
        'elasticsite_urgent_principals{role="user"} 2.0',
    ):
        assert line in r.text, line


def test_credentials_typed_into_the_portal_are_never_logged(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    _, value = site.store.issue(["cluster"], Urgency.RED, HOUR, site.clock(), issued_by="ops")
    with caplog.at_level(logging.DEBUG):
        sign_in(site, value)
        sign_in(site, site.keys["admin"])
        sign_in(site, "esk_wrong")
    logged = caplog.text + "".join(str(r) for r in site.store.audit())
    for secret in (value, value.replace("-", ""), site.keys["admin"], "esk_wrong"):
        assert secret not in logged
