"""The dashboard clicked through in headless Chromium (Debian's chromium, driven by
Selenium), with the manager running the embedded site, stopped, and started again.

Screenshots of every page are kept in ``test-artifacts/dashboard/`` (or under
``$ELASTICSITE_ARTIFACTS``).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.browser import chromium, needs_chromium, screenshot
from tests.cli import local_cloud, site_toml
from tests.context.conftest import BrokerProcess, free_port
from tests.manager.conftest import kill_workers, wait_for

from elasticsite.batch.base import JobRequest
from elasticsite.batch.identity import own_account
from elasticsite.config import load_config
from elasticsite.manager.site import open_site
from elasticsite.spend import period_bounds

pytestmark = needs_chromium

ME = own_account()
SITE = site_toml(
    "browsed",
    local_cloud("lab", 3, seed=4, price_per_hour=0.5, billing_increment=1),
    history_interval=0.5,
    on_shutdown="leave",
    policy={"name": "on_demand", "spend_cap_per_hour": 2.0},
    extra='[policy.budget]\namount = {amount:.4f}\nperiod = "day"\n\n[site]\ncurrency = "EUR"\n',
)


@pytest.fixture
def browser() -> Iterator[object]:
    yield from chromium()


def shot(driver: object, name: str) -> None:
    screenshot(driver, "dashboard", name)


def test_dashboard_with_the_manager_running_then_stopped(tmp_path: Path, browser: object) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    d = browser
    state = tmp_path / "state"
    # Enough for two workers running to the end of the day, not for three.
    now = time.time()
    left = period_bounds(now, "day")[1] - now
    (tmp_path / "site.toml").write_text(SITE.format(state=state, amount=2.5 * 0.5 * left / 3600))
    site = open_site(load_config(tmp_path / "site.toml"), tmp_path)
    manager = site.manager()
    thread = threading.Thread(target=manager.run, daemon=True)
    thread.start()
    server = BrokerProcess(tmp_path / "server", free_port(),
                           extra=("--dashboard", str(tmp_path / "site.toml")))  # fmt: skip
    try:
        for _ in range(3):
            site.batch.submit(JobRequest(["sleep", "30"], 1, 120.0, ME))
        server.start()
        token = server.token_file.read_text().strip()

        def text(element_id: str) -> str:
            """An element's text; read again when the page replaced it meanwhile (the
            overview's live part is swapped every few seconds)."""
            for _ in range(20):
                try:
                    return str(d.find_element(By.ID, element_id).text)  # type: ignore[attr-defined]
                except StaleElementReferenceException:
                    time.sleep(0.05)
            raise AssertionError(f"#{element_id} kept changing")

        d.get(f"{server.url}/dashboard")  # type: ignore[attr-defined]
        assert d.current_url.endswith("/dashboard/login")  # type: ignore[attr-defined]
        # The sign-in page offers nothing but signing in.
        assert d.find_elements(By.TAG_NAME, "nav") == []  # type: ignore[attr-defined]
        assert d.find_elements(By.ID, "logout") == []  # type: ignore[attr-defined]
        shot(d, "1-sign-in")
        d.find_element(By.ID, "token").send_keys("not-the-token")  # type: ignore[attr-defined]
        d.find_element(By.ID, "signin").click()  # type: ignore[attr-defined]
        # A click that submits a form returns before the next page is there: wait for it.
        wait_for(lambda: "failed=1" in d.current_url, 10, "the refusal")  # type: ignore[attr-defined]
        assert "That is not the admin token." in text("failed")
        d.find_element(By.ID, "token").send_keys(token)  # type: ignore[attr-defined]
        d.find_element(By.ID, "signin").click()  # type: ignore[attr-defined]
        wait_for(lambda: d.current_url.endswith("/dashboard"), 10, "the overview")  # type: ignore[attr-defined]
        cookie = d.get_cookie("elasticsite_session")  # type: ignore[attr-defined]
        assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"

        # The page updates itself: two busy workers and one queued job show up without a
        # reload, with the spend rate they cost, what they have cost so far, and the
        # budget that holds back the third.
        wait_for(lambda: "lab 0 0 0 2 0 0 2" in text("workers"), 30, "two busy workers shown")
        assert "Live: updated" in text("freshness")
        assert d.find_elements(By.TAG_NAME, "nav")  # type: ignore[attr-defined]
        assert text("spend-rate") == "1.00"
        assert "Spending (EUR)" in text("spend") and "EUR per hour" in text("spend")
        wait_for(lambda: float(text("spent-total")) > 0, 30, "money spent")
        assert "lab" in text("spent")
        assert text("budget").startswith("Budget: ") and "EUR per day" in text("budget")
        wait_for(lambda: "1 launch held back (1 on lab)" in text("budget-refused"), 30,
                 "the budget's refusal")  # fmt: skip
        assert text("budget-refused").startswith("Refusing since ")
        assert "Queue: 1 jobs" in text("queue") and ME in text("queue")
        assert "busy" in text("transitions")
        assert d.find_elements(By.CSS_SELECTOR, "svg.chart polyline")  # type: ignore[attr-defined]

        # Each chart says what its axes measure.
        def titles(axis: str) -> list[str]:
            return [e.text for e in d.find_elements(  # type: ignore[attr-defined]
                By.CSS_SELECTOR, f"svg.chart text.{axis}-title")]  # fmt: skip

        assert titles("y") == ["workers", "jobs", "EUR per hour", "EUR"]
        assert all(t.startswith("time (") for t in titles("x")) and len(titles("x")) == 4
        shot(d, "2-overview-live")

        d.find_element(By.LINK_TEXT, "Workers").click()  # type: ignore[attr-defined]
        assert "2 workers" in text("all-workers") and "lab-" in text("all-workers")
        shot(d, "3-workers")

        # The manager stops: at once the page says since when its state is stale.
        manager.stop()
        thread.join(30)
        d.find_element(By.LINK_TEXT, "Overview").click()  # type: ignore[attr-defined]
        wait_for(lambda: "Stale since" in text("freshness"), 30, "stale shown")
        assert "the manager stopped" in text("freshness") and "Live" not in text("freshness")
        assert "last known state" in text("freshness")
        assert "lab 0 0 0 2 0 0 2" in text("workers")
        shot(d, "4-overview-manager-stopped")

        # Started again once it was away longer than three samples' time (1.5 s), it is
        # live again, and the time it was away is a gap in the charts: two lines.
        def away() -> bool:
            d.find_element(By.LINK_TEXT, "Overview").click()  # type: ignore[attr-defined]
            found = re.search(r"\((\d+) s ago\)", text("freshness"))
            return found is not None and int(found[1]) >= 2

        wait_for(away, 30, "the manager to be away two seconds", every=0.5)
        manager = site.manager()
        thread = threading.Thread(target=manager.run, daemon=True)
        thread.start()
        wait_for(lambda: "Live: updated" in text("freshness"), 30, "live again")
        workers_lines = "//section[h2[starts-with(., 'Workers')]]//*[local-name()='polyline']"
        wait_for(lambda: len(d.find_elements(By.XPATH, workers_lines)) == 2, 30,  # type: ignore[attr-defined]
                 "the gap in the workers chart")  # fmt: skip
        shot(d, "5-overview-after-a-gap")

        d.find_element(By.ID, "logout").click()  # type: ignore[attr-defined]
        wait_for(lambda: d.current_url.endswith("/dashboard/login"), 10, "sign-in")  # type: ignore[attr-defined]
        d.get(f"{server.url}/dashboard/workers")  # type: ignore[attr-defined]
        assert d.current_url.endswith("/dashboard/login")  # type: ignore[attr-defined]
    finally:
        manager.stop()
        thread.join(30)
        if server.proc is not None:
            server.terminate()
        kill_workers(site)
