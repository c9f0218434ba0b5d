"""The urgent submit gate: who submits is what the kernel says, never what the request says."""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.manager.conftest import wait_for
from tests.users import real_users

from elasticsite.config import load_config
from elasticsite.model import JobState
from elasticsite.urgent.gate import MAX_REQUEST, Gate, GateError, ask_gate, parse_request
from elasticsite.urgent.tokens import Urgency

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
        # Wrong types of every kind: each refused in one line, never a failure inside.
        ({**GOOD, "walltime": True}, "walltime must be"),
        ({**GOOD, "walltime": float("nan")}, "walltime must be"),
        ({**GOOD, "walltime": "60"}, "walltime must be"),
        ({**GOOD, "cores": 1.5}, "cores must be"),
        ({**GOOD, "cores": "2"}, "cores must be"),
        ({**GOOD, "cores": 10**30}, "cores must be"),
        ({**GOOD, "command": [["sleep"], "1"]}, "command must be"),
        ({**GOOD, "command": ["sleep", 1]}, "command must be"),
        ({**GOOD, "command": {"sleep": 1}}, "command must be"),
        ({**GOOD, "urgency": ["red"]}, "urgency must be"),
        ({**GOOD, "urgency": {"red": 1}}, "urgency must be"),
        ({**GOOD, "resource": 7}, "resource must be"),
        ({**GOOD, "resource": "x" * 200}, "resource must be"),
        ("red", "must be a JSON object"),
        (None, "must be a JSON object"),
        (7, "must be a JSON object"),
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


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"[" * 60_000, "nests deeper than 8 levels"),
        (b'{"urgency": "red", "command": ' + b"[" * 9 + b"]" * 9 + b"}", "nests deeper"),
        (b'{"urgency": "red", "command": ["' + b"9" * 5000 + b'"], "cores": ' + b"9" * 5000
         + b"}", "the request is not JSON"),
        (bytes(range(11, 256)), "the request is not JSON"),
        (b"\xff\xfe{}", "the request is not JSON"),
        (b"x" * (MAX_REQUEST + 1), "larger than"),
    ],
)  # fmt: skip
def test_deep_huge_and_binary_requests_are_refused_in_one_line(line: bytes, why: str) -> None:
    with pytest.raises(GateError, match=why):
        parse_request(line)


def test_brackets_inside_strings_are_not_nesting() -> None:
    assert parse_request(json.dumps({**GOOD, "command": ["echo", "[[[[[[[[[[{{{{"]}).encode())


# -- a bounded gate ------------------------------------------------------------------------


@pytest.fixture
def quiet_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The gate's log, every level; no record may carry a traceback or be an error."""
    caplog.set_level(logging.DEBUG, logger="elasticsite.urgent.gate")
    yield caplog
    noisy = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not noisy, [r.getMessage() for r in noisy]


def echo(user: str, req: Any) -> dict[str, Any]:
    return {"ok": True, "user": user}


@contextmanager
def serving(tmp_path: Path, **limits: Any) -> Iterator[Gate]:
    gate = Gate(tmp_path / "urgent.sock", echo, **limits)
    gate.start()
    try:
        yield gate
    finally:
        gate.stop()


def connect(gate: Gate) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(str(gate.path))
    return s


def answer(s: socket.socket) -> dict[str, Any]:
    with s:
        return dict(json.loads(s.makefile("rb").readline()))


def test_no_input_leaves_a_traceback_or_stops_the_gate(
    tmp_path: Path, quiet_log: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    with serving(tmp_path, read_timeout=2.0) as gate:
        for line in (bytes(range(256)), b"[" * 60_000 + b"\n", b'{"cores": "x"}\n',
                     b'{"urgency": "red", "command": [1]}\n', b"\n", b"null\n"):  # fmt: skip
            s = connect(gate)
            s.sendall(line)
            refused = answer(s)
            assert refused["ok"] is False and refused["error"], line[:20]
        s = connect(gate)  # half-closed: a request cut short, then no more to come
        s.sendall(b'{"urgency": "red", "comm')
        s.shutdown(socket.SHUT_WR)
        assert answer(s)["error"] == "the request is not JSON"
        connect(gate).close()  # connects and goes at once: nothing to answer
        s = connect(gate)  # a huge line, sent until the gate hangs up
        pusher = threading.Thread(target=push, args=(s, 10 * 1024 * 1024), daemon=True)
        pusher.start()
        assert "larger than" in answer(s)["error"]
        pusher.join(30)
        assert ask_gate(gate.path, GOOD)["ok"]  # still serving
    assert "Traceback" not in capfd.readouterr().err
    said = [r.getMessage() for r in quiet_log.records]
    assert len([m for m in said if "not JSON" in m]) >= 2 and len(said) >= 9


def push(s: socket.socket, size: int) -> None:
    with contextlib.suppress(OSError):
        s.sendall(b"x" * size)


def test_a_request_must_arrive_in_time_however_it_trickles(
    tmp_path: Path, quiet_log: pytest.LogCaptureFixture
) -> None:
    with serving(tmp_path, read_timeout=1.0) as gate:
        idle = connect(gate)
        assert answer(idle)["error"] == "no complete request within 1 s"
        slow = connect(gate)
        stop = threading.Event()

        def trickle() -> None:  # a byte every 50 ms, for ever: more than the deadline
            with contextlib.suppress(OSError):
                slow.sendall(b"{")
                while not stop.wait(0.05):
                    slow.sendall(b" ")

        threading.Thread(target=trickle, daemon=True).start()
        try:
            assert answer(slow)["error"] == "no complete request within 1 s"
        finally:
            stop.set()


def test_connections_are_capped_in_all_and_per_user(
    tmp_path: Path, quiet_log: pytest.LogCaptureFixture
) -> None:
    with serving(tmp_path, max_connections=2, read_timeout=60) as gate:
        held = [connect(gate), connect(gate)]  # two that send nothing and wait
        busy = answer(connect(gate))
        assert busy == {"ok": False, "error": "the gate is busy (2 connections); try again"}
        held.pop().close()  # one hangs up: its place is free again
        wait_for(lambda: _admitted(gate), 30, "a free place")
        held.pop().close()
    with serving(tmp_path, max_per_user=1, read_timeout=60) as gate:
        held = [connect(gate)]
        mine = answer(connect(gate))
        assert mine["error"] == "too many connections of yours at once (1); finish those first"
        held.pop().close()
        wait_for(lambda: _admitted(gate), 30, "a free place")
    assert any("turned away" in r.getMessage() for r in quiet_log.records)


def _admitted(gate: Gate) -> bool:
    try:
        return bool(ask_gate(gate.path, GOOD, timeout=10)["ok"])
    except GateError as exc:
        assert "busy" in str(exc) or "too many" in str(exc), exc
        return False


# -- whose job it is: a real user through the real gate ----------------------------------

SECRET = "ELASTICSITE_TEST_SITE_SECRET"
PROBE = """
import json, os, sys
def can_read(path):
    try:
        open(path).read() if os.path.isfile(path) else os.listdir(path)
        return "yes"
    except OSError as exc:
        return exc.strerror
print(json.dumps({"uid": os.getuid(), "env": dict(os.environ),
                  "key": can_read(sys.argv[1]), "state": can_read(sys.argv[2])}))
"""


def ask_as(pw: Any, path: Path, request: dict[str, Any]) -> dict[str, Any]:
    """Ask the gate from a process of ``pw``'s: the kernel, not the request, says who."""
    data = json.dumps(request).encode() + b"\n"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls, then out
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(120)
                s.connect(str(path))
                s.sendall(data)
                while chunk := s.recv(65536):
                    os.write(write, chunk)
        except BaseException as exc:
            os.write(write, repr(exc).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        said = f.read()
    os.waitpid(pid, 0)
    try:
        return dict(json.loads(said))
    except ValueError:
        raise AssertionError(f"the gate's answer: {said!r}") from None


@contextmanager
def public_dir() -> Iterator[Path]:
    """A directory every local user can reach (tmp_path is root's alone)."""
    where = Path(tempfile.mkdtemp(prefix="es-gate-"))
    where.chmod(0o755)
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def start_gate(cfg: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "elasticsite", "urgent", "gate", "-c", str(cfg)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_users_job_runs_as_them_and_sees_nothing_of_the_sites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET, "the manager's and the gate's")  # their environment
    with real_users() as (ann,), public_dir() as run, running_site(tmp_path) as (site, server, cfg):
        token, _ = server.store.issue(["lab"], Urgency.RED, 3600, server.clock(), issued_by="ops")
        server.store.add_member(token.id, "ann", {"lab": ann.pw_name}, server.clock(), "manager")
        server.store.activate(token, server.clock(), "manager")
        sock = run / "urgent.sock"
        with cfg.open("a") as f:
            f.write(f'socket = "{sock}"\n')
        key = load_config(cfg).urgent.key_file  # type: ignore[union-attr]
        gate = start_gate(cfg)
        try:
            wait_for(sock.exists, 30, "the gate's socket")
            probe = ["python3", "-c", PROBE, str(key), str(site.state_dir)]
            done = ask_as(ann, sock, {"urgency": "red", "command": probe})
            assert done["ok"] and done["user"] == ann.pw_name, done
            job = done["job_id"]
            wait_for(lambda: site.batch.job(job).state is JobState.DONE, 60, "ann's job")
            assert site.batch.job(job).user == ann.pw_name
            out = Path(ann.pw_dir) / "elasticsite-jobs" / "lab" / job / "stdout"
            seen = json.loads(out.read_text())
            # A job for someone else asked in their name is still theirs: no field says who.
            forged = ask_as(ann, sock, {**GOOD, "user": "root"})
            assert "unknown field(s) user" in forged["error"]
        finally:
            gate.terminate()
            gate.wait(20)
    assert seen["uid"] == ann.pw_uid  # `id -u` of the job: ann, not the gate's root
    assert seen["key"] == "Permission denied" and seen["state"] == "Permission denied"
    assert SECRET not in seen["env"] and seen["env"]["USER"] == ann.pw_name
    assert not any(k.startswith(("ELASTICSITE_USERDATA", "ELASTICSITE_INSTANCE"))
                   for k in seen["env"])  # fmt: skip


def test_a_gate_that_is_not_root_refuses_anyone_elses_job(tmp_path: Path) -> None:
    import elasticsite.cli
    import elasticsite.manager.site  # the child imports nothing: it may not read them

    with real_users() as (svc,), public_dir() as home:
        for path, text in ((home / "lab.key", "esk_unused"),
                           (home / "site.toml", UNPRIVILEGED.format(home=home))):  # fmt: skip
            path.write_text(text)
            path.chmod(0o600)
        for path in (home, home / "lab.key", home / "site.toml"):
            os.chown(path, svc.pw_uid, svc.pw_gid)
        home.chmod(0o700)
        sock = home / "run" / "urgent.sock"
        pid = os.fork()
        if pid == 0:  # the site's gate, run by its own unprivileged account
            try:
                os.setgroups([])
                os.setgid(svc.pw_gid)
                os.setuid(svc.pw_uid)
                elasticsite.cli.app(["urgent", "gate", "-c", str(home / "site.toml")])
            finally:
                os._exit(3)
        try:
            wait_for(sock.exists, 30, "the gate's socket")
            with pytest.raises(GateError, match=(
                    "^submit: cannot submit as root: only root may submit for another user "
                    rf"\(this runs as {svc.pw_name}\)$")):  # fmt: skip
                ask_gate(sock, GOOD)  # root asks svc's gate: no job as svc for root
        finally:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)


UNPRIVILEGED = """\
[manager]
site_id = "lab"
state_dir = "{home}/state"

[[clouds]]
name = "lab"
max_instances = 1

[urgent]
server = "https://127.0.0.1:9"
key_file = "{home}/lab.key"
socket = "{home}/run/urgent.sock"
"""
