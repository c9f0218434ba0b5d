"""The broker's server against clients that send their headers and then trickle the
body, and against IPv6 clients that spread over the addresses of their /64.

A real server over real TLS on 127.0.0.1 and ::1 (tests on ::1 are skipped when the
machine has no IPv6 loopback); the /64 test runs a server and its clients in a network
namespace of its own, where the loopback holds documentation addresses. Every wait is
bounded; timings are asserted only against deadlines of about a second.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from tests.ports import free_port

from elasticsite.connlimits import ConnectionLimits, client_key
from elasticsite.context.tls import ensure_certificate
from elasticsite.server import BrokerServer, build_server, create_app

from .conftest import TOKEN, exchange, node_info, serve_in_thread

pytestmark = pytest.mark.slow

Parser = Literal["httptools", "h11"]


def _has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


HOSTS = [
    "127.0.0.1",
    pytest.param(
        "::1",
        marks=pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback (::1)"),
    ),
]


class Served:
    """A broker served by uvicorn in a thread of this process, on ``host``."""

    def __init__(self, state_dir: Path, host: str, http: Parser, limits: ConnectionLimits) -> None:
        self.host = host
        self.port = free_port(host)
        self.cert, key = ensure_certificate(state_dir, [host])
        app = create_app(state_dir, admin_token=TOKEN)
        self.server: BrokerServer = build_server(
            app,
            host=host,
            port=self.port,
            certfile=self.cert,
            keyfile=key,
            connection_limits=limits,
            http=http,
        )
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = serve_in_thread(self.server)

    def stop(self) -> None:
        self.server.should_exit = self.server.force_exit = True
        assert self.thread is not None
        self.thread.join(timeout=20)
        app: Any = self.server.config.app
        app.state.broker.store.close()

    def connect(self) -> ssl.SSLSocket:
        sock = socket.create_connection((self.host, self.port), timeout=5)
        tls = ssl.create_default_context(cafile=str(self.cert))
        return tls.wrap_socket(sock, server_hostname=self.host)

    def wait_open(self, count: int) -> None:
        """Until the server counts ``count`` open connections (at most 5 s)."""
        guard = self.server.guard
        deadline = time.monotonic() + 5
        while guard.open != count:
            assert time.monotonic() < deadline, f"{guard.open} connections open, not {count}"
            time.sleep(0.02)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(host: str, http: Parser = "httptools", **limits: Any) -> Served:
        served = Served(tmp_path / f"state{len(started)}", host, http, ConnectionLimits(**limits))
        served.start()
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()


def post_head(length: int) -> bytes:
    return (
        b"POST /ctx/abc/nodes HTTP/1.1\r\nHost: broker\r\nContent-Type: application/json\r\n"
        b"Authorization: Basic YTpi\r\nContent-Length: %d\r\n\r\n" % length
    )


def trickle(sock: ssl.SSLSocket, every: float = 0.25, limit: float = 8.0) -> tuple[float, bytes]:
    """Send one body byte every ``every`` seconds until the server answers or closes;
    then read to the end. Seconds from the first call until the server's answer or
    close, and what it sent (``limit`` seconds at most)."""
    t0 = time.monotonic()
    answer = b""
    while time.monotonic() - t0 < limit:
        try:
            sock.sendall(b" ")
            sock.settimeout(every)
            chunk = sock.recv(4096)
        except TimeoutError:
            continue
        except OSError:  # reset: the server closed with our bytes unread
            return time.monotonic() - t0, answer
        cut = time.monotonic() - t0
        answer += chunk
        sock.settimeout(5)
        try:
            while chunk:
                chunk = sock.recv(4096)
                answer += chunk
        except OSError:
            pass
        return cut, answer
    raise AssertionError(f"the server kept a trickling body for {limit} s")


HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: broker\r\n\r\n"


def refused(served: Served) -> bool:
    """Whether a new connection is refused at once (its TLS handshake meets a closed
    connection; an admitted one completes it)."""
    try:
        served.connect().close()
    except OSError:
        return True
    return False


@pytest.mark.parametrize("parser", ["httptools", "h11"])
@pytest.mark.parametrize("host", HOSTS)
def test_a_trickled_body_is_cut_at_the_body_deadline_and_its_place_freed(
    serve: Callable[..., Served], host: str, parser: Parser
) -> None:
    """Headers at once, then a byte every 0.25 s of a 200-byte body: the bytes keep
    coming, yet the connection is cut about 1 s (the body timeout) after the headers,
    with a 408 if the client still reads it; its place under the per-address cap of
    one is then free for the next client."""
    served = serve(host, parser, header_timeout=5.0, body_timeout=1.0, keep_alive=30,
                   max_connections_per_address=1)  # fmt: skip
    with served.connect() as slow:
        slow.sendall(post_head(200))
        served.wait_open(1)
        assert refused(served), "the one place is taken"
        cut, answer = trickle(slow)
    assert 0.8 <= cut <= 4.0, f"cut after {cut:.2f} s"
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408 "), answer[:80]
    served.wait_open(0)
    guard = served.server.guard
    assert guard.body_timeouts == 1 and guard.header_timeouts == 0
    with served.connect() as next_client:
        assert exchange(next_client, HEALTHZ) == 200


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_a_body_sent_in_pieces_within_the_deadline_is_served(
    serve: Callable[..., Served], parser: Parser
) -> None:
    """A body in three pieces well within the deadline gets its answer (401: the
    credentials are made up), and the deadline does not outlive it: the connection,
    idle longer than the body timeout, serves the next request."""
    served = serve("127.0.0.1", parser, header_timeout=5.0, body_timeout=1.5, keep_alive=30)
    body = json.dumps(node_info("w1")).encode()
    with served.connect() as sock:
        sock.sendall(post_head(len(body)) + body[:5])
        time.sleep(0.2)
        sock.sendall(body[5:10])
        time.sleep(0.2)
        assert exchange(sock, body[10:]) == 401
        time.sleep(2.0)  # idle past the body timeout: nothing is pending
        assert exchange(sock, HEALTHZ) == 200
    assert served.server.guard.body_timeouts == 0


@pytest.mark.parametrize("host", HOSTS)
def test_the_per_address_cap_holds_on_both_address_families(
    serve: Callable[..., Served], host: str
) -> None:
    served = serve(host, header_timeout=5.0, max_connections_per_address=2)
    first, second = served.connect(), served.connect()
    try:
        assert exchange(first, HEALTHZ) == 200 and exchange(second, HEALTHZ) == 200
        assert refused(served)
        assert served.server.guard.refused == 1
    finally:
        first.close()
        second.close()
    served.wait_open(0)


# --- per /64 ---------------------------------------------------------------------------


def test_client_key_counts_ipv6_per_64_and_mapped_ipv4_as_ipv4() -> None:
    assert client_key("192.0.2.7") == "192.0.2.7"
    assert client_key("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:2:ffff:ffff:ffff:ffff") == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::1") == "2001:db8:1:3::/64"
    assert client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert client_key("fe80::1%eth0") == "fe80::/64"
    assert client_key("::1") == "::/64"
    assert client_key("unknown") == "unknown"


# Runs in a network namespace of its own: the loopback holds three documentation
# addresses, two in one /64; the server's per-address cap is 2.
_NAMESPACE_SCRIPT = textwrap.dedent(
    """
    import json, socket, ssl, subprocess, sys, tempfile, threading, time
    from pathlib import Path
    from elasticsite.connlimits import ConnectionLimits
    from elasticsite.context.tls import ensure_certificate
    from elasticsite.server import build_server, create_app

    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for a in ("2001:db8:1::1", "2001:db8:1::2", "2001:db8:1::3", "2001:db8:2::1"):
        subprocess.run(["ip", "-6", "addr", "add", a + "/128", "dev", "lo", "nodad"], check=True)
    state = Path(tempfile.mkdtemp())
    cert, key = ensure_certificate(state, ["2001:db8:1::1"])
    app = create_app(state, admin_token="t" * 32)
    server = build_server(app, host="2001:db8:1::1", port=8443, certfile=cert, keyfile=key,
        connection_limits=ConnectionLimits(header_timeout=5, max_connections_per_address=2))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    tls = ssl.create_default_context(cafile=str(cert))

    def connect(source):
        raw = socket.create_connection(
            ("2001:db8:1::1", 8443), timeout=5, source_address=(source, 0)
        )
        try:
            conn = tls.wrap_socket(raw, server_hostname="2001:db8:1::1")
            conn.sendall(b"GET /healthz HTTP/1.1\\r\\nHost: b\\r\\n\\r\\n")
            return conn if conn.recv(12).startswith(b"HTTP/1.1 200") else None
        except OSError:
            raw.close()
            return None

    held = [connect("2001:db8:1::2"), connect("2001:db8:1::3")]
    third = connect("2001:db8:1::1")
    other = connect("2001:db8:2::1")
    print(json.dumps({"held": [c is not None for c in held], "third": third is not None,
        "other": other is not None, "counts": server.guard.by_address}))
    server.should_exit = server.force_exit = True
    """
)


def test_ipv6_clients_are_counted_per_64(tmp_path: Path) -> None:
    """Two addresses of one /64 fill its cap of 2; a third address of the same /64 is
    refused, an address of another /64 is not."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare and ip to make a network namespace")
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip("cannot make a network namespace here (needs root)")
    script = tmp_path / "per64.py"
    script.write_text(_NAMESPACE_SCRIPT)
    done = subprocess.run(
        ["unshare", "--net", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["held"] == [True, True]
    assert result["third"] is False, "a third address of the same /64 was let in"
    assert result["other"] is True, "an address of another /64 was refused"
    assert result["counts"] == {"2001:db8:1::/64": 2, "2001:db8:2::/64": 1}
