"""A real broker: uvicorn with TLS on 127.0.0.1 and a free port, in a background thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from elasticsite.context.client import AdminClient, NodeClient
from elasticsite.context.models import ContextCreated
from elasticsite.context.tls import ensure_certificate
from elasticsite.server import BrokerServer, build_server, create_app

TOKEN = "test-admin-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LiveBroker:
    """A broker served by uvicorn in this process; stop() and start() keep its state."""

    state_dir: Path
    port: int
    history: int = 10_000
    access_log: bool = False
    server: BrokerServer | None = None
    thread: threading.Thread | None = None
    cert: Path = field(init=False)

    def __post_init__(self) -> None:
        self.cert, self.key = ensure_certificate(self.state_dir, ["127.0.0.1"])

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> None:
        app = create_app(self.state_dir, admin_token=TOKEN, history=self.history)
        self.server = build_server(
            app,
            host="127.0.0.1",
            port=self.port,
            certfile=self.cert,
            keyfile=self.key,
            access_log=self.access_log,
            log_level="info" if self.access_log else "warning",
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"broker did not start on port {self.port}")
            time.sleep(0.02)

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


@pytest.fixture
def live_broker(tmp_path: Path) -> Iterator[LiveBroker]:
    broker = LiveBroker(tmp_path / "state", free_port())
    broker.start()
    yield broker
    if broker.server is not None:
        broker.stop()


def node_info(name: str, n: int = 1, **extra: str) -> dict[str, str]:
    """A valid join body for a worker called ``name``."""
    return {
        "short_hostname": name,
        "hostname": f"{name}.cluster.example.org",
        "address": f"10.0.0.{n}",
        "ssh_host_key": f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{n:04d} root@{name}",
        "data": f"slots={n}",
        **extra,
    }
