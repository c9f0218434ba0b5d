"""The broker's state: SQLite (WAL) on disk, and an in-memory copy that answers reads.

Every change is committed to SQLite before memory is updated and before the broker
answers, so a restart loses nothing a client was told. Reads never touch the
database: each context keeps its recent entries as pre-serialised JSON, its members,
and the digests of its credentials in memory (:mod:`elasticsite.context.memory`),
because thousands of agents long-poll the same few contexts and each answer must
cost next to nothing.

Secrets are stored only as SHA-256 digests. History is bounded: each context keeps
its last ``history`` entries; a caller further behind gets a snapshot of the current
members instead (see :meth:`ContextState.updates_body`). Replace-on-rejoin challenges
live in memory only: a restarted broker issues new ones.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from elasticsite.context.memory import ContextState, Member, digest
from elasticsite.context.models import ContextPolicy, NodeIn
from elasticsite.context.validation import describe_errors
from elasticsite.files import private_dir
from elasticsite.sqlite import connect
from elasticsite.web.credentials import new_secret

__all__ = ["ContextState", "Member", "Store", "digest", "new_secret"]

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS contexts (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created_at REAL NOT NULL,
    key_digest BLOB NOT NULL,
    secret_digest BLOB NOT NULL,
    last_id INTEGER NOT NULL DEFAULT 0,
    policy TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS nodes (
    context_id TEXT NOT NULL,
    id TEXT NOT NULL,
    secret_digest BLOB NOT NULL,
    info TEXT NOT NULL,
    join_entry INTEGER NOT NULL,
    left_entry INTEGER,
    PRIMARY KEY (context_id, id)
);
CREATE TABLE IF NOT EXISTS entries (
    context_id TEXT NOT NULL,
    id INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (context_id, id)
) WITHOUT ROWID;
"""

SCHEMA_VERSION = 1
"""``PRAGMA user_version``: 1 since contexts refuse loopback and link-local addresses
unless their policy allows them (contexts created before keep taking them)."""

_RECORD_FIELDS = set(NodeIn.model_fields)
"""What a member's stored record holds of a join (never its host key proof)."""

LOCK_TIMEOUT = 5.0
"""Seconds to wait for a lock on the file (the broker is its only user)."""


def _stored_policy(cid: str, stored: str) -> ContextPolicy:
    """A context's stored rules. Rules an older broker took but today's checks refuse
    (a domain with a numeric label, say) are kept as stored, and logged: they can
    only narrow who may join, and the broker must start."""
    try:
        return ContextPolicy.model_validate_json(stored)
    except ValidationError as exc:
        log.warning(
            "context %s: its stored rules do not pass today's checks (%s); kept as stored",
            cid,
            describe_errors(exc.errors()),
        )
        return ContextPolicy.model_construct(**json.loads(stored))


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class Store:
    """Contexts, nodes and entries, durable in SQLite and served from memory.

    Not thread-safe: the broker calls it from its event loop only.
    """

    def __init__(self, path: Path, *, history: int = 10_000) -> None:
        if history < 1:
            raise ValueError(f"history must keep at least 1 entry, not {history}")
        self.history = history
        private_dir(path.parent)
        self._db = connect(
            path, synchronous="FULL", busy_timeout=LOCK_TIMEOUT, check_same_thread=False
        )
        with self._db.transaction():
            for statement in filter(str.strip, _SCHEMA.split(";")):
                self._db.execute(statement)
        self._migrate()
        self.contexts: dict[str, ContextState] = {}
        self._load()

    def close(self) -> None:
        self._db.close()

    def _migrate(self) -> None:
        """Bring a database written by an older broker up to this schema.

        Contexts created before version 1 took loopback and link-local addresses: they
        keep doing so (their members, the embedded site's, may live on loopback), and
        the log names them; new contexts refuse such addresses unless told otherwise.
        """
        db = self._db
        with db.transaction():
            columns = {row[1] for row in db.execute("PRAGMA table_info(contexts)")}
            if "policy" not in columns:
                db.execute("ALTER TABLE contexts ADD COLUMN policy TEXT NOT NULL DEFAULT '{}'")
            if db.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
                return
            for cid, policy in db.execute("SELECT id, policy FROM contexts").fetchall():
                kept = _stored_policy(cid, policy).model_copy(
                    update={"allow_loopback": True, "allow_link_local": True}
                )
                db.execute(
                    "UPDATE contexts SET policy = ? WHERE id = ?",
                    (kept.model_dump_json(exclude_defaults=True), cid),
                )
                log.warning(
                    "context %s predates the refusal of loopback and link-local addresses: "
                    "it keeps taking them (recreate it to refuse them)",
                    cid,
                )
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _load(self) -> None:
        db = self._db
        for cid, name, created, kd, sd, last, policy in db.execute(
            "SELECT id, name, created_at, key_digest, secret_digest, last_id, policy FROM contexts"
        ):
            loaded = ContextState(cid, name, created, kd, sd, last, last + 1)
            loaded.policy = _stored_policy(cid, policy)
            self.contexts[cid] = loaded
        for cid, nid, sd, info, join_entry, left_entry in db.execute(
            "SELECT context_id, id, secret_digest, info, join_entry, left_entry FROM nodes "
            "ORDER BY context_id, coalesce(left_entry, join_entry)"
        ):
            ctx = self.contexts.get(cid)
            if ctx is None:
                continue
            if left_entry is not None:
                ctx.departed[nid] = (sd, left_entry)
                continue
            ctx.members[nid] = self._member(nid, sd, json.loads(info), join_entry)
        for cid, eid, body in db.execute(
            "SELECT context_id, id, body FROM entries ORDER BY context_id, id"
        ):
            ctx = self.contexts.get(cid)
            if ctx is None:
                continue
            if not ctx.entries:
                ctx.first_id = eid
            ctx.entries.append(body.encode())
        for state in self.contexts.values():
            ordered = sorted(state.members.values(), key=lambda m: m.join_entry)
            state.members = {}
            for member in ordered:
                state.add_member(member)

    @staticmethod
    def _member(node_id: str, sd: bytes, info: dict[str, object], join_entry: int) -> Member:
        info_json = _dumps(info)
        join_json = b'{"id":%d,"op":"join","node":%s}' % (join_entry, info_json)
        return Member(node_id, sd, info, info_json, join_entry, join_json)

    # --- contexts -------------------------------------------------------------------

    def create_context(
        self, name: str, policy: ContextPolicy | None = None
    ) -> tuple[ContextState, str, str]:
        """A new context and its key and secret (returned once, stored as digests)."""
        cid = secrets.token_hex(8)
        while cid in self.contexts:
            cid = secrets.token_hex(8)
        key, secret = new_secret(), new_secret()
        ctx = ContextState(cid, name, time.time(), digest(key), digest(secret))
        ctx.policy = policy or ContextPolicy()
        with self._db.transaction():
            self._db.execute(
                "INSERT INTO contexts (id, name, created_at, key_digest, secret_digest, policy) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    cid,
                    name,
                    ctx.created_at,
                    ctx.key_digest,
                    ctx.secret_digest,
                    ctx.policy.model_dump_json(exclude_defaults=True),
                ),
            )
        self.contexts[cid] = ctx
        return ctx, key, secret

    def delete_context(self, cid: str) -> bool:
        if cid not in self.contexts:
            return False
        with self._db.transaction():
            for table, column in (("entries", "context_id"), ("nodes", "context_id")):
                self._db.execute(f"DELETE FROM {table} WHERE {column} = ?", (cid,))
            self._db.execute("DELETE FROM contexts WHERE id = ?", (cid,))
        del self.contexts[cid]
        return True

    # --- membership changes -----------------------------------------------------------

    def join(
        self, ctx: ContextState, node: NodeIn, replacing: Iterable[str] = ()
    ) -> tuple[str, str, int]:
        """Record a join, after a leave of each member in ``replacing`` (ids).

        Admission (:func:`elasticsite.context.admission.admit`) has decided which
        members a join replaces; the store only records it. Returns the new node's id,
        its secret, and the id of its join entry.
        """
        node_id = secrets.token_hex(8)
        while node_id in ctx.members or node_id in ctx.departed:
            node_id = secrets.token_hex(8)
        secret = new_secret()
        gone = [ctx.members[nid] for nid in replacing]
        entry_id = self._change(ctx, gone, (node_id, digest(secret), node))
        return node_id, secret, entry_id

    def update(self, ctx: ContextState, node_id: str, node: NodeIn) -> int:
        """Record ``leave`` of a member's old record and ``join`` of its new one."""
        member = ctx.members[node_id]
        return self._change(ctx, [member], (node_id, member.secret_digest, node))

    def leave(self, ctx: ContextState, members: Iterable[Member]) -> int:
        """Record a ``leave`` for each member given; returns the last entry's id."""
        return self._change(ctx, list(members), None)

    def _change(
        self,
        ctx: ContextState,
        gone: list[Member],
        joining: tuple[str, bytes, NodeIn] | None,
    ) -> int:
        entry_id = ctx.last_id
        new_entries: list[tuple[int, bytes]] = []
        left: list[tuple[Member, int]] = []
        for member in gone:
            entry_id += 1
            left.append((member, entry_id))
            new_entries.append(
                (entry_id, b'{"id":%d,"op":"leave","node":%s}' % (entry_id, member.info_json))
            )
        new_member: Member | None = None
        if joining is not None:
            node_id, sd, node = joining
            entry_id += 1
            info: dict[str, object] = {
                "node_id": node_id,
                **node.model_dump(include=_RECORD_FIELDS),
            }
            info["joined_at"] = time.time()
            new_member = self._member(node_id, sd, info, entry_id)
            new_entries.append((entry_id, new_member.join_json))
        cutoff = entry_id - self.history  # entries up to here fall out of the history
        db = self._db
        with db.transaction():
            db.execute("UPDATE contexts SET last_id = ? WHERE id = ?", (entry_id, ctx.id))
            db.executemany(
                "INSERT INTO entries (context_id, id, body) VALUES (?, ?, ?)",
                [(ctx.id, eid, body.decode()) for eid, body in new_entries],
            )
            db.executemany(
                "UPDATE nodes SET left_entry = ? WHERE context_id = ? AND id = ?",
                [(eid, ctx.id, m.node_id) for m, eid in left],
            )
            if new_member is not None:
                db.execute(
                    "INSERT OR REPLACE INTO nodes "
                    "(context_id, id, secret_digest, info, join_entry, left_entry) "
                    "VALUES (?, ?, ?, ?, ?, NULL)",
                    (
                        ctx.id,
                        new_member.node_id,
                        new_member.secret_digest,
                        new_member.info_json.decode(),
                        entry_id,
                    ),
                )
            if cutoff >= ctx.first_id:
                db.execute("DELETE FROM entries WHERE context_id = ? AND id <= ?", (ctx.id, cutoff))
                db.execute(
                    "DELETE FROM nodes WHERE context_id = ? AND left_entry <= ?",
                    (ctx.id, cutoff),
                )
        # Committed: now the in-memory view follows.
        for member, eid in left:
            ctx.drop_member(member)
            if new_member is None or member.node_id != new_member.node_id:
                ctx.departed[member.node_id] = (member.secret_digest, eid)
        if new_member is not None:
            ctx.add_member(new_member)
        if not ctx.entries:
            ctx.first_id = ctx.last_id + 1
        ctx.entries.extend(body for _, body in new_entries)
        ctx.last_id = entry_id
        if cutoff >= ctx.first_id:
            del ctx.entries[: cutoff - ctx.first_id + 1]
            ctx.first_id = cutoff + 1
            while ctx.departed:
                oldest = next(iter(ctx.departed))
                if ctx.departed[oldest][1] > cutoff:
                    break
                del ctx.departed[oldest]
        ctx.cache.clear()
        return entry_id
