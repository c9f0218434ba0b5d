r"""From broker entries to script runs: what to add and delete, and running the scripts.

:func:`plan` turns an answer of the broker (entries, or a snapshot to diff against
the known members) into :class:`Step`\ s; :class:`ScriptRunner` runs the
administrator's executables of one directory (``init``, ``add``, ``delete``,
``restart``) with the arguments and environment of docs/recontext-api.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from elasticsite.context.agent_state import AgentError
from elasticsite.context.models import Entry, NodeIn, NodeInfo, Updates
from elasticsite.context.validation import describe_errors, publishable_key

__all__ = ["DEFAULT_SCRIPTS", "SCRIPT_KINDS", "ScriptRunner", "Step", "plan", "plan_entry"]

log = logging.getLogger(__name__)

SCRIPT_KINDS = ("init", "add", "delete", "restart")
DEFAULT_SCRIPTS = Path(__file__).with_name("scripts")
_NODE_ENV = (
    "ELASTICSITE_NODE_SHORT_HOSTNAME",
    "ELASTICSITE_NODE_HOSTNAME",
    "ELASTICSITE_NODE_ADDRESS",
    "ELASTICSITE_NODE_SSH_HOST_KEY",
    "ELASTICSITE_NODE_DATA",
    "ELASTICSITE_NODE_ID",
    "ELASTICSITE_ENTRY_ID",
)
_OUTPUT_LIMIT = 4096


# --- planning ------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One script run over one node: what an entry (or a snapshot diff) asks for."""

    op: Literal["add", "delete"]
    node: NodeInfo
    entry_id: int


def _same(a: NodeInfo, b: NodeInfo) -> bool:
    return a.model_dump(exclude={"joined_at"}) == b.model_dump(exclude={"joined_at"})


def plan_entry(members: Mapping[str, NodeInfo], entry: Entry) -> list[Step]:
    """The steps one incremental entry asks for, given the members known before it.

    A join of a node already known with the same fields adds it again (the entry was
    being applied when the agent stopped); with other fields, the old record is
    deleted first. A leave of an unknown node has nothing to undo.
    """
    known = members.get(entry.node.node_id)
    if entry.op == "join":
        steps = []
        if known is not None and not _same(known, entry.node):
            steps.append(Step("delete", known, entry.id))
        steps.append(Step("add", entry.node, entry.id))
        return steps
    return [Step("delete", known, entry.id)] if known is not None else []


def plan(members: Mapping[str, NodeInfo], updates: Updates) -> list[Step]:
    """Every step an answer asks for, in order.

    Incremental answers are planned entry by entry. A snapshot is a diff: departed or
    changed nodes are deleted first (in the order they were known), then new or
    changed ones added in entry order; unchanged members run nothing.
    """
    if not updates.snapshot:
        steps: list[Step] = []
        view = dict(members)
        for entry in updates.entries:
            steps += plan_entry(view, entry)
            if entry.op == "join":
                view[entry.node.node_id] = entry.node
            else:
                view.pop(entry.node.node_id, None)
        return steps
    target = {e.node.node_id: e for e in updates.entries if e.op == "join"}
    deletes = [
        Step("delete", node, updates.last_id)
        for nid, node in members.items()
        if nid not in target or not _same(node, target[nid].node)
    ]
    adds = [
        Step("add", e.node, e.id)
        for nid, e in target.items()
        if nid not in members or not _same(members[nid], e.node)
    ]
    return deletes + adds


# --- scripts -------------------------------------------------------------------------


def unsafe_field(node: NodeInfo) -> str | None:
    """Why a node's record must not reach the scripts, or None when it is safe: the
    broker's own checks, made again on this side."""
    try:
        NodeIn.model_validate(node.model_dump(exclude={"node_id", "joined_at"}))
    except ValidationError as exc:
        return describe_errors(exc.errors())
    return None


class ScriptRunner:
    """Runs the administrator's scripts with the contract's arguments and environment."""

    def __init__(
        self,
        scripts: Path,
        *,
        context_uri: str,
        root: Path,
        self_hostname: str,
        timeout: float = 120.0,
        strict: bool = False,
    ) -> None:
        self.scripts = scripts
        self.timeout = timeout
        self.strict = strict
        env = {k: v for k, v in os.environ.items() if k not in _NODE_ENV}
        env.update(
            ELASTICSITE_CONTEXT_URI=context_uri,
            ELASTICSITE_AGENT_ROOT=str(root),
            ELASTICSITE_SELF_HOSTNAME=self_hostname,
        )
        self._env = env

    def listing(self, kind: str) -> list[Path]:
        """The executables of one directory, in C-locale name order."""
        folder = self.scripts / kind
        if not folder.is_dir():
            return []
        found = [
            p
            for p in folder.iterdir()
            if not p.name.startswith(".")
            and not p.name.endswith("~")
            and p.is_file()
            and os.access(p, os.X_OK)
        ]
        return sorted(found, key=lambda p: p.name.encode("utf-8", "surrogateescape"))

    def run(self, kind: str, step: Step | None = None) -> int:
        """Run every script of ``kind``; returns how many failed. In strict mode the
        first failure raises :class:`AgentError` instead."""
        env = dict(self._env)
        args: list[str] = []
        if step is not None:
            # A key comment an older broker took (several words): meaningless to
            # other nodes, and no reason to leave a node out of their files.
            n = step.node.model_copy(
                update={"ssh_host_key": publishable_key(step.node.ssh_host_key)}
            )
            args = [n.short_hostname, n.hostname, n.address, n.ssh_host_key, n.data]
            env.update(
                ELASTICSITE_NODE_SHORT_HOSTNAME=n.short_hostname,
                ELASTICSITE_NODE_HOSTNAME=n.hostname,
                ELASTICSITE_NODE_ADDRESS=n.address,
                ELASTICSITE_NODE_SSH_HOST_KEY=n.ssh_host_key,
                ELASTICSITE_NODE_DATA=n.data,
                ELASTICSITE_NODE_ID=n.node_id,
                ELASTICSITE_ENTRY_ID=str(step.entry_id),
            )
        if step is not None and (problem := unsafe_field(n)) is not None:
            # Published by a broker that did not check it (an older one): no script
            # may see it, since scripts write these fields into system files.
            log.warning("not running %s scripts for node %s: %s", kind, step.node.node_id, problem)
            return 1
        failures = 0
        for script in self.listing(kind):
            what = f"{kind}/{script.name}" + (f" {step.node.hostname}" if step else "")
            code, output = self._execute([str(script), *args], env)
            if code == 0:
                log.debug("ran %s%s", what, f": {output}" if output else "")
                continue
            failures += 1
            reason = "timed out" if code is None else f"exited {code}"
            log.warning("script %s %s; output: %s", what, reason, output or "(none)")
            if self.strict:
                raise AgentError(f"script {what} {reason} (--strict)")
        return failures

    def _execute(self, argv: list[str], env: dict[str, str]) -> tuple[int | None, str]:
        """Run one script in its own session (a timeout kills all it started);
        returns its exit code (None on timeout) and its output, trimmed."""
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            return 126, f"cannot run: {exc.strerror}"
        try:
            out, _ = proc.communicate(timeout=self.timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            code = None
        text = out.decode("utf-8", "replace").strip()
        if len(text) > _OUTPUT_LIMIT:
            text = text[:_OUTPUT_LIMIT] + " [...]"
        return code, text
