"""The urgent submit gate: who submits is what the kernel says, never what the request says."""

from __future__ import annotations

import getpass
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.manager.conftest import wait_for

from elasticsite.model import JobState
from elasticsite.urgent.gate import MAX_REQUEST, Gate, GateError, ask_gate, parse_request

from .test_embedded_site import running_site, urgent

ME = getpass.getuser()
GOOD = {"urgency": "red", "command": ["sleep", "1"]}


@pytest.mark.parametrize(
    ("request_", "why"),
    [
        ({**GOOD, "user": "root"}, "unknown field(s) user"),
        ({**GOOD, "identity": "root"}, "unknown field(s) identity"),
        ({**GOOD, "urgency": "purple"}, "urgency must be"),
        ({**GOOD, "command": "rm -rf /"}, "command must be"),
        ({**GOOD, "command": ["a\x00b"]}, "command must be"),
        ({**GOOD, "cores": True}, "cores must be"),
        ({**GOOD, "walltime": -1}, "walltime must be"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_requests_say_what_to_run_and_nothing_else(request_: Any, why: str) -> None:
    with pytest.raises(GateError, match=why.replace("(", r"\(").replace(")", r"\)")):
        parse_request(json.dumps(request_).encode())


def test_the_kernel_names_the_user_and_junk_does_not_stop_the_gate(tmp_path: Path) -> None:
    seen: list[str] = []

    def handle(user: str, req: Any) -> dict[str, Any]:
        seen.append(user)
        return {"ok": True, "user": user, "command": req["command"]}

    gate = Gate(tmp_path / "run" / "urgent.sock", handle)
    gate.start()
    try:
        assert stat.S_IMODE(os.stat(gate.path).st_mode) == 0o666
        assert ask_gate(gate.path, GOOD)["user"] == ME
        with socket.socket(socket.AF_UNIX) as s:  # an oversized line, then a hang-up
            s.connect(str(gate.path))
            s.sendall(b"x" * (MAX_REQUEST + 10) + b"\n")
            assert b"larger than" in s.makefile("rb").readline()
        with pytest.raises(GateError, match="unknown field"):
            ask_gate(gate.path, {**GOOD, "user": "root"})
        assert ask_gate(gate.path, GOOD)["ok"]  # still serving
        assert seen == [ME, ME]
    finally:
        gate.stop()
    assert not gate.path.exists()
    with pytest.raises(GateError, match="cannot reach the urgent gate"):
        ask_gate(gate.path, GOOD)


def test_urgent_submit_goes_through_the_gate_as_the_calling_user(tmp_path: Path) -> None:
    with running_site(tmp_path) as (site, _, cfg):
        sock = tmp_path / "gate" / "urgent.sock"
        with cfg.open("a") as f:
            f.write(f'socket = "{sock}"\n')  # the file ends in its [urgent] section
        gate = subprocess.Popen(
            [sys.executable, "-m", "elasticsite", "urgent", "gate", "-c", str(cfg)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_for(sock.exists, 30, "the gate's socket")
            done = urgent(cfg, "red", "sleep", "1")
            assert done.returncode == 0, done.stderr
            job = done.stdout.strip()
            assert f"as {ME}: red, preemption" in done.stderr
            wait_for(lambda: site.batch.job(job).state is JobState.DONE, 60, "the urgent job")
            assert site.batch.job(job).user == ME
            refused = urgent(cfg, "purple", "true")
            assert refused.returncode != 0
        finally:
            gate.terminate()
            gate.wait(20)
