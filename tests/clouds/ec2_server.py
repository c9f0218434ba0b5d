"""A real EC2 API on 127.0.0.1 for tests: moto's server in its own process, and a proxy
in front of it that answers chosen actions with EC2's own error responses.

The errors are what EC2 returns (HTTP status, ``<Response><Errors><Error><Code>``
XML, as in the EC2 API reference's "Error codes" page); everything else is forwarded
to moto unchanged.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.ports import free_port

ERROR_STATUS = {
    "InsufficientInstanceCapacity": 500,
    "InternalError": 500,
    "RequestLimitExceeded": 503,
    "InstanceLimitExceeded": 400,
    "VcpuLimitExceeded": 400,
    "InvalidAMIID.NotFound": 400,
    "AuthFailure": 401,
    "UnauthorizedOperation": 403,
}


_ANSWER = threading.Event()
_ANSWER.set()
_MOTO_NAMESPACE = b'xmlns="http://ec2.amazonaws.com/doc/2016-11-15"'
_EC2_NAMESPACE = b'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"'


@contextmanager
def moto_server() -> Iterator[str]:
    """moto's EC2 server in a child process; yields its endpoint URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "MOTO_EC2_LOAD_DEFAULT_AMIS": "true"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # a bound on a hang, not a measurement
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(60)  # a bound on a hang: a busy machine may take its time
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def credentials_file(directory: Path) -> Path:
    """A shared-credentials file with moto's test keys (0600, as a real one should be)."""
    path = directory / "aws-credentials"
    path.write_text("[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    path.chmod(0o600)
    return path


class FaultyEc2:
    """A proxy to ``upstream`` answering ``Action=X`` with EC2 error ``code``, for the next
    ``times`` calls (``None``: every call) set with :meth:`fail`."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.faults: dict[str, tuple[str, int | None, str]] = {}
        self.delays: dict[str, float] = {}
        self.held: dict[str, threading.Event] = {}
        self.seen: list[str] = []
        self.forms: list[str] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.forward("POST", body, body.decode())

            def do_GET(self) -> None:  # libcloud's EC2 driver asks by GET
                self.forward("GET", None, urllib.parse.urlsplit(self.path).query)

            def forward(self, method: str, body: bytes | None, form: str) -> None:
                action = urllib.parse.parse_qs(form).get("Action", [""])[0]
                fault = proxy.take(action, form)
                if fault is not None:
                    self.reply(ERROR_STATUS.get(fault, 400), error_xml(fault))
                    return
                conn = http.client.HTTPConnection(
                    proxy.upstream.hostname or "127.0.0.1", proxy.upstream.port, timeout=30
                )
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request(method, self.path, body, headers)
                answer = conn.getresponse()
                # EC2 names its namespace with a trailing slash (moto leaves it out),
                # which libcloud's EC2 driver matches exactly
                data = answer.read().replace(_MOTO_NAMESPACE, _EC2_NAMESPACE)
                time.sleep(proxy.delays.get(action, 0.0))  # done upstream, answer held back
                proxy.held.get(action, _ANSWER).wait()  # a cloud that does not answer
                self.reply(answer.status, data, answer.getheader("Content-Type"))
                conn.close()

            def reply(self, status: int, data: bytes, kind: str | None = "text/xml") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind or "text/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def fail(self, action: str, code: str, times: int | None = None, matching: str = "") -> None:
        """Answer ``action`` with ``code`` (only requests whose form contains ``matching``,
        e.g. ``InstanceType=t3.micro``)."""
        with self.lock:
            self.faults[action] = (code, times, matching)

    def delay(self, action: str, seconds: float) -> None:
        """Hold back the answer to ``action`` for ``seconds`` after EC2 carried it out
        (0: no more), as a slow API or a lost connection would."""
        with self.lock:
            self.delays[action] = seconds

    def hold(self, action: str) -> None:
        """Give no answer to ``action`` until :meth:`release` (as a hung API would)."""
        with self.lock:
            self.held.setdefault(action, threading.Event())

    def release(self) -> None:
        """Answer every request held back, and hold none from now on."""
        with self.lock:
            held, self.held = self.held, {}
        for event in held.values():
            event.set()

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()
            self.delays.clear()
        self.release()

    def take(self, action: str, form: str = "") -> str | None:
        with self.lock:
            self.seen.append(action)
            self.forms.append(form)
            fault = self.faults.get(action)
            if fault is None:
                return None
            code, times, matching = fault
            if matching and matching not in form:
                return None
            if times is not None:
                if times <= 1:
                    del self.faults[action]
                else:
                    self.faults[action] = (code, times - 1, matching)
            return code

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


def error_xml(code: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{code}</Code><Message>{code} (injected by the "
        "test proxy)</Message></Error></Errors><RequestID>"
        "7a62c49f-347e-4fc4-9331-6e8eEXAMPLE</RequestID></Response>"
    ).encode()
