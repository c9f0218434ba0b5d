"""Hosts and slots for the embedded cloud, and its urgent policies, applied to real workers.

Given ``hosts``, the local cloud stops being infinite: every instance takes a slot
on a host (its type's cores and memory), a launch that fits nowhere fails as a full
cloud does (:attr:`~elasticsite.clouds.errors.ErrorKind.CAPACITY`), and a launch
tagged with an urgency (:data:`URGENCY_TAG`) gets the policy the operator mapped to
that urgency, planned by :class:`elasticsite.clouds.capacity.Capacity`:

* preemption terminates the target's worker (its tags say ``preempted``);
* suspension stops its worker process group (SIGSTOP) and continues it (SIGCONT)
  as soon as its host has room again;
* migration moves it to another host, unreachable (stopped) for
  :attr:`HostCapacity.migration_pause` seconds;
* QoS records fewer cores and less memory for it, given back when the urgent
  instance leaves;
* urgent-only refuses non-urgent launches while an urgent instance under that
  policy runs.

Owners mark instances as targets of choice with :data:`VOLUNTEER_TAG` = ``yes``.
Slots live in the registry's ``slots`` table, in the launch's own transaction, so
two tenants launching at once never share a slot; signals go out after commit.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field

from elasticsite.clouds.base import URGENCY_TAG, VOLUNTEER_TAG, CloudError
from elasticsite.clouds.capacity import Capacity, CapacityError, Host
from elasticsite.clouds.capacity_policy import (
    CloudPolicy,
    Migrate,
    Preempt,
    Resume,
    Shrink,
    Suspend,
)
from elasticsite.clouds.errors import ErrorKind
from elasticsite.decision import URGENCIES
from elasticsite.model import VMType

__all__ = ["PREEMPTED_TAG", "URGENCY_TAG", "VOLUNTEER_TAG", "Effect", "HostCapacity"]

log = logging.getLogger(__name__)

PREEMPTED_TAG = "elasticsite:preempted"
"""Set on an instance the cloud terminated for an urgent one: the urgent instance's name."""
SUSPENDED_TAG = "elasticsite:suspended"
QOS_TAG = "elasticsite:qos-cores"

SLOTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS slots (
    instance TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    vm_type TEXT NOT NULL,
    cores INTEGER NOT NULL,
    memory_mb INTEGER NOT NULL,
    cores_now INTEGER NOT NULL,
    memory_now INTEGER NOT NULL,
    urgent TEXT,
    volunteer INTEGER NOT NULL DEFAULT 0,
    suspended_at REAL,
    seq INTEGER NOT NULL
)
"""


@dataclass(frozen=True, slots=True)
class Effect:
    """A signal to a worker's process group, once the transaction has committed."""

    pid: int
    sig: int
    then: int | None = None
    """A second signal after the pause (migration: stop, then continue)."""


@dataclass(slots=True)
class HostCapacity:
    hosts: Sequence[Host]
    policies: Mapping[str, CloudPolicy] = field(default_factory=dict)
    """Urgency (red, orange, yellow) to policy; an urgency not mapped gets the default."""
    migration_pause: float = 0.5

    def __post_init__(self) -> None:
        names = [h.name for h in self.hosts]
        if not names or len(set(names)) != len(names):
            raise ValueError("a finite cloud needs at least one host, each with its own name")
        for urgency in self.policies:
            if urgency not in URGENCIES:
                raise ValueError(f"unknown urgency {urgency!r}; use red, orange or yellow")

    # -- reading the registry ------------------------------------------------
    def load(self, db: sqlite3.Connection) -> tuple[Capacity, dict[str, int | None]]:
        """The capacity as the registry has it, dropping the slots of ended instances."""
        db.execute(SLOTS_SCHEMA)
        db.execute(
            "DELETE FROM slots WHERE instance NOT IN (SELECT id FROM instances "
            "WHERE state IN ('pending', 'running'))"
        )
        cap = Capacity({h.name: h for h in self.hosts})
        pids: dict[str, int | None] = {}
        rows = db.execute(
            "SELECT s.instance, s.host, s.vm_type, s.cores, s.memory_mb, s.cores_now, "
            "s.memory_now, s.urgent, s.volunteer, s.suspended_at, i.pid FROM slots s "
            "JOIN instances i ON i.id = s.instance ORDER BY s.seq"
        ).fetchall()
        for iid, host, vm, cores, mem, cores_now, mem_now, urgent, vol, susp, pid in rows:
            if host not in cap.hosts:  # a host taken out of the configuration
                cap.hosts[host] = Host(host, max(1, cores), max(1, mem))
            slot = cap.add(iid, VMType(vm, cores, mem), host, urgent=bool(urgent), volunteer=vol)
            slot.cores, slot.memory_mb, slot.suspended = cores_now, mem_now, susp is not None
            if urgent and self.policies.get(urgent) is CloudPolicy.URGENT_ONLY:
                cap.urgent_only = True
            pids[iid] = pid
        return cap, pids

    # -- a launch ------------------------------------------------------------
    def reserve(
        self,
        db: sqlite3.Connection,
        instance_id: str,
        name: str,
        vm_type: VMType,
        tags: Mapping[str, str],
    ) -> list[Effect]:
        """Take a slot for a new instance (making room if it is urgent), or raise."""
        urgency = tags.get(URGENCY_TAG)
        if urgency is not None and urgency not in URGENCIES:
            raise CloudError(f"bad {URGENCY_TAG} tag {urgency!r}; use red, orange or yellow")
        volunteer = tags.get(VOLUNTEER_TAG) == "yes"
        cap, pids = self.load(db)
        try:
            plan = cap.launch(vm_type, urgency, self.policies)
        except CapacityError as exc:
            raise CloudError(f"{exc} ({name})", kind=ErrorKind.CAPACITY) from None
        effects: list[Effect] = []
        now = time.time()
        for action in plan.actions:
            effects += self._act(db, action, name, pids.get(action.vm), now)
        host = plan.host
        db.execute(
            "INSERT INTO slots (instance, host, vm_type, cores, memory_mb, cores_now, "
            "memory_now, urgent, volunteer, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "(SELECT COALESCE(MAX(seq), 0) + 1 FROM slots))",
            (instance_id, host, vm_type.name, vm_type.cores, vm_type.memory_mb, vm_type.cores,
             vm_type.memory_mb, urgency, int(volunteer)),
        )  # fmt: skip
        return effects

    def _act(
        self,
        db: sqlite3.Connection,
        action: Preempt | Suspend | Migrate | Shrink,
        urgent: str,
        pid: int | None,
        now: float,
    ) -> list[Effect]:
        vm = action.vm
        if isinstance(action, Preempt):
            _tag(db, vm, {PREEMPTED_TAG: urgent})
            db.execute(
                "UPDATE instances SET state = 'stopping', updated_at = ? WHERE id = ?", (now, vm)
            )
            db.execute("DELETE FROM slots WHERE instance = ?", (vm,))
            log.warning("local cloud: preempting %s for urgent %s", vm, urgent)
            return [Effect(pid, signal.SIGTERM)] if pid else []
        if isinstance(action, Suspend):
            _tag(db, vm, {SUSPENDED_TAG: urgent})
            db.execute("UPDATE slots SET suspended_at = ? WHERE instance = ?", (now, vm))
            log.warning("local cloud: suspending %s for urgent %s", vm, urgent)
            return [Effect(pid, signal.SIGSTOP)] if pid else []
        if isinstance(action, Migrate):
            db.execute("UPDATE slots SET host = ? WHERE instance = ?", (action.target, vm))
            log.warning("local cloud: migrating %s from %s to %s for urgent %s", vm,
                        action.source, action.target, urgent)  # fmt: skip
            return [Effect(pid, signal.SIGSTOP, signal.SIGCONT)] if pid else []
        _tag(db, vm, {QOS_TAG: str(action.cores)})
        db.execute(
            "UPDATE slots SET cores_now = ?, memory_now = ? WHERE instance = ?",
            (action.cores, action.memory_mb, vm),
        )
        log.warning("local cloud: %s down to %d cores for urgent %s", vm, action.cores, urgent)
        return []

    # -- giving room back ----------------------------------------------------
    def settle(self, db: sqlite3.Connection) -> list[Effect]:
        """Resume suspended instances and restore shrunk ones wherever room came back."""
        cap, pids = self.load(db)
        effects: list[Effect] = []
        for event in cap.settle():
            vm = event.vm
            _tag(db, vm, {SUSPENDED_TAG: None, QOS_TAG: None})
            if isinstance(event, Resume):
                db.execute("UPDATE slots SET suspended_at = NULL WHERE instance = ?", (vm,))
                pid = pids.get(vm)
                if pid:
                    effects.append(Effect(pid, signal.SIGCONT))
                log.info("local cloud: resuming %s", vm)
            else:
                db.execute(
                    "UPDATE slots SET cores_now = cores, memory_now = memory_mb WHERE instance = ?",
                    (vm,),
                )
                log.info("local cloud: %s back to its full size", vm)
        return effects

    def signal(self, effects: Sequence[Effect]) -> None:
        """Send the effects' signals (to each worker's process group)."""
        pauses = [e for e in effects if e.then is not None]
        for e in effects:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(e.pid, e.sig)
        if pauses:
            time.sleep(self.migration_pause)  # the migrated instance is unreachable meanwhile
            for e in pauses:
                assert e.then is not None
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(e.pid, e.then)


def _tag(db: sqlite3.Connection, instance_id: str, changes: Mapping[str, str | None]) -> None:
    row = db.execute("SELECT tags FROM instances WHERE id = ?", (instance_id,)).fetchone()
    if row is None:
        return
    tags = json.loads(row[0])
    for key, value in changes.items():
        if value is None:
            tags.pop(key, None)
        else:
            tags[key] = value
    db.execute("UPDATE instances SET tags = ? WHERE id = ?", (json.dumps(tags), instance_id))
