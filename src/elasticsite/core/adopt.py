"""Instances the clouds show with the site's tag that no live record knows of: a new
one is adopted (a worker started before its record was lost, or by a manager that
crashed), one whose worker is finished is a stray and is terminated. Part of
:func:`~elasticsite.core.observe.observe`; deterministic, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from elasticsite.clouds.base import SITE_TAG, Instance
from elasticsite.clouds.base import InstanceState as IS
from elasticsite.core.plan import (
    CoreConfig,
    CoreState,
    Plan,
    Problem,
    TerminateInstance,
    WorkerRecord,
)
from elasticsite.core.transitions import move, move_new
from elasticsite.model import Cause, Worker, WorkerState

__all__ = ["adopt"]

S = WorkerState


def adopt(
    state: CoreState,
    plan: Plan,
    config: CoreConfig,
    now: float,
    instances: Mapping[str, Mapping[str, Instance]],
) -> None:
    """Tagged instances no live record knows of: adopt new ones, take down stale ones."""
    specs = {c.name: c for c in config.clouds}
    records = state.records
    for cloud_name, found in instances.items():
        if found.keys() <= records.keys():  # one pass in C: every instance is known
            continue
        spec = specs.get(cloud_name)
        for wid, inst in found.items():
            if wid in records or inst.tags.get(SITE_TAG) != config.site_id:
                continue
            if inst.state in (IS.TERMINATED, IS.STOPPING):
                continue
            if wid in state.known or spec is None:
                # Its worker is finished: the instance must not outlive it.
                if now >= state.strays.get(inst.id, 0.0):
                    if inst.id not in state.strays:
                        plan.count("strays_terminated")
                        plan.errors.append(
                            Problem(
                                f"terminating stray instance {inst.id} ({wid})",
                                cloud=cloud_name,
                                instance=inst.id,
                                worker=wid,
                            )
                        )
                    state.strays[inst.id] = float("inf")  # until its outcome says otherwise
                    plan.run(TerminateInstance("", cloud_name, inst.id), state)
                continue
            vm = spec.default_vm
            w = Worker(
                id=wid,
                cloud=cloud_name,
                vm_type=vm.name,
                cores=vm.cores,
                requested_at=inst.created_at or now,
                instance_id=inst.id,
            )
            rec = WorkerRecord(w)
            state.records[wid] = rec
            state.known.add(wid)
            move_new(plan, rec, now, Cause.ADOPTED)
            move(plan, rec, S.BOOTING, now, Cause.ADOPTED)
            plan.count("adopted")
