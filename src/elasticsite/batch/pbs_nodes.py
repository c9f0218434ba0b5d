"""PBS nodes: the node state table and ``pbsnodes`` read (JSON, or Torque's XML).

Native node states translate through one table, :data:`NODE_STATES`; a node reporting
several states (``"down,offline"``) takes the strongest by :data:`_PRECEDENCE`. A state
this module does not know becomes :attr:`NodeState.UNKNOWN` with one warning per word.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from elasticsite.batch.base import BatchError, Node, NodeState
from elasticsite.batch.pbs_values import as_int, load_json, load_xml, xml_value

__all__ = ["NODE_STATES", "node_state", "parse_pbsnodes_json", "parse_pbsnodes_xml"]

# The adapter's logger: a site filtering PBS messages names one logger, whichever
# module of the adapter speaks.
log = logging.getLogger("elasticsite.batch.pbs")

# -- the node state table ----------------------------------------------------------------

NODE_STATES: dict[str, NodeState] = {
    # up and accepting work: IDLE, or BUSY when jobs are listed on the node
    "free": NodeState.IDLE,
    "time-shared": NodeState.IDLE,  # Torque
    # up and (partly) in use
    "job-busy": NodeState.BUSY,
    "job-exclusive": NodeState.BUSY,
    "job-sharing": NodeState.BUSY,
    "busy": NodeState.BUSY,  # load above the MoM's ideal_load
    "resv-exclusive": NodeState.BUSY,  # held by an advance reservation
    "reserve": NodeState.BUSY,  # Torque
    # takes no new job: DRAINED, or DRAINING while jobs are still listed on it
    "offline": NodeState.DRAINED,
    "maintenance": NodeState.DRAINED,
    # not reporting (yet, or any more)
    "down": NodeState.DOWN,
    "state-unknown": NodeState.DOWN,
    "unknown": NodeState.DOWN,  # Torque's spelling
    "stale": NodeState.DOWN,
    "unresolvable": NodeState.DOWN,
    "provisioning": NodeState.DOWN,
    "wait-provisioning": NodeState.DOWN,
    "initializing": NodeState.DOWN,
    "sleep": NodeState.DOWN,  # powered down by the PBS power hook
    "mom-list-not-sent": NodeState.DOWN,  # Torque, a MoM that just started
}
"""Every native PBS/Torque node state word (lower case) and what it means to the manager."""

_PRECEDENCE = (NodeState.DOWN, NodeState.UNKNOWN, NodeState.DRAINED, NodeState.BUSY)
"""In a combined state the first of these present wins; otherwise the node is IDLE."""

_warned: set[str] = set()


def node_state(native: str, running_jobs: int) -> NodeState:
    """Translate a native (possibly comma-separated) state; jobs refine IDLE and DRAINED."""
    found: set[NodeState] = set()
    for word in (w.strip().lower() for w in native.split(",")):
        if not word:
            continue
        state = NODE_STATES.get(word)
        if state is None:
            if word not in _warned:
                _warned.add(word)
                log.warning("unknown PBS node state %r: reported as unknown", word)
            state = NodeState.UNKNOWN
        found.add(state)
    if not found:
        return NodeState.UNKNOWN
    for state in _PRECEDENCE:
        if state in found:
            if state is NodeState.DRAINED and running_jobs:
                return NodeState.DRAINING
            return state
    return NodeState.BUSY if running_jobs else NodeState.IDLE


# -- nodes -------------------------------------------------------------------------------

_SLOT_PREFIX = re.compile(r"^\s*[\d,\-]+/")


def _job_cores(entries: Iterable[str]) -> dict[str, int]:
    """Job id -> cores held, from PBS ``jobs`` lists or Torque ``0-3/12.server, 5/13.server``."""
    cores: dict[str, int] = {}
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        prefix = _SLOT_PREFIX.match(entry)
        if prefix:  # Torque: "<cores>/<job id>"
            count = 0
            for part in prefix.group(0)[:-1].split(","):
                low, _, high = part.partition("-")
                count += (as_int(high) - as_int(low) + 1) if high else 1
            job_id = entry[prefix.end() :]
        else:  # PBS: "<job id>" or "<job id>/<index>"
            job_id, _, _ = entry.partition("/")
            count = 1
        cores[job_id] = cores.get(job_id, 0) + count
    return cores


def _node(
    name: str, cores: int, state: str, held: Mapping[str, int], used: int, reason: Any
) -> Node:
    running = len(held)
    translated = node_state(str(state), running)
    free = max(cores - used, 0) if translated in (NodeState.IDLE, NodeState.BUSY) else 0
    return Node(str(name), cores, translated, running, free, str(reason or ""))


def _rectime(status: Any) -> float | None:
    match = re.search(r"(?:^|,)rectime=(\d+)", str(status or ""))
    return float(match.group(1)) if match else None


def parse_pbsnodes_json(text: str) -> list[Node]:
    """Every node of ``pbsnodes -a -F json``, states through the table."""
    data = load_json(text, "pbsnodes")
    listed = data.get("nodes", {})
    if not isinstance(listed, dict):
        raise BatchError("pbsnodes JSON: 'nodes' is not an object")
    nodes = []
    for name, attrs in listed.items():
        if not isinstance(attrs, dict):
            raise BatchError(f"pbsnodes JSON: node {name} is not an object")
        if "Error" in attrs:
            raise BatchError(f"pbsnodes: node {name}: {str(attrs['Error']).strip()}")
        if "state" not in attrs:
            raise BatchError(f"pbsnodes JSON: node {name} has no state")
        available = attrs.get("resources_available") or {}
        assigned = attrs.get("resources_assigned") or {}
        cores = as_int(available.get("ncpus"), as_int(attrs.get("pcpus"), 0))
        jobs = attrs.get("jobs") or []
        if isinstance(jobs, str):
            jobs = jobs.split(",")
        held = _job_cores(jobs)
        used = as_int(assigned.get("ncpus"), sum(held.values()))
        nodes.append(_node(name, cores, attrs["state"], held, used, attrs.get("comment")))
    return nodes


def parse_pbsnodes_xml(text: str) -> list[Node]:
    """Every node of Torque's ``pbsnodes -x``, with its last MoM report as heartbeat."""
    root = load_xml(text, "pbsnodes -x")
    nodes = []
    for element in [] if root is None else root.findall("Node"):
        attrs = xml_value(element)
        if not isinstance(attrs, dict) or not attrs.get("name") or "state" not in attrs:
            raise BatchError("pbsnodes -x: a <Node> without <name> or <state>")
        # "0/1.srv, 1/1.srv" (Torque 4) or "0-3,5/1.srv,4/2.srv" (Torque 6)
        slots = re.findall(r"([\d,\-]*\d)/([^,\s]+)", str(attrs.get("jobs") or ""))
        held = _job_cores(f"{cores}/{job}" for cores, job in slots)
        node = _node(
            attrs["name"], as_int(attrs.get("np")), attrs["state"], held,
            sum(held.values()), attrs.get("note"),
        )  # fmt: skip
        node.heartbeat_at = _rectime(attrs.get("status"))
        nodes.append(node)
    return nodes
