"""The urgent portals' main flows clicked through in headless Chromium (Debian's
chromium, driven by Selenium) against a real server on 127.0.0.1.

An administrator maps urgencies to policies and issues a token; its manager adds a
member and starts the session; the member sees it and their submissions; the
administrator filters the audit log. Screenshots of each page are kept in
``test-artifacts/urgent/`` (or under ``$ELASTICSITE_ARTIFACTS``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.browser import chromium, needs_chromium, screenshot
from tests.manager.conftest import wait_for

from .test_routes import Site

pytestmark = needs_chromium


@pytest.fixture
def browser() -> Iterator[Any]:
    yield from chromium()


def test_the_portals_main_flows(tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    d = browser
    site = Site(tmp_path)
    base = f"https://127.0.0.1:{site.port}/urgent/portal"

    def shot(name: str) -> None:
        screenshot(d, "urgent", name)

    def submit(button: str, then: str) -> None:
        """Click a form's button and wait for the page it leads to (a click returns
        before the next page is there)."""
        before = d.find_element(By.TAG_NAME, "html")
        d.find_element(By.ID, button).click()
        wait_for(lambda: then in d.current_url and _stale(before), 10, f"the page after {button}")

    def sign_in(credential: str, lands: str) -> None:
        d.get(base)
        wait_for(lambda: d.current_url.endswith("/login"), 10, "the sign-in page")
        d.find_element(By.ID, "credential").send_keys(credential)
        submit("signin", lands)

    def sign_out() -> None:
        submit("logout", "/login")

    try:
        # The administrator: a policy map, then a token.
        sign_in("esk_not-a-key", "failed=1")
        assert "not known here" in d.find_element(By.ID, "error").text
        shot("1-refused")
        sign_in(site.keys["admin"], "/admin")
        assert "ops (admin)" in d.find_element(By.ID, "who").text
        form = d.find_element(By.ID, "row-cluster")
        Select(form.find_element(By.NAME, "red")).select_by_value("preemption")
        Select(form.find_element(By.NAME, "orange")).select_by_value("next_to_run")
        before = d.find_element(By.TAG_NAME, "html")
        form.find_element(By.TAG_NAME, "button").click()
        wait_for(lambda: _stale(before), 10, "the saved map")
        assert site.service.resources.of("cluster") == {"red": "preemption",
                                                        "orange": "next_to_run"}  # fmt: skip
        d.find_element(By.ID, "r-cluster").click()
        Select(d.find_element(By.ID, "max_urgency")).select_by_value("red")
        d.find_element(By.ID, "hours").clear()
        d.find_element(By.ID, "hours").send_keys("2")
        d.find_element(By.ID, "label").send_keys("storm surge")
        submit("issue-token", "/admin/tokens")
        value = d.find_element(By.ID, "token-value").text
        assert len(value.replace("-", "")) == 16
        shot("2-admin-issued")
        sign_out()

        # The token manager: a member, then the session.
        sign_in(value, "/token")
        assert d.find_element(By.ID, "state").text == "issued"
        d.find_element(By.ID, "name").send_keys("ann")
        d.find_element(By.ID, "id-cluster").send_keys("ann")
        submit("add-member", "/token")
        wait_for(lambda: d.find_elements(By.ID, "member-ann"), 10, "ann in the team")
        submit("activate", "/token")
        wait_for(lambda: d.find_element(By.ID, "state").text == "active", 10, "the session")
        assert d.find_element(By.ID, "time-left").text == "2 h 00 min"
        shot("3-token-manager")
        sign_out()

        # The member submits (as the cluster's submit path would), then looks.
        r = site.call("POST", "/urgent/authenticate", "user",
                      json={"resource": "cluster", "urgency": "red"})  # fmt: skip
        assert r.json()["ok"] and r.json()["policy"] == "preemption"
        site.call("POST", "/urgent/authenticate", "stranger",
                  json={"resource": "cluster", "urgency": "red"})  # fmt: skip
        sign_in(site.keys["user"], "/me")
        assert "1 active session(s)" in d.find_element(By.ID, "summary").text
        runs = d.find_element(By.ID, "runs").text
        assert "cluster ann red allowed" in runs
        shot("4-member")
        sign_out()

        # The administrator reads the refusals only.
        sign_in(site.keys["admin"], "/admin")
        d.find_element(By.LINK_TEXT, "Audit log").click()
        wait_for(lambda: d.current_url.endswith("/admin/audit"), 10, "the audit log")
        Select(d.find_element(By.ID, "f-outcome")).select_by_value("refused")
        submit("filter", "outcome=refused")
        rows = d.find_element(By.ID, "audit").text
        assert "bob" in rows and "no active session" in rows and " ann " not in rows
        shot("5-audit-refused")
    finally:
        site.stop()


def _stale(element: Any) -> bool:
    from selenium.common.exceptions import WebDriverException

    try:
        element.is_enabled()
    except WebDriverException:  # stale, or "does not belong to the document": a new page
        return True
    return False
