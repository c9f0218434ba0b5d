"""The I/O at both ends of a step that is not a command: what the clouds show, and the
plan's records written to the state store before any command runs.

Both run on the loop's thread, the only one that writes the store.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, CloudDriver, CloudError, Instance
from elasticsite.core import CoreState, Plan, health
from elasticsite.logs import ids
from elasticsite.manager.report import StepReport
from elasticsite.manager.store import StateStore, worker_number
from elasticsite.model import Cause, WorkerState

__all__ = ["Described", "describe_clouds", "persist", "reserve_tagged"]

log = logging.getLogger("elasticsite.manager.loop")
S = WorkerState
_CHATTY = (Cause.JOB_STARTED, Cause.JOB_FINISHED)


class Described(dict[str, dict[str, Instance]]):
    """Each cloud's instances by worker id (or name); ``failed``: clouds whose
    ``describe()`` failed this step (left out)."""

    failed: int = 0


def describe_clouds(clouds: Mapping[str, CloudDriver], report: StepReport) -> Described:
    """One ``describe()`` per cloud; a failure is reported, logged and left out."""
    instances = Described()
    for name, driver in clouds.items():
        try:
            found = driver.describe()
        except CloudError as exc:
            report.errors.append(f"cloud {name}: describe failed: {exc}")
            log.warning("cloud %s: describe failed: %s", name, exc, extra=ids(cloud=name))
            instances.failed += 1
            continue
        instances[name] = {i.tags.get(WORKER_TAG) or i.name: i for i in found}
    return instances


def reserve_tagged(
    store: StateStore, site_id: str, instances: Mapping[str, Mapping[str, Instance]], reserved: int
) -> int:
    """Keep the id counter beyond every worker id the clouds' tags show, before any
    launch: an instance whose record was lost (with the counter's last bump) keeps its
    id, and no new worker is given it. Returns the highest number reserved."""
    seen = (
        worker_number(wid)
        for found in instances.values()
        for wid, inst in found.items()
        if inst.tags.get(SITE_TAG) == site_id
    )
    highest = max((n for n in seen if n is not None), default=0)
    if highest > reserved:
        log.warning("worker ids up to %d are in use by instances; reserving them", highest)
        store.reserve_worker_numbers(highest)
        return highest
    return reserved


def persist(store: StateStore, state: CoreState, plan: Plan) -> None:
    """Log the plan's transitions, then write them and the changed records in one
    transaction; forget the records of workers that are finished."""
    for t in plan.transitions:
        level = logging.DEBUG if t.cause in _CHATTY else logging.INFO
        if log.isEnabledFor(level):
            before = t.from_state.value if t.from_state else "-"
            rec = state.records.get(t.worker_id)
            w = rec.worker if rec is not None else None
            extra = ids(worker=t.worker_id, cloud=w and w.cloud, instance=w and w.instance_id,
                        node=w and w.node)  # fmt: skip
            log.log(level, "worker %s: %s -> %s (%s)", t.worker_id, before, t.to_state,
                    t.cause, extra=extra)  # fmt: skip
    if plan.transitions or plan.dirty or plan.counts:
        with store.transaction():
            for wid in plan.dirty:
                rec = state.records.get(wid)
                if rec is not None:
                    store.save(rec)
            store.record(plan.transitions)
            for name, by in plan.counts.items():
                store.bump(name, by)
    if plan.health_changed:
        store.save_cloud_health(health.dump(state))
    if plan.held_changed:
        store.save_held_jobs(state.held.values())
    for wid, rec in list(state.records.items()):
        w = rec.worker
        if w.state is S.TERMINATED or (w.state is S.FAILED and rec.instance_gone):
            del state.records[wid]
        elif len(w.history) > 64:
            del w.history[:-32]  # every transition is in the store
