"""``POST /advisor/advise`` over a real uvicorn with TLS on 127.0.0.1, and who may ask."""

from __future__ import annotations

import ssl
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.cli import run_command
from tests.context.conftest import TOKEN, free_port, node_info, serve_in_thread

from elasticsite.advisor.routes import ADVISOR_TOKEN_FILE, load_advisor_token
from elasticsite.advisor.service import Advisor
from elasticsite.config.advisor import AdvisorConfig
from elasticsite.context.tls import ensure_certificate
from elasticsite.history.observations import HistoryStore, Observation, store_path
from elasticsite.server import BrokerServer, build_server, create_app

HOUR = 3600.0
SETTINGS = {
    "resources": [
        {"name": "hpc", "nodes": [4], "policies": ["default", "next_to_run"], "app": "flash"}
    ]
}


def history(state: Path) -> None:
    """Waits of 10 minutes (next-to-run) or 2 hours, runs of an hour: 60 each."""
    with HistoryStore(store_path(state)) as store:
        at = iter(range(1, 10_000))
        for policy, wait in (("next_to_run", 600.0), ("default", 2 * HOUR)):
            store.add(
                Observation(phase="allocation", resource="hpc", policy=policy, nodes=4,
                            value=wait, at=float(next(at)), source="csv")
                for _ in range(60)
            )  # fmt: skip
        store.add(
            Observation(phase="execution", resource="hpc", app="flash", nodes=4, value=HOUR,
                        at=float(next(at)), source="csv")
            for _ in range(60)
        )  # fmt: skip


@dataclass
class Served:
    url: str
    advisor_token: str
    cert: Path
    server: BrokerServer
    thread: threading.Thread

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            verify=ssl.create_default_context(cafile=str(self.cert)),
            timeout=10,
        )


def serve(tmp_path: Path, settings: dict[str, Any]) -> Served:
    site = tmp_path / "site"
    history(site)
    token, _ = load_advisor_token(site)
    advisor = Advisor(HistoryStore(store_path(site)), AdvisorConfig.model_validate(settings))
    broker_state = tmp_path / "broker"
    cert, key = ensure_certificate(broker_state, ["127.0.0.1"])
    app = create_app(
        broker_state, admin_token=TOKEN, advisor=advisor, advisor_token=token, docs=True
    )
    port = free_port()
    server = build_server(app, host="127.0.0.1", port=port, certfile=cert, keyfile=key)
    return Served(f"https://127.0.0.1:{port}", token, cert, server, serve_in_thread(server))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = serve(tmp_path, SETTINGS)
    yield s
    s.server.should_exit = True
    s.thread.join(20)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_advisor_token_gets_the_ranking(served: Served) -> None:
    with served.client() as http:
        r = http.post(
            "/advisor/advise", json={"deadline": "6h"}, headers=bearer(served.advisor_token)
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["deadline"], body["threshold"], body["observations"]) == (21600.0, 0.5, 180)
    assert [(c["label"], c["probability"], c["bound"]) for c in body["ranked"]] == [
        ("hpc, 4 nodes, next_to_run", pytest.approx(0.9025), 4200.0),
        ("hpc, 4 nodes, default", pytest.approx(0.9025), 3 * HOUR),
    ]
    assert body["ranked"][0]["phases"] == [
        {"phase": "allocation", "quantile": 0.95, "bound": 600.0},
        {"phase": "execution", "quantile": 0.95, "bound": 3600.0},
    ]
    assert body["suggestion"]["label"] == "hpc, 4 nodes, default"  # disturbs nobody
    assert body["dropped"] == [] and body["speculative"] is None
    assert body["speculative_reason"] == (
        "hpc, 4 nodes, next_to_run and hpc, 4 nodes, default share the resource hpc; no other "
        "configuration that can meet the deadline is independent of hpc, 4 nodes, next_to_run"
    )


def test_the_brokers_admin_token_may_ask_too(served: Served) -> None:
    with served.client() as http:
        r = http.post(
            "/advisor/advise",
            json={"deadline": 5400, "threshold": 0.9, "quantiles": [0.5, 0.95]},
            headers=bearer(TOKEN),
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["quantiles"] == [0.5, 0.95]
    assert [c["label"] for c in body["ranked"]] == ["hpc, 4 nodes, next_to_run"]
    assert [(c["label"], c["reason"]) for c in body["dropped"]] == [
        ("hpc, 4 nodes, default", "even the shortest bound, 3h00m, is past the deadline of 1h30m")
    ]


def test_nobody_else_gets_in(served: Served) -> None:
    with served.client() as http:
        ctx = http.post("/ctx", json={"name": "workers"}, headers=bearer(TOKEN)).json()
        joined = http.post(
            f"/ctx/{ctx['id']}/nodes", json=node_info("w1"), auth=(ctx["key"], ctx["secret"])
        ).json()
        attempts: list[dict[str, Any]] = [
            {},
            {"headers": {"Authorization": "Bearer"}},
            {"headers": bearer("wrong-token-0123456789abcdef")},
            {"headers": bearer(served.advisor_token[:-1])},
            {"headers": bearer(served.advisor_token + "x")},
            {"headers": {"Authorization": served.advisor_token}},  # no scheme
            {"headers": {"Authorization": f"Token {served.advisor_token}"}},
            {"auth": ("advisor", served.advisor_token)},  # Basic with the right secret
            {"auth": (ctx["key"], ctx["secret"])},  # the context's credentials
            {"auth": (joined["node_id"], joined["node_secret"])},  # a joined node's
            {"headers": bearer(ctx["secret"])},
            {"headers": bearer(joined["node_secret"])},
        ]
        for attempt in attempts:
            r = http.post("/advisor/advise", json={"deadline": "6h"}, **attempt)
            assert r.status_code == 401, attempt
            assert r.json() == {"detail": "invalid or missing credentials"}
            assert r.headers["www-authenticate"] == 'Bearer realm="elasticsite"'
        # Credentials are checked before the body: a stranger learns nothing from it.
        r = http.post("/advisor/advise", json={"deadline": "never"})
        assert r.status_code == 401
        r = http.get("/advisor/advise", headers=bearer(served.advisor_token))
        assert r.status_code == 405


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        (
            {"deadline": "6x"},
            422,
            "deadline: deadline '6x' is not a duration; write it like 6h, 90m, 1h30m, 2d or "
            "3600 (seconds)",
        ),
        (
            {"deadline": -5},
            422,
            "deadline: deadline -5.0 must be more than 0 seconds; write it like 6h, 90m, "
            "1h30m, 2d or 3600 (seconds)",
        ),
        ({}, 422, "deadline: Field required"),
        (
            {"deadline": "6h", "threshold": 2},
            422,
            "threshold: Input should be less than or equal to 1",
        ),
        (
            {"deadline": "6h", "quantiles": [0.5, 1.5]},
            422,
            "quantiles: each quantile must be strictly between 0 and 1 (got [1.5])",
        ),
        ({"deadline": "6h", "colour": "red"}, 422, "colour: Extra inputs are not permitted"),
    ],
)
def test_a_bad_question_is_answered_in_one_line(
    served: Served, body: dict[str, Any], status: int, detail: str
) -> None:
    with served.client() as http:
        r = http.post("/advisor/advise", json=body, headers=bearer(served.advisor_token))
    assert (r.status_code, r.json()) == (status, {"detail": detail})


def test_a_body_that_is_not_json(served: Served) -> None:
    with served.client() as http:
        r = http.post(
            "/advisor/advise",
            content=b"deadline=6h",
            headers={**bearer(served.advisor_token), "Content-Type": "application/json"},
        )
    assert (r.status_code, r.json()) == (400, {"detail": "the request body is not valid JSON"})


def test_a_site_with_nothing_to_rank_says_so(tmp_path: Path) -> None:
    s = serve(tmp_path, {})
    try:
        with s.client() as http:
            r = http.post("/advisor/advise", json={"deadline": "6h"}, headers=bearer(TOKEN))
        assert r.status_code == 409
        assert r.json()["detail"].startswith("no resources to rank: add [[advisor.resources]]")
    finally:
        s.server.should_exit = True
        s.thread.join(20)


def test_the_endpoint_is_in_the_openapi_schema(served: Served) -> None:
    with served.client() as http:
        schema = http.get("/openapi.json").json()
    op = schema["paths"]["/advisor/advise"]["post"]
    assert op["tags"] == ["advisor"]
    assert op["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AdviseRequest"
    }
    ok = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/AdviceOut"}
    assert {"400", "401", "409", "422"} <= set(op["responses"])
    models = schema["components"]["schemas"]
    assert set(models["AdviseRequest"]["properties"]) == {"deadline", "threshold", "quantiles"}
    assert models["AdviseRequest"]["required"] == ["deadline"]
    assert set(models["AdviceOut"]["properties"]) == {
        "deadline", "threshold", "quantiles", "confidence", "observations", "ranked",
        "dropped", "suggestion", "speculative", "speculative_reason",
    }  # fmt: skip
    assert "6h, 90m, 1h30m" in models["AdviseRequest"]["properties"]["deadline"]["description"]


def test_the_advisor_token_is_made_once_for_its_owner_alone(tmp_path: Path) -> None:
    token, path = load_advisor_token(tmp_path / "site")
    assert path == tmp_path / "site" / ADVISOR_TOKEN_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(token) >= 32
    assert load_advisor_token(tmp_path / "site") == (token, path)
    path.write_text("short\n")
    with pytest.raises(ValueError, match=r"the advisor token has 5 characters; use at least 16"):
        load_advisor_token(tmp_path / "site")


def test_the_broker_command_serves_a_sites_advisor(tmp_path: Path) -> None:
    site = tmp_path / "site"
    history(site)
    cfg = tmp_path / "site.toml"
    cfg.write_text(
        f'[manager]\nstate_dir = "{site}"\n[[clouds]]\nname = "local"\n'
        '[[advisor.resources]]\nname = "hpc"\nnodes = [4]\napp = "flash"\n'
    )
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "elasticsite", "broker", "--state-dir", str(tmp_path / "broker"),
         "--port", str(port), "--insecure-http", "--advisor", str(cfg)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "200"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120  # a bound on a hang
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the broker did not answer"
            time.sleep(0.1)
        token = (site / ADVISOR_TOKEN_FILE).read_text().strip()
        r = httpx.post(
            f"http://127.0.0.1:{port}/advisor/advise",
            json={"deadline": "6h"},
            headers=bearer(token),
        )
        assert r.status_code == 200, r.text
        assert [c["label"] for c in r.json()["ranked"]] == ["hpc, 4 nodes, default"]
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
    assert (
        f"advisor     http://127.0.0.1:{port}/advisor/advise, token {site / ADVISOR_TOKEN_FILE}"
        in out.splitlines()
    )


def test_the_broker_command_refuses_a_site_with_nothing_to_rank(tmp_path: Path) -> None:
    cfg = tmp_path / "site.toml"
    cfg.write_text(f'[manager]\nstate_dir = "{tmp_path / "site"}"\n[[clouds]]\nname = "local"\n')
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "200"}
    out = run_command("broker", "--state-dir", str(tmp_path / "broker"), "--insecure-http",
                      "--advisor", str(cfg), timeout=60, env=env)  # fmt: skip
    assert out.returncode == 2
    assert out.stderr == (
        f"error: {cfg}: [advisor] names no resources to rank; add [[advisor.resources]]\n"
    )
