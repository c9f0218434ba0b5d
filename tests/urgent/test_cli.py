"""`elasticsite urgent key ...` and `elasticsite broker --urgent`, as processes."""

from __future__ import annotations

import re
import ssl
import stat
import subprocess
from pathlib import Path

import httpx
from tests.cli import run_command
from tests.context.conftest import BrokerProcess, free_port


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_command("urgent", *args, timeout=60, env={"COLUMNS": "200"})


def key_of(out: str) -> str:
    found = re.search(r"key \(shown once, keep it secret\): (esk_\S+)", out)
    assert found, out
    return found.group(1)


def test_keys_made_on_the_command_line_open_the_served_services(tmp_path: Path) -> None:
    state = tmp_path / "server"
    admin = cli("key", "add", "ops", "--role", "admin", "--resource", "cluster",
                "--state-dir", str(state))  # fmt: skip
    assert admin.returncode == 0, admin.stderr
    user = cli("key", "add", "ann", "--identity", "cluster=ann", "--state-dir", str(state))
    assert (state / "urgent.db").stat().st_mode & 0o777 == stat.S_IRUSR | stat.S_IWUSR
    assert key_of(admin.stdout) not in (state / "urgent.db").read_bytes().decode("latin-1")
    listed = cli("key", "list", "--state-dir", str(state))
    assert listed.stdout.split() == ["user", "ann", "cluster", "admin", "ops", "cluster"]
    bad = cli("key", "add", "eve", "--identity", "cluster", "--state-dir", str(state))
    assert (bad.returncode, bad.stderr.strip()) == (
        2, "error: --identity 'cluster': give RESOURCE=IDENTITY")  # fmt: skip

    server = BrokerProcess(state, free_port(), extra=("--urgent", "--docs"))
    server.start()
    try:
        http = httpx.Client(base_url=server.url,
                            verify=ssl.create_default_context(cafile=str(server.cert)))  # fmt: skip
        r = http.post("/urgent/tokens", headers={"Authorization": f"Bearer {key_of(admin.stdout)}"},
                      json={"resources": ["cluster"], "max_urgency": "red",
                            "session_seconds": 3600})  # fmt: skip
        assert r.status_code == 201, r.text
        me = http.get("/urgent/me", headers={"Authorization": f"Bearer {key_of(user.stdout)}"})
        assert me.json() == {"name": "ann", "identities": {"cluster": "ann"}, "sessions": []}
        assert "/urgent/authenticate" in http.get("/openapi.json").text
        http.close()
        assert cli("key", "remove", "ann", "--state-dir", str(state)).returncode == 0
    finally:
        server.terminate()
