"""Which clouds take launches now: cool-downs, blocked clouds and the protected state.

A failed launch says why (:class:`~elasticsite.clouds.errors.ErrorKind`):

* ``capacity``: that VM type of the cloud is closed for ``capacity_cooldown`` seconds
  (recorded as ``cloud/vm_type``; the whole cloud once every type of it is closed) and
  the worker fails at once, so the policy replaces it with the cloud's next VM type,
  or on another cloud, instead of retrying here;
* ``quota``: the account's limit, so the whole cloud is closed for the cool-down;
* ``credentials`` or ``not_found``: nothing will launch there until an operator fixes
  the configuration: the cloud is closed until reset (``elasticsite cloud reset``),
  and ``status`` says why;
* ``throttled`` or ``transient``: the worker's launch is retried with jittered
  backoff (other kinds keep the plain exponential backoff).

A cloud whose started instances fail ``protect_after`` times in a row before joining
(stalled or lost: a bad image, a broken network) enters the **protected** state: closed for
``protect_cooldown`` seconds or until reset, so a broken cloud cannot burn money in a
loop. A worker of that cloud joining resets the count.

Pure: times come in, nothing is read or written.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace

from elasticsite.core.plan import CoreConfig, CoreState, Plan, Problem
from elasticsite.model import Cause, CloudSpec, Transition, WorkerState

__all__ = [
    "BLOCKING",
    "COOLING",
    "CloudHealth",
    "closed",
    "closed_types",
    "dump",
    "jittered",
    "launch_refused",
    "load",
    "open_clouds",
    "reset",
    "track",
]

COOLING = frozenset({"capacity", "quota"})
"""Kinds that close a cloud for a while."""
BLOCKING = frozenset({"credentials", "not_found"})
"""Kinds that close a cloud until an operator resets it."""
_PENDING = WorkerState.PENDING_STATES
_JOINED = WorkerState.JOINED_STATES
_BOOT_FAILURES = (Cause.STALLED, Cause.LOST)
"""Causes of an instance that was started and never joined (a refused launch is
judged by its error kind instead)."""


@dataclass
class CloudHealth:
    """One cloud's record: closed until when (``inf``: until reset), why, and how many
    of its workers failed in a row before joining."""

    closed_until: float = 0.0
    kind: str = ""
    reason: str = ""
    failures: int = 0

    def is_open(self, now: float) -> bool:
        return now >= self.closed_until


def closed_types(state: CoreState, now: float) -> dict[str, frozenset[str]]:
    """Per cloud, the VM types closed at ``now`` (after a capacity refusal)."""
    found: dict[str, set[str]] = {}
    for key, h in state.health.items():
        cloud, sep, vm_type = key.partition("/")
        if sep and not h.is_open(now):
            found.setdefault(cloud, set()).add(vm_type)
    return {cloud: frozenset(types) for cloud, types in found.items()}


def closed(state: CoreState, now: float, clouds: Sequence[CloudSpec] = ()) -> frozenset[str]:
    """Names of the clouds that take no launch at ``now``: closed themselves, or (of
    ``clouds``) with every VM type closed."""
    shut = {name for name, h in state.health.items() if "/" not in name and not h.is_open(now)}
    types = closed_types(state, now) if clouds else {}
    for spec in clouds:
        gone = types.get(spec.name)
        if gone and all(vm.name in gone for vm in spec.vm_types):
            shut.add(spec.name)
    return frozenset(shut)


def open_clouds(
    state: CoreState, now: float, clouds: Sequence[CloudSpec]
) -> tuple[Sequence[CloudSpec], frozenset[str]]:
    """``clouds`` as a policy should see them at ``now`` (closed VM types left out, so a
    cloud's first open type is its default) and the names of the closed clouds."""
    shut = closed(state, now, clouds)
    types = closed_types(state, now)
    if not types:
        return clouds, shut
    shown = []
    for spec in clouds:
        gone = types.get(spec.name)
        if gone and spec.name not in shut:
            spec = replace(spec, vm_types=tuple(v for v in spec.vm_types if v.name not in gone))
        shown.append(spec)
    return shown, shut


def _close(state: CoreState, plan: Plan, cloud: str, until: float, kind: str, why: str) -> None:
    health = state.health.setdefault(cloud, CloudHealth())
    if health.closed_until >= until and health.kind == kind:
        return
    health.closed_until = max(health.closed_until, until)
    health.kind, health.reason = kind, why
    plan.health_changed = True
    plan.count(f"cloud_closed_{kind}")
    plan.errors.append(
        Problem(
            f"cloud {cloud}: no launches "
            + ("until reset" if math.isinf(until) else f"until t={until:.0f}")
            + f" ({kind}: {why})",
            cloud=cloud,
        )
    )


def launch_refused(
    state: CoreState,
    plan: Plan,
    config: CoreConfig,
    now: float,
    cloud: str,
    kind: str,
    why: str,
    vm_type: str = "",
) -> bool:
    """Act on a launch of ``vm_type`` the cloud refused for ``kind``; True if the worker
    must fail now rather than be retried on this cloud."""
    spec = next((c for c in config.clouds if c.name == cloud), None)
    if kind == "capacity" and vm_type and spec is not None and len(spec.vm_types) > 1:
        _close(state, plan, f"{cloud}/{vm_type}", now + config.capacity_cooldown, kind, why)
        return True
    if kind in COOLING:
        _close(state, plan, cloud, now + config.capacity_cooldown, kind, why)
        return True
    if kind in BLOCKING:
        _close(state, plan, cloud, math.inf, kind, why)
        return True
    return False


def jittered(config: CoreConfig, worker_id: str, attempts: int) -> float:
    """The backoff before retry ``attempts`` of a throttled or transient launch: between
    half and all of the plain backoff, spread by worker (deterministic, so the manager
    and the simulator agree)."""
    spread = (zlib.crc32(f"{worker_id}/{attempts}".encode()) % 1000) / 1000.0
    return config.backoff(attempts) * (0.5 + 0.5 * spread)


def track(
    state: CoreState, plan: Plan, config: CoreConfig, now: float, transitions: Iterable[Transition]
) -> None:
    """Count the boot failures and joins among ``transitions`` (each given once, in the
    order they happened), and protect a cloud that failed ``config.protect_after`` times
    in a row."""
    for t in transitions:
        if t.from_state not in _PENDING:
            continue
        rec = state.records.get(t.worker_id)
        if rec is None:
            continue
        cloud = rec.worker.cloud
        if t.to_state in _JOINED:
            health = state.health.get(cloud)
            if health is not None and health.failures:
                health.failures = 0
                plan.health_changed = True
        elif t.to_state is WorkerState.FAILED and t.cause in _BOOT_FAILURES:
            health = state.health.setdefault(cloud, CloudHealth())
            health.failures += 1
            plan.health_changed = True
            if config.protect_after and health.failures >= config.protect_after:
                _close(
                    state, plan, cloud, now + config.protect_cooldown, "protected",
                    f"{health.failures} workers in a row failed before joining "
                    f"(last: {t.cause})",
                )  # fmt: skip


def reset(state: CoreState, cloud: str) -> bool:
    """An operator clears a cloud and its VM types: open again, failure count zero.
    False if it was fine."""
    was = False
    for key in [k for k in state.health if k == cloud or k.startswith(cloud + "/")]:
        health = state.health.pop(key)
        was = was or health.closed_until > 0 or health.failures > 0
    return was


def dump(state: CoreState) -> dict[str, dict[str, object]]:
    """The health records as plain data, for the state store (``inf`` as None)."""
    out: dict[str, dict[str, object]] = {}
    for name, h in state.health.items():
        record = asdict(h)
        if math.isinf(h.closed_until):
            record["closed_until"] = None
        out[name] = record
    return out


def load(data: dict[str, dict[str, object]]) -> dict[str, CloudHealth]:
    """:func:`dump`'s data back as records (anything malformed is left out)."""
    found: dict[str, CloudHealth] = {}
    for name, record in data.items():
        try:
            until = record.get("closed_until")
            found[str(name)] = CloudHealth(
                closed_until=math.inf if until is None else float(until),  # type: ignore[arg-type]
                kind=str(record.get("kind", "")),
                reason=str(record.get("reason", "")),
                failures=int(record.get("failures", 0)),  # type: ignore[call-overload]
            )
        except (TypeError, ValueError, AttributeError):
            continue
    return found
