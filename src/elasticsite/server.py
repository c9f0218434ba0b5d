"""The project's one ASGI application and the uvicorn server that runs it.

It serves the recontextualization broker at ``/`` and, when asked, the deadline
advisor at ``/advisor``; the urgent services at ``/urgent`` and their portals at
``/urgent/portal``.
:func:`build_server` holds the uvicorn settings that let one process keep many
thousands of agents in long polls, and :class:`BrokerServer` accepts connections
through the limits of :mod:`elasticsite.connlimits`, so that clients that never send a
request cannot exhaust the process's sockets.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import uvicorn
from fastapi import FastAPI
from uvicorn.config import STARTUP_FAILURE

from elasticsite import __version__
from elasticsite.connlimits import Acceptor, ConnectionGuard, ConnectionLimits
from elasticsite.context.admission import BrokerLimits
from elasticsite.context.broker import Broker, open_broker
from elasticsite.context.middleware import BodyLimit, UpdatesFastPath
from elasticsite.context.models import MAX_BODY
from elasticsite.context.routes import install
from elasticsite.httpdeadlines import GuardedH11Protocol, GuardedHttpToolsProtocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from elasticsite.advisor.service import Advisor
    from elasticsite.dashboard.routes import Dashboard
    from elasticsite.urgent.routes import UrgentService

__all__ = [
    "OPEN_FILES_MARGIN",
    "BrokerServer",
    "ConnectionLimits",
    "build_server",
    "create_app",
    "raise_open_files_limit",
]

# Files the process holds besides its connections: the database and its journal,
# standard streams and logs, the listening sockets, the event loop's own descriptors.
OPEN_FILES_MARGIN = 64

log = logging.getLogger(__name__)


def create_app(
    state_dir: Path,
    *,
    admin_token: str | None = None,
    public_url: str | None = None,
    history: int = 10_000,
    max_body: int = MAX_BODY,
    limits: BrokerLimits | None = None,
    advisor: Advisor | None = None,
    advisor_token: str | None = None,
    dashboard: Dashboard | None = None,
    urgent: UrgentService | None = None,
    docs: bool = False,
) -> FastAPI:
    """The application: the broker (state in ``state_dir``) at ``/``; with ``advisor``,
    the deadline advisor at ``/advisor``, for bearers of ``advisor_token`` or the
    broker's admin token; with ``dashboard``, the site's dashboard at ``/dashboard``,
    for the admin; with ``urgent``, the urgent-computing services at ``/urgent`` and
    their portals at ``/urgent/portal``.

    The API's description (``/openapi.json``, ``/docs``, ``/redoc``) is served only
    with ``docs``, and then to anyone who reaches the server: it holds no secret, but
    it is a map of every route, not something to hand every stranger by default."""
    app = FastAPI(
        title="elasticsite",
        version=__version__,
        openapi_url="/openapi.json" if docs else None,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
    )
    broker = open_broker(
        state_dir, admin_token=admin_token, public_url=public_url, history=history, limits=limits
    )
    install(app, broker)
    from elasticsite.context import metrics

    metrics.install(app, broker)
    if urgent is not None:
        from elasticsite.urgent import routes as urgent_routes

        urgent_routes.install(app, urgent)
        from elasticsite.urgent import portal as urgent_portal

        urgent_portal.install(app, urgent)
        from elasticsite.urgent.metrics import UrgentCollector

        app.state.metrics_registry.register(UrgentCollector(urgent))
    if dashboard is not None:
        from elasticsite.dashboard import routes as dashboard_routes

        dashboard_routes.install(app, dashboard, broker.auth.is_admin, broker.auth.is_admin_token)
    if advisor is not None:
        from elasticsite.advisor import routes

        if advisor_token is None:
            raise ValueError("the advisor is served only with an advisor token")
        routes.install(app, advisor, advisor_token, admin=broker.auth.is_admin)
    app.add_middleware(BodyLimit, max_body=max_body)
    if urgent is not None:
        from elasticsite.urgent.fastpath import AuthenticateFastPath

        app.add_middleware(AuthenticateFastPath, service=urgent)
    app.add_middleware(UpdatesFastPath, broker=broker)  # outermost: the long polls' hot path
    return app


class BrokerServer(uvicorn.Server):
    """uvicorn, accepting connections through a :class:`ConnectionGuard` and answering
    waiting long polls at once when asked to stop, so a graceful shutdown does not
    wait out every agent's poll.

    ``guard`` counts open, refused and timed-out connections; ``on_started``, when set,
    is called once the socket listens (so what it prints can be used at once).
    """

    def __init__(
        self,
        config: uvicorn.Config,
        broker: Broker | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        super().__init__(config)
        self.broker = broker
        self.limits = limits or ConnectionLimits()
        self.guard = ConnectionGuard(
            self.limits.max_connections, self.limits.max_connections_per_address
        )
        self.acceptor: Acceptor | None = None
        self.on_started: Callable[[], None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up for a host and port, with the listening socket's protocol
        factory replaced by an :class:`Acceptor` (which also does the TLS handshake)."""
        config = self.config
        if sockets is not None or config.fd is not None or config.uds is not None:
            raise RuntimeError("BrokerServer listens on a host and port only")
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            sys.exit(STARTUP_FAILURE)
        protocol_class = config.http_protocol_class
        if not issubclass(protocol_class, GuardedHttpToolsProtocol | GuardedH11Protocol):
            raise TypeError(f"{protocol_class.__name__} does not keep the header deadline")
        loop = asyncio.get_running_loop()
        state, app_state = self.server_state, self.lifespan.state

        def make_protocol() -> GuardedHttpToolsProtocol | GuardedH11Protocol:
            return protocol_class(
                config=config, server_state=state, app_state=app_state, _loop=loop
            )

        self.acceptor = Acceptor(self.guard, self.limits, loop, make_protocol, config.ssl)
        try:
            server = await loop.create_server(
                self.acceptor, host=config.host, port=config.port, backlog=config.backlog
            )
        except OSError as exc:
            logging.getLogger("uvicorn.error").error(exc)
            await self.lifespan.shutdown()
            sys.exit(STARTUP_FAILURE)
        assert server.sockets is not None
        self.servers = [server]
        self._log_started_message(server.sockets)
        self.started = True
        if self.on_started is not None:
            self.on_started()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.acceptor is not None:
            self.acceptor.closing = True
        if self.broker is not None and not self.force_exit:
            self.broker.wake_all()
        await super().shutdown(sockets=sockets)


def raise_open_files_limit(max_connections: int) -> int:
    """Make the open-files soft limit fit ``max_connections`` sockets and the process's
    own files (:data:`OPEN_FILES_MARGIN`); return the connection cap the limit allows.

    The soft limit is raised only as far as that needs, never lowered. When the hard
    limit is too low, the cap returned is lower than asked, and one warning says so.
    """
    needed = max_connections + OPEN_FILES_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # said below, with the cap it leaves
    if soft == resource.RLIM_INFINITY or soft >= needed:
        log.debug("open-files limit %s: room for %d connections", soft, max_connections)
        return max_connections
    allowed = max(1, soft - OPEN_FILES_MARGIN)
    log.warning(
        "the open-files limit is %d (hard limit %s): serving at most %d connections, "
        "not %d; raise the hard limit (ulimit -Hn, LimitNOFILE=) to serve more",
        soft,
        "unlimited" if hard == resource.RLIM_INFINITY else hard,
        allowed,
        max_connections,
    )
    return allowed


def build_server(
    app: FastAPI,
    *,
    host: str = "127.0.0.1",
    port: int = 8443,
    certfile: Path | None = None,
    keyfile: Path | None = None,
    access_log: bool = False,
    log_level: str = "warning",
    connection_limits: ConnectionLimits | None = None,
    http: Literal["httptools", "h11"] = "httptools",
) -> BrokerServer:
    """A uvicorn server for ``app``: HTTPS when a certificate and key are given.

    Every agent holds a connection open, so there is no request-concurrency cap and
    the listen backlog is deep; what bounds the connections is ``connection_limits``
    (header deadline, idle keep-alive, caps overall and per address). ``http`` picks
    uvicorn's HTTP parser (httptools, the fast one; h11 is pure Python).
    """
    limits = connection_limits or ConnectionLimits()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        ssl_certfile=str(certfile) if certfile else None,
        ssl_keyfile=str(keyfile) if keyfile else None,
        http=GuardedHttpToolsProtocol if http == "httptools" else GuardedH11Protocol,
        backlog=16_384,
        limit_concurrency=None,
        timeout_keep_alive=limits.keep_alive,
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
    return BrokerServer(config, broker if isinstance(broker, Broker) else None, limits)
