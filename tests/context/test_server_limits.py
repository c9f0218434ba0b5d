"""The broker's server against clients that hold connections without sending requests:
the header deadline, idle keep-alive, the connection caps and the open-files limit.

Every test talks to a real server on 127.0.0.1 over real TLS, with a 1 s header
timeout where timing matters; every wait is bounded.
"""

from __future__ import annotations

import http.client
import logging
import os
import resource
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from tests.cli import run_command

from elasticsite.connlimits import ConnectionLimits
from elasticsite.server import OPEN_FILES_MARGIN

from .conftest import LiveBroker, exchange, free_port, node_info

pytestmark = pytest.mark.slow

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
Parser = Literal["httptools", "h11"]


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., LiveBroker]]:
    """Start a broker with the given connection limits (and HTTP parser)."""
    started: list[LiveBroker] = []

    def start(http: Parser = "httptools", **limits: Any) -> LiveBroker:
        broker = LiveBroker(
            tmp_path / f"state{len(started)}",
            free_port(),
            connection_limits=ConnectionLimits(**limits),
            http=http,
        )
        broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        if broker.server is not None:
            broker.stop()


def tls(broker: LiveBroker) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(broker.cert))


def open_tls(broker: LiveBroker) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    return tls(broker).wrap_socket(sock, server_hostname="127.0.0.1")


def closed_within(sock: socket.socket, limit: float, since: float) -> float | None:
    """Seconds from ``since`` until the server closed ``sock``; None if it was still open
    ``limit`` seconds after ``since``."""
    while (remaining := since + limit - time.monotonic()) > 0:
        sock.settimeout(remaining)
        try:
            if not sock.recv(4096):
                break
        except TimeoutError:
            return None
        except OSError:  # reset, or TLS cut without its goodbye
            break
    else:
        return None
    return time.monotonic() - since


def dribble(sock: socket.socket, since: float, limit: float = 6.0) -> float | None:
    """Send the start of a request one byte every 0.5 s (never its end); seconds from
    ``since`` until the server closed the connection, None if it never did."""
    for byte in REQUEST[:-2]:
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return time.monotonic() - since
        closed = closed_within(sock, min(limit, time.monotonic() - since + 0.5), since)
        if closed is not None:
            return closed
        if time.monotonic() - since > limit:
            return None
    return None


def counter_reaches(read: Callable[[], int], value: int, within: float = 2.0) -> int:
    """A server counter once it reaches ``value`` (or its value after ``within`` s): the
    server may close a connection a moment before it counts why."""
    deadline = time.monotonic() + within
    while read() < value and time.monotonic() < deadline:
        time.sleep(0.01)
    return read()


# --- the header deadline --------------------------------------------------------------


@pytest.mark.parametrize(
    ("parser", "starts_tls", "counter"),
    [
        ("httptools", False, "handshake_failures"),
        ("httptools", True, "header_timeouts"),
        ("h11", True, "header_timeouts"),
    ],
    ids=["tcp-without-tls", "silent-tls-httptools", "silent-tls-h11"],
)
def test_a_silent_client_is_cut_at_the_header_timeout(
    start_broker: Callable[..., LiveBroker], parser: Parser, starts_tls: bool, counter: str
) -> None:
    """A client that never starts TLS (the handshake counts against the header timeout,
    not asyncio's 60 s) and one that starts it, then sends nothing, are both cut."""
    broker = start_broker(parser, header_timeout=1.0)
    t0 = time.monotonic()
    if starts_tls:
        sock: socket.socket = open_tls(broker)
    else:
        sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    with sock:
        closed = closed_within(sock, 5, t0)
    assert closed is not None, "a client that sent nothing was kept"
    assert 0.8 <= closed <= 2.5
    # A failed handshake is counted by a callback the loop runs after the close.
    assert broker.server is not None
    guard = broker.server.guard
    assert counter_reaches(lambda: getattr(guard, counter), 1) == 1


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_dribbling_headers_does_not_move_the_deadline(
    start_broker: Callable[..., LiveBroker], parser: Parser
) -> None:
    """One header byte every 0.5 s, header timeout 1 s: cut about 1 s after connecting,
    whatever the bytes (a timer reset by each byte would never fire)."""
    broker = start_broker(parser, header_timeout=1.0)
    t0 = time.monotonic()
    with open_tls(broker) as sock:
        closed = dribble(sock, t0)
    assert closed is not None, "a client dribbling its headers was kept"
    assert 0.8 <= closed <= 2.5


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_each_request_on_a_kept_alive_connection_has_its_own_deadline(
    start_broker: Callable[..., LiveBroker], parser: Parser
) -> None:
    """Idle between requests is not cut by the header timeout; a second request's
    headers have the header timeout from their first byte."""
    broker = start_broker(parser, header_timeout=1.0)
    with open_tls(broker) as sock:
        assert exchange(sock, REQUEST) == 200
        time.sleep(1.5)  # idle longer than the header timeout
        assert exchange(sock, REQUEST) == 200
        t1 = time.monotonic()
        closed = dribble(sock, t1)
    assert closed is not None, "a second request dribbling its headers was kept"
    assert 0.8 <= closed <= 2.5


def test_idle_connections_are_closed_after_keep_alive(
    start_broker: Callable[..., LiveBroker],
) -> None:
    broker = start_broker(header_timeout=1.0, keep_alive=3)
    with open_tls(broker) as sock:
        assert exchange(sock, REQUEST) == 200
        t0 = time.monotonic()
        closed = closed_within(sock, 6, t0)
    assert closed is not None and 2.5 <= closed <= 4.5


def test_long_poll_outlasts_the_header_and_body_timeouts(
    start_broker: Callable[..., LiveBroker],
) -> None:
    """Once a request's headers are in, the header deadline is gone, and a request
    without a body starts no body deadline: a 3 s long poll, and a second one on the
    same kept-alive connection, get their 200 answers."""
    broker = start_broker(header_timeout=1.0, body_timeout=1.0)
    with broker.admin() as admin:
        ctx = admin.create("polls")
    node = broker.node(ctx)
    joined = node.join(node_info("w1", 1))
    for wait in (3, 2):
        t0 = time.monotonic()
        answer = node.updates(since=joined.entry_id, wait=wait)
        assert answer.entries == [] and answer.last_id == joined.entry_id
        assert time.monotonic() - t0 >= wait - 0.5
    assert broker.server is not None
    assert (broker.server.guard.header_timeouts, broker.server.guard.body_timeouts) == (0, 0)


# --- the connection caps --------------------------------------------------------------


def connect(broker: LiveBroker) -> http.client.HTTPSConnection:
    """A kept-alive HTTPS connection that has had one answer (so it is surely open)."""
    conn = http.client.HTTPSConnection("127.0.0.1", broker.port, context=tls(broker), timeout=5)
    conn.request("GET", "/healthz")
    response = conn.getresponse()
    response.read()
    assert response.status == 200
    return conn


HEADER_TIMEOUT = 60.0
"""Of the brokers whose caps are tested: far longer than a refusal takes on the slowest
machine, so "refused at once" and "cut at the header timeout" cannot be confused."""


def assert_refused_at_once(broker: LiveBroker) -> None:
    conn = http.client.HTTPSConnection("127.0.0.1", broker.port, context=tls(broker), timeout=5)
    t0 = time.monotonic()
    with pytest.raises(OSError):  # the TLS handshake meets a closed connection
        conn.connect()
    conn.close()
    assert time.monotonic() - t0 < 30.0  # not the 60 s header timeout (HEADER_TIMEOUT)


def still_answers(conn: http.client.HTTPSConnection) -> bool:
    conn.request("GET", "/healthz")
    response = conn.getresponse()
    response.read()
    return response.status == 200


def wait_until_open(broker: LiveBroker, count: int) -> None:
    assert broker.server is not None
    deadline = time.monotonic() + 5
    while broker.server.guard.open != count:
        assert time.monotonic() < deadline, f"{broker.server.guard.open} open, not {count}"
        time.sleep(0.02)


@pytest.mark.parametrize(
    "limits",
    [
        {"max_connections_per_address": 3, "max_connections": 100},
        {"max_connections_per_address": 0, "max_connections": 3},
    ],
    ids=["per-address", "total"],
)
def test_connections_over_a_cap_are_refused_at_once(
    start_broker: Callable[..., LiveBroker],
    limits: dict[str, int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="elasticsite.connlimits")
    broker = start_broker(header_timeout=HEADER_TIMEOUT, **limits)
    assert broker.server is not None
    conns = [connect(broker) for _ in range(3)]
    try:
        for _ in range(3):
            assert_refused_at_once(broker)
        assert broker.server.guard.refused == 3
        refusals = [r for r in caplog.records if "refused a connection" in r.getMessage()]
        assert len(refusals) == 1, "refusals are logged at most once a minute"
        assert "127.0.0.1" in refusals[0].getMessage()
        assert all(still_answers(c) for c in conns)

        for c in conns[:2]:
            c.close()
        wait_until_open(broker, 1)
        conns[:2] = [connect(broker), connect(broker)]
        assert all(still_answers(c) for c in conns)
        assert_refused_at_once(broker)
    finally:
        for c in conns:
            c.close()
    wait_until_open(broker, 0)


def test_handshakes_count_against_the_caps(start_broker: Callable[..., LiveBroker]) -> None:
    """A connection that has not finished (or begun) its TLS handshake holds its place."""
    broker = start_broker(header_timeout=HEADER_TIMEOUT, max_connections_per_address=2)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as silent:
        wait_until_open(broker, 1)
        conn = connect(broker)
        assert_refused_at_once(broker)
        silent.close()
        wait_until_open(broker, 1)
        second = connect(broker)
        assert still_answers(conn) and still_answers(second)
        conn.close()
        second.close()


# --- the open-files limit -------------------------------------------------------------

_, HARD = resource.getrlimit(resource.RLIMIT_NOFILE)
needs_room = pytest.mark.skipif(
    HARD != resource.RLIM_INFINITY and HARD < 2_000, reason="the hard open-files limit is too low"
)


def with_nofile(soft: int, hard: int, code: str) -> list[str]:
    """A Python command that sets its open-files limits, then runs ``code``."""
    hard_value = "resource.RLIM_INFINITY" if hard == resource.RLIM_INFINITY else str(hard)
    return [
        sys.executable,
        "-c",
        f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard_value}))\n"
        + code,
    ]


def raise_in_child(soft: int, hard: int, cap: int) -> tuple[int, int, int, str]:
    """raise_open_files_limit(cap) in a child with these limits: (returned cap, soft,
    hard, stderr)."""
    code = (
        "from elasticsite.server import raise_open_files_limit\n"
        f"allowed = raise_open_files_limit({cap})\n"
        "print(allowed, *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    done = subprocess.run(
        with_nofile(soft, hard, code), capture_output=True, text=True, timeout=60, check=True
    )
    allowed, new_soft, new_hard = (int(x) for x in done.stdout.split())
    return allowed, new_soft, new_hard, done.stderr


@needs_room
def test_open_files_limit_is_raised_as_far_as_the_cap_needs() -> None:
    allowed, soft, hard, stderr = raise_in_child(256, HARD, 1_000)
    assert (allowed, soft, hard) == (1_000, 1_000 + OPEN_FILES_MARGIN, HARD)
    assert "open-files" not in stderr
    allowed, soft, _, _ = raise_in_child(1_900, HARD, 1_000)  # already enough: left alone
    assert (allowed, soft) == (1_000, 1_900)


def test_a_low_hard_limit_lowers_the_cap_with_one_warning() -> None:
    allowed, soft, hard, stderr = raise_in_child(256, 600, 1_000)
    assert (allowed, soft, hard) == (600 - OPEN_FILES_MARGIN, 600, 600)
    warnings = [line for line in stderr.splitlines() if "open-files limit" in line]
    assert len(warnings) == 1
    assert f"serving at most {600 - OPEN_FILES_MARGIN} connections, not 1000" in warnings[0]


@needs_room
def test_broker_command_sets_the_open_files_limit_its_cap_needs(tmp_path: Path) -> None:
    port = free_port()
    state = tmp_path / "state"
    args = ["broker", "--state-dir", str(state), "--port", str(port), "--max-connections", "300"]
    code = f"import runpy, sys\nsys.argv = ['elasticsite', *{args!r}]\n" + (
        "runpy.run_module('elasticsite', run_name='__main__', alter_sys=True)\n"
    )
    proc = subprocess.Popen(
        with_nofile(256, HARD, code),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200", "ELASTICSITE_BROKER_TOKEN": ""},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the broker did not answer within 30 s"
            if (state / "broker.crt").exists():
                verify = ssl.create_default_context(cafile=str(state / "broker.crt"))
                try:
                    if httpx.get(f"https://127.0.0.1:{port}/healthz", verify=verify).is_success:
                        break
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        soft, hard = resource.prlimit(proc.pid, resource.RLIMIT_NOFILE)
        assert (soft, hard) == (300 + OPEN_FILES_MARGIN, HARD)
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


# --- the command line -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--header-timeout", "-1", "Input should be greater than 0"),
        ("--body-timeout", "inf", "Input should be a finite number"),
        ("--keep-alive", "0", "Input should be greater than or equal to 1"),
        ("--max-connections", "0", "Input should be greater than or equal to 1"),
        ("--max-connections-per-address", "-5", "Input should be greater than or equal to 0"),
    ],
)
def test_broker_refuses_nonsense_limits(
    tmp_path: Path, option: str, value: str, message: str
) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "COLUMNS": "200", "ELASTICSITE_BROKER_TOKEN": ""}
    done = run_command("broker", "--state-dir", str(state), option, value, env=env, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: Invalid value for '{option}': {message} (see elasticsite broker --help)"
    ]
    assert done.stdout == ""
    assert not state.exists(), "nothing is created before the options are checked"
