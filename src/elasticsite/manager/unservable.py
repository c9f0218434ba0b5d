"""Queued jobs no cloud can run, as the manager tells people about them.

Each step's decision names the queued jobs it bought nothing for and why
(:mod:`elasticsite.feasibility`). The manager keeps them in its state store, so
``elasticsite queue``, ``elasticsite status`` and the dashboard show the last known
marks with or without a running manager, and logs each job once per reason: a
WARNING, or DEBUG when the site's own nodes may still run it. Marks are judged again
every step, so a cloud that reopens or a VM type added (and the manager restarted)
clears them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from elasticsite.feasibility import explain, runs_on_site
from elasticsite.logs import ids
from elasticsite.manager.store import StateStore

__all__ = ["UnservableMarks"]

log = logging.getLogger("elasticsite.manager.loop")


class UnservableMarks:
    """The marks the store holds, kept in step with each decision's (loop thread only)."""

    def __init__(self, store: StateStore, site_id: str) -> None:
        self.store = store
        self.site_id = site_id
        self.current: dict[str, str] = {j: why for j, (why, _) in store.unservable().items()}
        """Job id -> why no cloud can run it, as the store holds it."""
        self._told = False

    def update(self, marks: Mapping[str, str], now: float) -> None:
        """Store the marks of this step's decision and log the new ones."""
        if marks == self.current and self._told:
            return
        changed = {j: why for j, why in marks.items() if self.current.get(j) != why}
        gone = [j for j in self.current if j not in marks]
        if changed or gone:
            self.store.save_unservable(changed, gone, now)
        # A manager (re)started says each once in its own log; then only what changed.
        told = marks if not self._told else changed
        self._told = True
        self.current = dict(marks)
        for job, why in told.items():
            level = logging.DEBUG if runs_on_site(why) else logging.WARNING
            log.log(level, "job %s: %s; no worker is launched for it", job, explain(why),
                    extra=ids(site=self.site_id, job=job))  # fmt: skip
