"""A real broker: uvicorn with TLS on 127.0.0.1 and a free port, in a background thread."""

from __future__ import annotations

import hashlib
import json
import os
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from tests.ports import free_port

from elasticsite.connlimits import ConnectionLimits
from elasticsite.context.admission import BrokerLimits
from elasticsite.context.agent import Agent, AgentSettings
from elasticsite.context.client import AdminClient, NodeClient
from elasticsite.context.models import ContextCreated, ContextPolicy
from elasticsite.context.tls import ensure_certificate
from elasticsite.server import BrokerServer, build_server, create_app

TOKEN = "test-admin-token-0123456789abcdef"


def serve_in_thread(server: BrokerServer) -> threading.Thread:
    """Run ``server`` on a daemon thread of its own, returned once the server listens
    (within 20 s, or the test fails)."""
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start on port {server.config.port}")
        time.sleep(0.02)
    return thread


@dataclass
class LiveBroker:
    """A broker served by uvicorn in this process; stop() and start() keep its state."""

    state_dir: Path
    port: int
    history: int = 10_000
    limits: BrokerLimits | None = None
    access_log: bool = False
    connection_limits: ConnectionLimits | None = None
    http: Literal["httptools", "h11"] = "httptools"
    server: BrokerServer | None = None
    thread: threading.Thread | None = None
    cert: Path = field(init=False)

    def __post_init__(self) -> None:
        self.cert, self.key = ensure_certificate(self.state_dir, ["127.0.0.1"])

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        app = create_app(
            self.state_dir, admin_token=TOKEN, history=self.history, limits=self.limits
        )
        self.server = build_server(
            app,
            host="127.0.0.1",
            port=self.port,
            certfile=self.cert,
            keyfile=self.key,
            access_log=self.access_log,
            log_level="info" if self.access_log else "warning",
            connection_limits=self.connection_limits,
            http=self.http,
        )
        self.thread = serve_in_thread(self.server)

    def stop(self, *, force: bool = True) -> None:
        """Stop serving; ``force`` drops open connections like a crash would."""
        assert self.server is not None and self.thread is not None
        self.server.should_exit = True
        self.server.force_exit = force
        self.thread.join(timeout=20)
        assert not self.thread.is_alive(), "broker thread did not stop"
        app: Any = self.server.config.app
        app.state.broker.store.close()
        self.server = self.thread = None

    def admin(self) -> AdminClient:
        return AdminClient(self.url, TOKEN, ca=self.cert)

    def node(self, ctx: ContextCreated) -> NodeClient:
        return NodeClient(ctx.uri, ctx.key, ctx.secret, ca=self.cert)


def running_broker(state_dir: Path) -> Iterator[LiveBroker]:
    """A fixture's body: a broker keeping its state in ``state_dir``, started, then
    stopped at teardown unless the test stopped it."""
    broker = LiveBroker(state_dir, free_port())
    broker.start()
    yield broker
    if broker.server is not None:
        broker.stop()


@pytest.fixture
def live_broker(tmp_path: Path) -> Iterator[LiveBroker]:
    yield from running_broker(tmp_path / "state")


def one_member(broker: LiveBroker) -> tuple[ContextCreated, NodeClient]:
    """A new context on ``broker``, and the client of its one member, w1, joined."""
    with broker.admin() as admin:
        ctx = admin.create()
    node = broker.node(ctx)
    node.join(node_info("w1", 1))
    return ctx, node


def create_context(broker: LiveBroker, **policy: object) -> ContextCreated:
    """A new context on ``broker`` whose policy sets ``policy`` (the rest as default)."""
    with broker.admin() as admin:
        return admin.create("cluster", ContextPolicy.model_validate(policy))


def member_names(broker: LiveBroker, ctx: ContextCreated) -> list[tuple[str, str]]:
    """Each member of ``ctx`` as its administrator sees it: (hostname, address)."""
    with broker.admin() as admin:
        return [(m.hostname, m.address) for m in admin.members(ctx.id).members]


def write_userdata(path: Path, broker: LiveBroker, ctx: ContextCreated) -> Path:
    """Write at ``path`` the user data a cloud instance is given to join ``ctx``."""
    path.write_text(
        json.dumps(
            {
                "context_uri": ctx.uri,
                "context_key": ctx.key,
                "context_secret": ctx.secret,
                "context_ca": broker.cert.read_text(),
            }
        )
    )
    return path


def run_agent_once(settings: AgentSettings) -> Agent:
    """Run the agent of ``settings`` through one pass against its broker; it must succeed."""
    c = settings.context
    with NodeClient(c.uri, c.key, c.secret, ca=c.ca_pem) as link:
        agent = Agent(settings, link)
        assert agent.run() == 0
    return agent


def exchange(sock: ssl.SSLSocket, request: bytes) -> int:
    """Send one raw ``request`` and read its whole answer; its status."""
    sock.settimeout(5)
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, "the server closed the connection"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(4096)
    return int(head.split()[1])


def raw(broker: LiveBroker) -> httpx.Client:
    """A plain HTTPS client of ``broker``: requests exactly as a test writes them."""
    return httpx.Client(
        base_url=broker.url, verify=ssl.create_default_context(cafile=str(broker.cert)), timeout=10
    )


def ssh_key(seed: str, comment: str = "") -> str:
    """A real SSH ed25519 public key line, the same for the same seed."""
    private = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(seed.encode()).digest())
    line = private.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
    return f"{line} {comment}" if comment else line


def node_info(name: str, n: int = 1, **extra: str) -> dict[str, str]:
    """A valid join body for a worker called ``name``."""
    return {
        "short_hostname": name,
        "hostname": f"{name}.cluster.example.org",
        "address": f"10.0.0.{n}",
        "ssh_host_key": ssh_key(f"{name}-{n}", f"root@{name}"),
        "data": f"slots={n}",
        **extra,
    }


@dataclass
class BrokerProcess:
    """``elasticsite broker`` as a real subprocess on a free port."""

    state_dir: Path
    port: int
    proc: subprocess.Popen[str] | None = None
    extra: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def cert(self) -> Path:
        return self.state_dir / "broker.crt"

    @property
    def token_file(self) -> Path:
        return self.state_dir / "admin.token"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "elasticsite",
                "broker",
                "--state-dir",
                str(self.state_dir),
                "--port",
                str(self.port),
                *self.extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "COLUMNS": "200", "ELASTICSITE_BROKER_TOKEN": ""},
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited: {self.proc.stderr.read() if self.proc.stderr else ''}"
                )
            if self.cert.exists():
                try:
                    r = httpx.get(
                        f"{self.url}/healthz",
                        verify=ssl.create_default_context(cafile=str(self.cert)),
                        timeout=1,
                    )
                    if r.status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError("broker did not answer within 30 s")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed on the way out."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)

    def terminate(self) -> tuple[str, str]:
        assert self.proc is not None
        self.proc.terminate()
        out, err = self.proc.communicate(timeout=20)
        return out, err

    def admin(self) -> AdminClient:
        return AdminClient(self.url, self.token_file.read_text().strip(), ca=self.cert)

    def node(self, ctx: ContextCreated) -> NodeClient:
        return NodeClient(ctx.uri, ctx.key, ctx.secret, ca=self.cert)


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "state", free_port())
    broker.start()
    yield broker
    if broker.proc is not None and broker.proc.poll() is None:
        broker.kill()
