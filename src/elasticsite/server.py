"""The project's one ASGI application and the uvicorn server that runs it.

Today it serves the recontextualization broker at ``/``; the urgent-computing
portals will be mounted here too. :func:`build_server` holds the uvicorn settings
that let one process keep many thousands of agents in long polls.
"""

from __future__ import annotations

import logging
import resource
import socket
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from elasticsite import __version__
from elasticsite.context.broker import BodyLimit, Broker, UpdatesFastPath, install, open_broker
from elasticsite.context.models import MAX_BODY

__all__ = [
    "BrokerServer",
    "build_server",
    "create_app",
    "raise_open_files_limit",
]

log = logging.getLogger(__name__)


def create_app(
    state_dir: Path,
    *,
    admin_token: str | None = None,
    public_url: str | None = None,
    history: int = 10_000,
    max_body: int = MAX_BODY,
) -> FastAPI:
    """The application: the broker (state in ``state_dir``) at ``/``."""
    app = FastAPI(title="elasticsite", version=__version__)
    broker = open_broker(state_dir, admin_token=admin_token, public_url=public_url, history=history)
    install(app, broker)
    app.add_middleware(BodyLimit, max_body=max_body)
    app.add_middleware(UpdatesFastPath, broker=broker)  # outermost: the long polls' hot path
    return app


class BrokerServer(uvicorn.Server):
    """uvicorn, but answering waiting long polls at once when asked to stop, so a
    graceful shutdown does not wait out every agent's poll."""

    def __init__(self, config: uvicorn.Config, broker: Broker | None = None) -> None:
        super().__init__(config)
        self.broker = broker

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.broker is not None and not self.force_exit:
            self.broker.wake_all()
        await super().shutdown(sockets=sockets)


def raise_open_files_limit() -> int:
    """Raise the soft limit on open files to the hard limit (one socket per agent)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            log.warning("could not raise the open-files limit above %d", soft)
    return soft


def build_server(
    app: FastAPI,
    *,
    host: str = "127.0.0.1",
    port: int = 8443,
    certfile: Path | None = None,
    keyfile: Path | None = None,
    access_log: bool = False,
    log_level: str = "warning",
) -> BrokerServer:
    """A uvicorn server for ``app``: HTTPS when a certificate and key are given.

    Keep-alive outlives the longest long poll, there is no concurrency cap and the
    listen backlog is deep, because every agent holds a connection open.
    """
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        ssl_certfile=str(certfile) if certfile else None,
        ssl_keyfile=str(keyfile) if keyfile else None,
        backlog=16_384,
        limit_concurrency=None,
        timeout_keep_alive=75,
        timeout_graceful_shutdown=5,
        access_log=access_log,
        log_config=None,  # the caller's logging set-up applies (one format, no secrets)
        log_level=log_level,
        lifespan="off",
        ws="none",
        server_header=False,
        proxy_headers=False,
    )
    broker = getattr(app.state, "broker", None)
    return BrokerServer(config, broker if isinstance(broker, Broker) else None)
