"""What each resource gives each urgency: the urgency → policy maps its administrators set.

The map lives with the tokens (same file) so it is one place to read and audit: the
submit filter's answer carries the policy for the urgency it allowed, and a resource's
submit path applies it (falling back to its own ``[urgent] policies`` for urgencies
the map leaves out). Every change is audited with who made it.
"""

from __future__ import annotations

from collections.abc import Mapping

from elasticsite.decision import URGENCIES
from elasticsite.sqlite import Table

__all__ = ["POLICIES", "ResourcePolicies"]

POLICIES: dict[str, str] = {
    "default": "no elevated priority",
    "priority": "batch: above every normal job",
    "next_to_run": "batch: head of the queue",
    "preemption": "batch or cloud: running jobs or VMs make room",
    "urgent_only": "cloud: non-urgent requests refused",
    "qos": "cloud: volunteering VMs give up half their cores",
    "migration": "cloud: a smaller VM moves to another host",
    "suspension": "cloud: VMs suspended, resumed when room returns",
}
"""The elevated-priority policies a resource can map an urgency to (paper 004, Table 2.2)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS resource_policies (
    resource TEXT NOT NULL,
    urgency TEXT NOT NULL,
    policy TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (resource, urgency)
)
"""


class ResourcePolicies(Table):
    """The maps of an urgent store (same file, same connection)."""

    schema = _SCHEMA

    def set(
        self, resource: str, mapping: Mapping[str, str], now: float, actor: str
    ) -> dict[str, str]:
        """Replace ``resource``'s map (urgencies left out fall back to the site's own)."""
        for urgency, policy in mapping.items():
            if urgency not in URGENCIES:
                raise ValueError(f"unknown urgency {urgency!r}; use red, orange or yellow")
            if policy not in POLICIES:
                raise ValueError(f"unknown policy {policy!r}; choose {', '.join(POLICIES)}")
        with self.db.transaction():
            self.db.execute("DELETE FROM resource_policies WHERE resource = ?", (resource,))
            self.db.executemany(
                "INSERT INTO resource_policies VALUES (?, ?, ?, ?, ?)",
                [(resource, u, p, actor, now) for u, p in mapping.items()],
            )
            self.db.execute(
                "INSERT INTO audit (at, action, actor, token_id, resource, identity, urgency, "
                "ok, reason, source) VALUES (?, 'policies', ?, '', ?, '', '', 1, ?, '')",
                (now, actor, resource, ", ".join(f"{u}={p}" for u, p in mapping.items())),
            )
        return dict(mapping)

    def of(self, resource: str) -> dict[str, str]:
        rows = self.db.execute(
            "SELECT urgency, policy FROM resource_policies WHERE resource = ?", (resource,)
        ).fetchall()
        order = {u: k for k, u in enumerate(URGENCIES)}
        return dict(sorted(((u, p) for u, p in rows), key=lambda r: order.get(r[0], 9)))

    def policy(self, resource: str, urgency: str) -> str | None:
        row = self.db.execute(
            "SELECT policy FROM resource_policies WHERE resource = ? AND urgency = ?",
            (resource, urgency),
        ).fetchone()
        return None if row is None else str(row[0])
