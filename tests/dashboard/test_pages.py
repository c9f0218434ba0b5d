"""The dashboard's pages as the server renders them, fetched over real HTTPS from the
project's server running in this process, over a state store written the way the
manager writes it."""

from __future__ import annotations

import re
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from tests.context.conftest import free_port

from elasticsite.context.tls import ensure_certificate
from elasticsite.dashboard.routes import Dashboard
from elasticsite.manager.store import StateStore
from elasticsite.server import BrokerServer, build_server, create_app

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
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
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
