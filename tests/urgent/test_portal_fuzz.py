"""Property-based fuzzing of the urgent portals (which the OpenAPI schema leaves out) on a
real server: every page and form, with any path, query and form field, as a stranger
and signed in as an administrator, a team member and a token manager (with the
session's own CSRF token, so the forms' handlers are reached). The answer is never a
server error, and the sessions and the token survive it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .test_routes import Site, issue

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("portal-fuzz")]  # one served `site`
P = "/urgent/portal"
KINDS = ("stranger", "admin", "user", "manager")
ROUTES = [
    ("GET", ""), ("GET", "/login"), ("GET", "/admin"), ("GET", "/admin/audit"),
    ("GET", "/token"), ("GET", "/me"), ("POST", "/login"), ("POST", "/admin/tokens"),
    ("POST", "/admin/tokens/{}/expire"), ("POST", "/admin/resources/{}"),
    ("POST", "/token/activate"), ("POST", "/token/members"), ("POST", "/token/members/{}/remove"),
]  # fmt: skip
FIELDS = ["csrf", "credential", "name", "id:cluster", "id:cloud", "r:cluster", "r:cloud",
          "max_urgency", "hours", "label", "red", "orange", "yellow", "resource", "identity",
          "outcome", "failed", "error"]  # fmt: skip

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
TELLING = ["red", "orange", "yellow", "preemption", "on", "1", "nan", "inf", "-1", "1e308",
           "ann", "cluster", "cloud", ""]  # fmt: skip
value = st.one_of(text, st.sampled_from(TELLING))
extra = st.dictionaries(st.one_of(st.sampled_from(FIELDS), text), value, max_size=3)
PLAUSIBLE = {  # what each form's own page sends, each value then fuzzed or kept
    "/login": {"credential": "ABCD-EFGH-JKLM-NPQR"},
    "/admin/tokens": {"r:cluster": "on", "max_urgency": "red", "hours": "1", "label": "x"},
    "/admin/resources/{}": {"red": "preemption", "orange": "next_to_run", "yellow": "qos"},
    "/token/members": {"name": "bob", "id:cluster": "bob", "id:cloud": "bob@c"},
}


def form(path: str) -> st.SearchStrategy[dict[str, str]]:
    base = PLAUSIBLE.get(path, {})
    kept = st.fixed_dictionaries({k: st.one_of(st.just(v), value) for k, v in base.items()})
    return st.tuples(kept, extra).map(lambda both: {**both[1], **both[0]})


FORMS = {path: form(path) for _, path in ROUTES}
"""Each route's form strategy, built once (not for every example)."""
ROUTE = st.sampled_from(ROUTES)
NOW_AND_THEN = st.sampled_from([False, False, False, True])
MOSTLY = st.sampled_from([True, True, True, False])
FORM = "application/x-www-form-urlencoded"
CONTENT_TYPES = [FORM, "application/json", "text/plain", "multipart/form-data", FORM + "; x=1"]
raw = st.tuples(st.sampled_from(CONTENT_TYPES), st.binary(max_size=300))
part = st.one_of(st.sampled_from(["cluster", "cloud", "elsewhere", "ann", "bob"]), text)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Site, str]]:
    s = Site(Path(tmp_path_factory.mktemp("portal-fuzz")))
    value = issue(s, resources=["cluster", "cloud"])["token"]
    yield s, value
    s.stop()


def signed_in(s: Site, kind: str, value: str) -> tuple[httpx.Client, str]:
    c = s.client(f"127.0.0.{20 + KINDS.index(kind)}")
    form = c.get(P + "/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)  # type: ignore[union-attr]
    if kind == "stranger":
        return c, csrf
    credential = {"admin": s.keys["admin"], "user": s.keys["user"], "manager": value}[kind]
    r = c.post(P + "/login", data={"credential": credential, "csrf": csrf}, follow_redirects=True)
    found = re.search(r'name="csrf" value="([^"]+)"', r.text)
    assert found, r.text
    return c, found.group(1)


@pytest.mark.parametrize("kind", KINDS)
def test_no_input_makes_the_portals_fail(site: tuple[Site, str], kind: str) -> None:
    s, value = site
    c, csrf = signed_in(s, kind, value)

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        method, path = data.draw(ROUTE)
        url = P + path.format(quote(data.draw(part) or "x", safe=""))
        if method == "GET":
            r = c.get(url, params=data.draw(extra))
        elif data.draw(NOW_AND_THEN):  # now and then no form
            content_type, payload = data.draw(raw)
            r = c.post(url, content=payload, headers={"Content-Type": content_type})
        else:
            fields = data.draw(FORMS[path])
            if data.draw(MOSTLY):  # mostly the right CSRF
                fields["csrf"] = csrf
            r = c.post(url, data=fields)
        assert r.status_code < 500, (method, url, r.status_code, r.text[:500])

    run()
    # The visitor is still signed in (nothing in it signs out or breaks a session).
    if kind != "stranger":
        home = c.get(P)
        assert home.headers["location"] != P + "/login"
    assert s.call("GET", "/urgent/token", token=value).status_code == 200
