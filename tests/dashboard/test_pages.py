"""The dashboard's pages as the server renders them, fetched over real HTTPS from the
project's server running in this process, over a state store written the way the
manager writes it."""

from __future__ import annotations

import re
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from tests.context.conftest import free_port, serve_in_thread

from elasticsite.context.tls import ensure_certificate
from elasticsite.dashboard.routes import Dashboard
from elasticsite.history.samples import HistoryWriter
from elasticsite.manager.report import StepReport
from elasticsite.manager.store import StateStore
from elasticsite.model import CloudSpec, Job
from elasticsite.server import BrokerServer, build_server, create_app
from elasticsite.snapshot import SiteSnapshot
from elasticsite.spend import WATCH_KEY, Budget, BudgetWatch, Refused, Spent, period_bounds, utc

TOKEN = "dashboard-admin-token-0123456789abcdef"


@dataclass
class Served:
    """The server with a dashboard over ``db``, whose clock the test sets."""

    url: str
    db: Path
    ca: ssl.SSLContext
    now: list[float]

    def client(self, *, signed_in: bool = True) -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKEN}"} if signed_in else {}
        return httpx.Client(base_url=self.url, verify=self.ca, headers=headers, timeout=10)

    def page(self, path: str = "/dashboard") -> str:
        with self.client() as http:
            answer = http.get(path)
        assert answer.status_code == 200, answer.text
        return answer.text


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    db = tmp_path / "site" / "manager.db"
    store = StateStore(db)
    store.set_meta("site_id", "paged")
    store.close()
    now = [time.time()]
    dashboard = Dashboard(db, clock=lambda: now[0], stale_after=180.0)
    state = tmp_path / "server"
    app = create_app(state, admin_token=TOKEN, dashboard=dashboard)
    cert, key = ensure_certificate(state, ["127.0.0.1"])
    port = free_port()
    server: BrokerServer = build_server(app, host="127.0.0.1", port=port, certfile=cert,
                                        keyfile=key, log_level="warning")  # fmt: skip
    thread = serve_in_thread(server)
    try:
        yield Served(
            f"https://127.0.0.1:{port}", db, ssl.create_default_context(cafile=str(cert)), now
        )
    finally:
        server.should_exit = True
        thread.join(20)


def test_the_sign_in_page_shows_no_navigation_and_a_session_does(served: Served) -> None:
    with served.client(signed_in=False) as http:
        form = http.get("/dashboard/login")
        assert form.status_code == 200
        assert "<nav" not in form.text and "logout" not in form.text
        assert 'id="signin"' in form.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        done = http.post("/dashboard/login", data={"token": TOKEN, "csrf": csrf[1]})
        assert done.status_code == 303 and done.headers["location"] == "/dashboard"
        overview = http.get("/dashboard")
        assert overview.status_code == 200
        assert '<nav><a href="/dashboard">Overview</a>' in overview.text
        assert 'id="logout"' in overview.text
        failed = http.get("/dashboard/login?failed=1")
        assert "<nav" not in failed.text and "That is not the admin token." in failed.text


# -- what the overview shows, from samples written as the manager writes them ---------

LAB = CloudSpec("lab", price_per_hour=0.5, billing_increment=1)
MINUTE = 60.0


def writer(served: Served, **kwargs: object) -> HistoryWriter:
    return HistoryWriter(served.db, [LAB], 2.0, every=MINUTE, **kwargs)  # type: ignore[arg-type]


def step(at: float, workers: int = 2, spent: float | None = None, **extra: object) -> StepReport:
    """What one step of the manager reports: ``workers`` busy on lab, a job queued."""
    snapshot = SiteSnapshot(at, [Job("9", 1, 60.0, at - 5)], [], [], [LAB])
    money = None if spent is None else Spent(at, {"lab": spent})
    return StepReport(at=at, snapshot=snapshot, worker_counts={("lab", "busy"): workers},
                      spent=None if money is None else lambda: money, **extra)  # type: ignore[arg-type]  # fmt: skip


def polylines(page: str, title: str) -> list[list[tuple[float, float]]]:
    """The points of each line of the chart titled ``title``."""
    section = page.split(f"<h2>{title} (last hours)</h2>")[1].split("</section>")[0]
    return [
        [tuple(map(float, p.split(","))) for p in points.split()]  # type: ignore[misc]
        for points in re.findall(r'<polyline points="([^"]+)"', section)
    ]


def test_a_gap_in_the_history_is_drawn_as_a_gap_not_a_line(served: Served) -> None:
    t0 = served.now[0] - 3 * 3600
    w = writer(served)
    for k in range(20):  # twenty minutes of samples ...
        w(step(t0 + k * MINUTE, workers=2))
    for k in range(60, 90):  # ... the manager stopped for forty, then thirty more
        w(step(t0 + k * MINUTE, workers=4))
    w.close()
    served.now[0] = t0 + 90 * MINUTE
    first, second = polylines(served.page(), "Workers")
    assert len(first) == 20 and len(second) == 30
    # Nothing is drawn across the forty minutes without a sample.
    assert second[0][0] - first[-1][0] > 0.3 * (second[-1][0] - first[0][0])
    assert {y for _, y in first} != {y for _, y in second}


def test_a_lone_sample_between_gaps_is_a_dot(served: Served) -> None:
    t0 = served.now[0] - 3600
    w = writer(served)
    for at in (t0, t0 + 10 * MINUTE, t0 + 11 * MINUTE):
        w(step(at))
    served.now[0] = t0 + 12 * MINUTE
    page = served.page()
    section = page.split("<h2>Workers (last hours)</h2>")[1].split("</section>")[0]
    assert section.count("<circle ") == 1 and section.count("<polyline ") == 1


def test_live_until_no_sample_came_for_a_few_intervals_then_stale_since(served: Served) -> None:
    t0 = served.now[0]
    w = writer(served)
    w(step(t0))
    served.now[0] = t0 + 170  # under three minutes: still live
    assert "Live: updated 2 min ago." in served.page()
    served.now[0] = t0 + 181
    page = served.page()
    assert "Live" not in page
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t0))
    assert re.search(
        rf"Stale since {since} \(3 min ago\):\s+the manager has not recorded a step since "
        r"\(it is stopped, or stuck\);\s+this is the last known state\.",
        page,
    ), page


def test_a_manager_that_stopped_is_stale_at_once_with_its_last_step(served: Served) -> None:
    t0 = served.now[0]
    w = writer(served)
    w(step(t0, workers=2))
    w(step(t0 + 5, workers=3))  # within the minute: not sampled while running ...
    w.close()  # ... but kept as the last known state when the manager stops
    served.now[0] = t0 + 6
    page = served.page()
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t0 + 5))
    assert "Live" not in page
    assert re.search(rf"Stale since {since} \(1 s ago\):\s+the manager stopped;", page), page
    assert '<span id="spend-rate">1.50</span>' in page  # the three workers of the last step
    # A manager started again is live again.
    again = writer(served)
    again(step(t0 + 10))
    served.now[0] = t0 + 11
    assert "Live: updated 1 s ago." in served.page()


def test_charts_have_labelled_time_and_value_axes_with_units(served: Served) -> None:
    t0 = served.now[0] - 2 * 3600
    w = writer(served, currency="EUR")
    for k in range(0, 120, 5):
        w(step(t0 + k * MINUTE, workers=k // 10, spent=k / 10))
    page = served.page()
    titles = re.findall(r'<text class="y-title"[^>]*>([^<]+)</text>', page)
    assert titles == ["workers", "jobs", "EUR per hour", "EUR"]
    zone = time.strftime("%Z", time.localtime(served.now[0]))
    assert re.findall(r'<text class="x-title"[^>]*>([^<]+)</text>', page) == [f"time ({zone})"] * 4
    workers = page.split("<h2>Workers (last hours)</h2>")[1].split("</section>")[0]
    ticks = re.findall(r'<text class="x-tick"[^>]*>([^<]+)</text>', workers)
    assert len(ticks) >= 2 and all(re.fullmatch(r"\d\d:\d\d", t) for t in ticks)
    values = re.findall(r'<text class="y-tick"[^>]*>([^<]+)</text>', workers)
    assert values == ["0", "5", "10", "15"]  # the most workers, 11, up to a round step
    spend = page.split("<h2>Spend per hour (last hours)</h2>")[1].split("</section>")[0]
    assert re.findall(r'<text class="y-tick"[^>]*>([^<]+)</text>', spend) == ["0", "2", "4", "6"]
    spent = page.split("<h2>Spent so far (last hours)</h2>")[1].split("</section>")[0]
    assert re.findall(r'<text class="y-tick"[^>]*>([^<]+)</text>', spent) == [
        "0", "5", "10", "15"
    ]  # fmt: skip


def test_what_was_spent_is_shown_beside_the_rate_with_the_currency_and_the_budget(
    served: Served,
) -> None:
    t0 = served.now[0]
    budget = Budget(500.0, "month")
    w = writer(served, currency="EUR", budget=budget)
    lo, hi = period_bounds(t0, "month")
    w(step(t0, spent=None))
    report = step(t0 + MINUTE, forecast=lambda: 497.6)
    spent = Spent(t0 + MINUTE, {"lab": 1234.5, "spare": 0.0}, (lo, hi), {"lab": 402.1})
    report.spent = lambda: spent
    w(report)
    store = StateStore(served.db)
    refused = Refused(t0, t0 + MINUTE, {"lab": 2}, 617.2, 500.0, hi)
    store.set_meta(WATCH_KEY, BudgetWatch(lo, refused).dump())
    served.now[0] = t0 + MINUTE + 1
    page = served.page()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))
    assert "Spending (EUR)" in text
    assert "1.00 EUR per hour of a cap of 2.00 EUR per hour; spent so far: 1234.50 EUR" in text
    assert "lab 1234.50 spare 0.00" in text
    assert (
        f"Budget: 500.00 EUR per month ({utc(lo)} to {utc(hi)}): 402.10 EUR spent, forecast "
        "497.60 EUR by the period's end"
    ) in text
    assert (
        f"Refusing since {utc(t0)}: 2 launches held back (2 on lab): the forecast spend to "
        f"{utc(hi)}, 617.20 EUR, would pass the budget of 500.00 EUR"
    ) in text
    assert 'id="budget-meter"' in page
    # A refusal of an earlier period is not this one's.
    store.set_meta(WATCH_KEY, BudgetWatch(lo, Refused(0, 1, {"lab": 2}, 9, 5, lo)).dump())
    assert "budget-refused" not in served.page()
