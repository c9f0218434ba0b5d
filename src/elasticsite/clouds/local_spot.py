"""Spot capacity on the embedded cloud: the provider gives notice, then takes it back.

The cloud's registry keeps one ``reclaims`` row per instance it has given notice to,
with the time it takes the instance back. :meth:`LocalCloud.interrupt
<elasticsite.clouds.local.LocalCloud.interrupt>` writes it (what a provider short of
capacity does); every ``describe`` shows the notice as ``reclaim_at`` and, once that
time has come, pulls the plug on the worker (SIGKILL of its process group, as a
reclaimed VM just stops) and reports the instance terminated and ``reclaimed``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from contextlib import suppress

__all__ = ["RECLAIMS_SCHEMA", "give_notice", "pull_plug", "reclaims"]

RECLAIMS_SCHEMA = """
CREATE TABLE IF NOT EXISTS reclaims (
    id TEXT PRIMARY KEY REFERENCES instances (id),
    reclaim_at REAL NOT NULL
)
"""


def give_notice(db: sqlite3.Connection, instance_id: str, at: float) -> bool:
    """Record that the cloud takes ``instance_id`` back at ``at`` (an earlier notice
    stands); False if the instance is unknown or already over."""
    row = db.execute("SELECT state FROM instances WHERE id = ?", (instance_id,)).fetchone()
    if row is None or row[0] in ("terminated", "error"):
        return False
    db.execute("INSERT OR IGNORE INTO reclaims (id, reclaim_at) VALUES (?, ?)", (instance_id, at))
    return True


def reclaims(db: sqlite3.Connection) -> dict[str, float]:
    """Every notice given: instance id -> when it is taken back."""
    return {str(i): float(at) for i, at in db.execute("SELECT id, reclaim_at FROM reclaims")}


def pull_plug(pid: int | None) -> None:
    """Stop a reclaimed worker at once, and everything it started."""
    if pid is None:
        return
    with suppress(OSError):  # the worker leads its own process group
        os.killpg(pid, signal.SIGKILL)
