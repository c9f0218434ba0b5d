"""What a recontextualization agent has applied, kept so a restart neither repeats nor skips.

Progress is one synced line appended to a journal per applied entry; the whole
state file is rewritten atomically (temporary file + fsync + rename) only when the
journal grows as long as the membership, so the cost per entry stays small at
10,000 members. The file holds the node secret: mode 0600.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticsite.context.models import NodeInfo
from elasticsite.files import private_dir, write_private

__all__ = ["AgentError", "AgentState"]

log = logging.getLogger(__name__)


class AgentError(Exception):
    """The agent cannot go on (bad user data, rejected credentials, a strict script
    failed); the message says what to fix."""


# --- state ---------------------------------------------------------------------------


@dataclass
class AgentState:
    """What survives a restart. Holds the node secret: the file is mode 0600."""

    context_uri: str
    node_id: str | None = None
    node_secret: str | None = field(default=None, repr=False)
    joined_as: dict[str, str] | None = None
    init_done: bool = False
    last_id: int = 0
    members: dict[str, NodeInfo] = field(default_factory=dict)
    restart_pending: bool = False

    @property
    def node(self) -> tuple[str, str] | None:
        if self.node_id and self.node_secret:
            return self.node_id, self.node_secret
        return None

    @staticmethod
    def journal_path(path: Path) -> Path:
        return path.with_name(path.name + ".journal")

    @classmethod
    def load(cls, path: Path, context_uri: str) -> AgentState:
        """The saved state with its journal replayed, or a fresh state if there is
        none; refuses another context's."""
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls(context_uri)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise AgentError(f"agent state {path} is unreadable ({exc}); move it away") from None
        if raw.get("context_uri") != context_uri:
            raise AgentError(
                f"agent state {path} belongs to context {raw.get('context_uri')}, "
                f"not {context_uri}; remove it or pass another --state"
            )
        try:
            state = cls(
                context_uri=context_uri,
                node_id=raw.get("node_id"),
                node_secret=raw.get("node_secret"),
                joined_as=raw.get("joined_as"),
                init_done=bool(raw.get("init_done")),
                last_id=int(raw.get("last_id", 0)),
                members={m["node_id"]: NodeInfo.model_validate(m) for m in raw.get("members", [])},
                restart_pending=bool(raw.get("restart_pending")),
            )
            state._replay(cls.journal_path(path))
        except (TypeError, ValueError, KeyError) as exc:
            raise AgentError(f"agent state {path} is malformed ({exc}); move it away") from None
        return state

    def _replay(self, journal: Path) -> None:
        """Apply the journal's changes. Each sets absolute values, so replaying changes
        the saved file already holds is harmless; a torn last line (a crash while it
        was written) is a change that was never made."""
        try:
            lines = journal.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return
        for line in lines:
            try:
                change = json.loads(line)
            except json.JSONDecodeError:
                break
            self.apply_change(change)

    def apply_change(self, change: Mapping[str, Any]) -> None:
        if "add" in change:
            node = NodeInfo.model_validate(change["add"])
            self.members[node.node_id] = node
        if "delete" in change:
            self.members.pop(change["delete"], None)
        if "last_id" in change:
            self.last_id = int(change["last_id"])
        if "restart_pending" in change:
            self.restart_pending = bool(change["restart_pending"])

    def save(self, path: Path) -> None:
        """Write the whole state atomically (a crash leaves the old or the new file,
        whole), then drop the journal it supersedes."""
        raw: dict[str, Any] = {
            "version": 1,
            "context_uri": self.context_uri,
            "node_id": self.node_id,
            "node_secret": self.node_secret,
            "joined_as": self.joined_as,
            "init_done": self.init_done,
            "last_id": self.last_id,
            "members": [m.model_dump() for m in self.members.values()],
            "restart_pending": self.restart_pending,
        }
        private_dir(path.parent)
        write_private(path, json.dumps(raw, indent=1))
        _fsync_dir(path.parent)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.journal_path(path))

    def record(self, path: Path, change: Mapping[str, Any]) -> None:
        """Apply ``change`` and append it, synced, to the journal: one short line per
        applied entry instead of rewriting every member (10,000 members are ~3 MB)."""
        self.apply_change(change)
        line = json.dumps(change, separators=(",", ":")) + "\n"
        fd = os.open(self.journal_path(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
