"""Slurm's nodes: the node state table and ``sinfo --json``/``scontrol --json`` read.

Every native node state, with its flags, is translated by :func:`node_state` (the
table is in its docstring and in docs/slurm.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from elasticsite import attributes
from elasticsite.batch.base import BatchError, Node, NodeState
from elasticsite.batch.slurm_values import load_json, read_int, read_text, read_time, read_words
from elasticsite.model import Job

__all__ = ["jobs_per_node", "node_state", "nodes_from", "parse_nodes"]

log = logging.getLogger(__name__)

_BASE: dict[str, NodeState] = {
    "IDLE": NodeState.IDLE,
    "ALLOCATED": NodeState.BUSY,
    "MIXED": NodeState.BUSY,
    "COMPLETING": NodeState.BUSY,
    "DOWN": NodeState.DOWN,
    "FUTURE": NodeState.DOWN,
    "UNKNOWN": NodeState.DOWN,
    "ERROR": NodeState.DOWN,
}
"""Slurm's base node state (the first word of ``sinfo``'s state) -> ours."""

_NOT_THERE = frozenset(
    {
        "NOT_RESPONDING",
        "POWERED_DOWN",
        "POWERING_UP",
        "POWERING_DOWN",
        "POWER_DOWN",
        "INVALID_REG",
        "REBOOT_ISSUED",
        "DYNAMIC_FUTURE",
    }
)
"""Flags saying the node's slurmd is not (or no longer) reporting: the node is DOWN."""

_NO_NEW_JOBS = frozenset({"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING"})
"""Flags (or compact states) saying the node takes no new job."""

_HARMLESS = frozenset(
    {
        "CLOUD",
        "DYNAMIC_NORM",
        "COMPLETING",
        "RESERVED",
        "MAINTENANCE",
        "MAINT",
        "PLANNED",
        "REBOOT_REQUESTED",
        "POWER_UP",
        "POWER_DRAIN",
        "RESUME",
        "UNDRAIN",
        "BLOCKED",
        "EXTERNAL",
    }
)
"""Flags that do not change what the manager may do with the node (see node_state)."""

_warned: set[str] = set()


def _warn_once(kind: str, value: str) -> None:
    """Log an untranslatable state or flag once per process, not once per snapshot."""
    key = f"{kind}:{value}"
    if key not in _warned:
        _warned.add(key)
        effect = "the node is UNKNOWN" if kind == "node state" else "ignored"
        log.warning("slurm: unknown %s %r: %s (see docs/slurm.md)", kind, value, effect)


def node_state(tokens: Sequence[str], alloc_cpus: int = 0) -> NodeState:
    """Translate Slurm's node state and flags, in this order of precedence:

    ====================================================  ==========================
    Slurm (base state + flags)                            NodeState
    ====================================================  ==========================
    any base + ``DRAIN``/``FAIL``, cores allocated or     DRAINING
    base ALLOCATED/MIXED/COMPLETING
    any base + ``DRAIN``/``FAIL``, nothing allocated      DRAINED
    ``DOWN``, ``FUTURE``, ``UNKNOWN`` (not registered)    DOWN
    any base + ``NOT_RESPONDING``, ``POWERED_DOWN``,      DOWN
    ``POWERING_UP``, ``POWERING_DOWN``, ``POWER_DOWN``,
    ``INVALID_REG``, ``REBOOT_ISSUED``, ``DYNAMIC_FUTURE``
    ``IDLE``                                              IDLE
    ``ALLOCATED``, ``MIXED``, ``COMPLETING``              BUSY
    flags ``CLOUD``, ``DYNAMIC_NORM``, ``RESERVED``,      (no effect)
    ``MAINTENANCE``, ``PLANNED``, ``REBOOT_REQUESTED``,
    ``POWER_UP``, ``COMPLETING`` ...
    a base state not listed here                          UNKNOWN (warned once)
    ====================================================  ==========================

    A drained node that is also powered down is DRAINED, not DOWN: it runs nothing
    and takes nothing, which is what the manager needs to know to remove it. An
    unknown flag is ignored with a warning (once per flag).
    """
    words = [t.upper() for t in tokens if t]
    if not words:
        _warn_once("node state", "")
        return NodeState.UNKNOWN
    base, flags = words[0], set(words[1:])
    if base in ("DRAINED", "DRAINING"):  # compact forms: the drain is the base word
        flags.add(base)
        base = "ALLOCATED" if base == "DRAINING" else "IDLE"
    for flag in flags - _NOT_THERE - _NO_NEW_JOBS - _HARMLESS:
        _warn_once("node flag", flag)
    mapped = _BASE.get(base)
    if mapped is None:
        _warn_once("node state", base)
        return NodeState.UNKNOWN
    if flags & _NO_NEW_JOBS:
        busy = mapped is NodeState.BUSY or alloc_cpus > 0 or "COMPLETING" in flags
        return NodeState.DRAINING if busy else NodeState.DRAINED
    if mapped is NodeState.DOWN or flags & _NOT_THERE:
        return NodeState.DOWN
    if mapped is NodeState.IDLE and "COMPLETING" in flags:
        return NodeState.BUSY
    return mapped


def jobs_per_node(running: Iterable[Job]) -> dict[str, int]:
    """How many running jobs each node holds (a multi-node job counts on each)."""
    counts: dict[str, int] = {}
    for job in running:
        names = attributes.values(job.attributes, attributes.NODES) or (
            (job.node,) if job.node else ()
        )
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return counts


def parse_nodes(text: str, running_jobs: Mapping[str, int] | None = None) -> list[Node]:
    """``sinfo --json`` (22.05) or ``scontrol show nodes --json`` (23.02+) -> nodes.

    ``running_jobs`` (from the same snapshot) gives each node its count of running jobs.
    """
    return nodes_from(load_json(text, "slurm node list"), running_jobs)


def nodes_from(data: Mapping[str, Any], running_jobs: Mapping[str, int] | None) -> list[Node]:
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list):
        raise BatchError("slurm node list: no 'nodes' list in the output")
    per_node = running_jobs or {}
    nodes: list[Node] = []
    try:
        for raw in raw_nodes:
            name = str(raw["name"])
            cores = read_int(raw.get("cpus"))
            alloc = read_int(raw.get("alloc_cpus"))
            tokens = read_words(raw.get("state")) + read_words(raw.get("state_flags"))
            state = node_state(tokens, alloc)
            free = max(0, cores - alloc) if state in (NodeState.IDLE, NodeState.BUSY) else 0
            nodes.append(
                Node(
                    name=name,
                    cores=cores,
                    state=state,
                    running_jobs=per_node.get(name, 0),
                    free_cores=free,
                    reason=read_text(raw.get("reason")),
                    heartbeat_at=None,
                    registered_at=read_time(raw.get("slurmd_start_time")),
                )
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise BatchError(f"slurm node list: unexpected node record ({exc!r})") from exc
    return nodes
