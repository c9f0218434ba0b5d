"""The urgent services' Prometheus metrics, on the server's ``/metrics`` (admin token).

Read from the urgent store when scraped: ``elasticsite_urgent_sessions`` (tokens by
state: issued, active), ``elasticsite_urgent_authentications_total`` (submit-filter
decisions by outcome, from the audit log) and ``elasticsite_urgent_principals`` (keys
by role). An alert on refusals rising, or on an active session nobody uses, starts here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from elasticsite.urgent.routes import UrgentService

__all__ = ["UrgentCollector"]


class UrgentCollector(Collector):
    def __init__(self, service: UrgentService) -> None:
        self.service = service

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        s = self.service
        now = s.clock()
        with s.lock:
            db = s.store.db
            (issued,) = db.execute(
                "SELECT COUNT(*) FROM tokens WHERE activated_at IS NULL AND revoked_at IS NULL "
                "AND (expires_at IS NULL OR expires_at > ?)",
                (now,),
            ).fetchone()
            (active,) = db.execute(
                "SELECT COUNT(*) FROM tokens WHERE activated_at IS NOT NULL AND revoked_at IS "
                "NULL AND expires_at > ?",
                (now,),
            ).fetchone()
            outcomes = dict(db.execute(
                "SELECT ok, COUNT(*) FROM audit WHERE action = 'authenticate' GROUP BY ok"
            ).fetchall())  # fmt: skip
            roles = s.principals.names()
        sessions = GaugeMetricFamily(
            "elasticsite_urgent_sessions", "Right-of-way tokens by state", labels=["state"]
        )
        sessions.add_metric(["issued"], issued)
        sessions.add_metric(["active"], active)
        yield sessions
        auth = CounterMetricFamily(
            "elasticsite_urgent_authentications",
            "Urgent submit-filter decisions by outcome",
            labels=["outcome"],
        )
        auth.add_metric(["allowed"], outcomes.get(1, 0))
        auth.add_metric(["refused"], outcomes.get(0, 0))
        yield auth
        keys = GaugeMetricFamily("elasticsite_urgent_principals", "API keys by role",
                                 labels=["role"])  # fmt: skip
        for role in ("admin", "user", "resource"):
            keys.add_metric([role], sum(1 for _, r, _ in roles if r == role))
        yield keys
