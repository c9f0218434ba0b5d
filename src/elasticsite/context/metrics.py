"""The server's Prometheus metrics at ``GET /metrics``, for the broker's admin token.

Computed when scraped from the broker's own state (nothing is counted on the request
path): ``elasticsite_broker_contexts``, ``elasticsite_broker_members`` (per context's
total, summed), ``elasticsite_broker_waiting_polls`` (long polls held open now) and
``elasticsite_broker_connections`` (open connections, when the server counts them).
Prometheus sends the token with ``authorization: {credentials_file: ...}`` in its scrape
configuration; any other caller gets 401, since the counts say how big a site is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from elasticsite.context.broker import Broker

__all__ = ["BrokerCollector", "install"]


class BrokerCollector(Collector):
    """The broker's gauges, read from its state at each scrape."""

    def __init__(self, broker: Broker, connections: Callable[[], int] | None = None) -> None:
        self.broker = broker
        self.connections = connections

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        contexts = list(self.broker.store.contexts.values())
        for name, help_, value in (
            ("elasticsite_broker_contexts", "Contexts the broker holds", len(contexts)),
            (
                "elasticsite_broker_members",
                "Nodes that are members of a context, over all contexts",
                sum(len(c.members) for c in contexts),
            ),
            (
                "elasticsite_broker_waiting_polls",
                "Long polls waiting for a context's next entry",
                self.broker.waiting(),
            ),
        ):
            family = GaugeMetricFamily(name, help_)
            family.add_metric([], value)
            yield family
        if self.connections is not None:
            family = GaugeMetricFamily("elasticsite_broker_connections", "Open connections")
            family.add_metric([], self.connections())
            yield family


def install(app: FastAPI, broker: Broker, registry: CollectorRegistry | None = None) -> None:
    """Serve ``GET /metrics`` from ``registry`` (a new one holding the broker's gauges),
    for the admin token's bearer."""
    reg = registry or CollectorRegistry()
    reg.register(BrokerCollector(broker))
    app.state.metrics_registry = reg

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        broker.auth.admin(request)
        return Response(generate_latest(reg), media_type=CONTENT_TYPE_LATEST)
