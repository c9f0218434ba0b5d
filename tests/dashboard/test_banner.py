"""The server as an operator starts it: the pages its banner names exist, and the
dashboard of a site that has not started says where it looked, creating nothing."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
from tests.context.conftest import BrokerProcess, free_port

SITE = '[manager]\nsite_id = "unstarted"\nstate_dir = "state"\n[[clouds]]\nname = "local"\n'


def test_the_banner_names_pages_that_exist_and_an_unstarted_site_says_where_it_looked(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    cfg = conf / "site.toml"
    cfg.write_text(SITE)
    broker = BrokerProcess(
        tmp_path / "server", free_port(), extra=("--dashboard", str(cfg), "--urgent")
    )
    broker.start()
    try:
        assert broker.proc is not None and broker.proc.stdout is not None
        banner = [broker.proc.stdout.readline().strip() for _ in range(6)]
        links = dict(line.split(None, 1) for line in banner if "://" in line)
        assert links == {
            "broker": broker.url,
            "dashboard": f"{broker.url}/dashboard",
            "urgent": f"{broker.url}/urgent/portal",
        }, banner
        ca = ssl.create_default_context(cafile=str(broker.cert))
        token = broker.token_file.read_text().strip()
        with httpx.Client(verify=ca, timeout=10, follow_redirects=True) as http:
            for name in ("dashboard", "urgent"):  # the pages a person opens, signed in or not
                answer = http.get(links[name])
                assert answer.status_code == 200, (name, answer.status_code)
                assert "text/html" in answer.headers["content-type"], name
            page = http.get(links["dashboard"], headers={"Authorization": f"Bearer {token}"})
    finally:
        broker.terminate()
    assert page.status_code == 200
    text = " ".join(page.text.split())
    assert f"No site state at {conf / 'state' / 'manager.db'}" in text, text
    assert f"<code>elasticsite run -c {cfg}</code> starts it" in text
    assert sorted(p.name for p in conf.iterdir()) == ["site.toml"]  # nothing created
