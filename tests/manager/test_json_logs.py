"""`--log-format json`: every stderr line is one JSON object carrying the ids that apply,
from a real `elasticsite run` and a real broker, and no secret appears in them."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
from pathlib import Path
from typing import Any

from tests.cli import argv, local_cloud, run_command, site_file, site_toml
from tests.context.conftest import BrokerProcess, free_port, node_info

from elasticsite.logs import JsonFormatter, ids

from .conftest import wait_for

CONFIG = site_toml(
    "jsonsite",
    local_cloud("lab", 2, seed=5),
    on_shutdown="drain",
    shutdown_timeout=30.0,
)


def lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_manager_logs_json_lines_with_the_site_worker_cloud_and_instance(
    tmp_path: Path,
) -> None:
    cfg, state = site_file(tmp_path, CONFIG)
    run_command("submit", "-c", str(cfg), "--count", "2", "--", "sleep", "0.5", check=True)
    run = subprocess.Popen(argv("run", "-c", str(cfg), "--log-format", "json"),
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    from elasticsite.batch.local import LocalBatch
    from elasticsite.model import JobState

    try:
        batch = LocalBatch(state / "batch.db")
        wait_for(lambda: all(j.state is JobState.DONE for j in batch.jobs()), 60, "the jobs")
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=60)
    finally:
        run.kill()
    records = lines(stderr)  # every line parses
    assert records, stderr
    assert all(r["site"] == "jsonsite" for r in records)
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert records[0]["message"].startswith("elasticsite ")
    moves = [r for r in records if r["message"].startswith("worker ") and "->" in r["message"]]
    assert moves
    for r in moves:
        assert r["message"].startswith(f"worker {r['worker']}: ")
        assert r["cloud"] == "lab"
    joined = [r for r in moves if "-> idle" in r["message"] or "-> busy" in r["message"]]
    assert joined and all(r["instance"] and r["node"] for r in joined)


def test_the_broker_logs_json_and_never_a_secret(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "state", free_port(), extra=("--log-format", "json",
                                                                    "--access-log"))  # fmt: skip
    broker.start()
    try:
        token = broker.token_file.read_text().strip()
        ctx = broker.admin().create("cluster")
        node = broker.node(ctx)
        joined = node.join(node_info("w1"))
        node.close()
    finally:
        _, stderr = broker.terminate()
    records = lines(stderr)
    assert records
    text = stderr
    for secret in (token, ctx.secret, joined.node_secret):
        assert secret not in text
    assert any("/ctx/" in r["message"] for r in records)


def test_json_lines_escape_what_would_break_a_line() -> None:
    record = logging.LogRecord("x", logging.WARNING, "", 0, "a\nb\x1b[2J", (), None)
    record.__dict__.update(ids(worker="w\n1", cloud=None))
    line = JsonFormatter("s").format(record)
    assert "\n" not in line
    assert json.loads(line) == {
        "time": json.loads(line)["time"],
        "level": "warning",
        "logger": "x",
        "message": "a\nb\x1b[2J",
        "site": "s",
        "worker": "w\n1",
    }
