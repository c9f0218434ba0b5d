"""The recontextualization agent: keeps one node in step with its context's membership.

The agent joins the context named in its user data, then loops: it asks the broker
for the entries it has not applied yet (long polling by default, or every
``period`` seconds as in paper 001), applies them in order by running the
administrator's scripts (``init/`` once ever, ``add/`` per node joined, ``delete/``
per node departed, ``restart/`` once after each batch) and records its progress.

Restart semantics. Progress is recorded after every entry (one synced line
appended to a journal; the whole state file is rewritten atomically, temporary
file + fsync + rename, only when the journal grows as long as the membership), so
a crash loses at most the entry being applied, whose scripts run again after the
restart: scripts must be idempotent, and the shipped ones are. Entries saved as
applied are never run again. Restart scripts run once after a batch; a crash
before they finish runs them again at the next start. A snapshot is applied as a
diff against the known members, and until it is complete the state asks for a new
snapshot (``since=0``), so a crash in the middle only finishes the diff.
``init/`` runs once per state file, before the first join.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from elasticsite.context.client import ContextError
from elasticsite.context.models import Entry, JoinResult, NodeInfo, Updates

__all__ = [
    "DEFAULT_SCRIPTS",
    "SCRIPT_KINDS",
    "Agent",
    "AgentError",
    "AgentSettings",
    "AgentState",
    "Backoff",
    "BrokerLink",
    "ContextRef",
    "Identity",
    "ScriptRunner",
    "Step",
    "discover_identity",
    "load_userdata",
    "plan",
]

log = logging.getLogger(__name__)

SCRIPT_KINDS = ("init", "add", "delete", "restart")
DEFAULT_SCRIPTS = Path(__file__).with_name("scripts")
USERDATA_ENV = "ELASTICSITE_USERDATA"
SSH_KEY_FILES = ("ssh_host_ed25519_key.pub", "ssh_host_ecdsa_key.pub", "ssh_host_rsa_key.pub")
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


class AgentError(Exception):
    """The agent cannot go on (bad user data, rejected credentials, a strict script
    failed); the message says what to fix."""


class BrokerLink(Protocol):
    """What the agent needs from the broker: :class:`~elasticsite.context.client.NodeClient`.

    Methods raise :class:`~elasticsite.context.client.ContextError` (``status`` None
    when the broker gave no answer). Updates, update and leave use the node
    credential held in ``node_id``/``node_secret`` once set, the context's before.
    """

    node_id: str | None
    node_secret: str | None

    def join(self, node: Mapping[str, Any]) -> JoinResult: ...
    def update(self, node: Mapping[str, Any]) -> int: ...
    def leave(self) -> int: ...
    def updates(self, since: int, wait: float = 0) -> Updates: ...


def _retryable(exc: ContextError) -> bool:
    """No answer, or the broker's own failure: worth trying again later."""
    return exc.status is None or exc.status >= 500


# --- configuration -------------------------------------------------------------------


@dataclass(frozen=True)
class ContextRef:
    """Which context to join and how to reach it (never logged: holds the secret)."""

    uri: str
    key: str
    secret: str = field(repr=False)
    ca_pem: str | None = field(default=None, repr=False)


def load_userdata(path: Path) -> ContextRef:
    """Read the context from a user data JSON file (keys of docs/recontext-api.md)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AgentError(f"cannot read user data {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AgentError(f"user data {path} is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise AgentError(f"user data {path} must be a JSON object")
    missing = [k for k in ("context_uri", "context_key", "context_secret") if not raw.get(k)]
    if missing:
        raise AgentError(f"user data {path} lacks {', '.join(missing)}")
    bad = [k for k in ("context_uri", "context_key", "context_secret", "context_ca")
           if k in raw and not isinstance(raw[k], str)]  # fmt: skip
    if bad:
        raise AgentError(f"user data {path}: {', '.join(bad)} must be strings")
    return ContextRef(
        raw["context_uri"], raw["context_key"], raw["context_secret"], raw.get("context_ca")
    )


@dataclass(frozen=True)
class Identity:
    """What this node tells the broker about itself."""

    short_hostname: str
    hostname: str
    address: str
    ssh_host_key: str
    data: str = ""

    def body(self) -> dict[str, str]:
        return {
            "short_hostname": self.short_hostname,
            "hostname": self.hostname,
            "address": self.address,
            "ssh_host_key": self.ssh_host_key,
            "data": self.data,
        }


def _route_address(uri: str) -> str:
    """The local address on the route to the broker: the one peers can reach us at,
    found by connecting a UDP socket (which sends nothing)."""
    parts = urlsplit(uri)
    host, port = parts.hostname or "127.0.0.1", parts.port or 443
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect(sockaddr)
            return str(sock.getsockname()[0])
    except OSError as exc:
        raise AgentError(
            f"cannot find this node's address towards {host}: {exc}; pass --address"
        ) from None


def read_ssh_key(root: Path, given: str | None) -> str:
    """The SSH public host key: ``given`` (a key line or a .pub file), else the first
    of the usual host key files under ``root``/etc/ssh."""
    candidates = [root / "etc" / "ssh" / name for name in SSH_KEY_FILES]
    if given is not None:
        if given.startswith(("ssh-", "ecdsa-", "sk-")) or not Path(given).is_file():
            return given.strip()
        candidates = [Path(given)]
    for path in candidates:
        if path.is_file():
            try:
                return path.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise AgentError(f"cannot read SSH host key {path}: {exc}") from None
    raise AgentError(f"no SSH host key in {root / 'etc' / 'ssh'}; pass --ssh-host-key")


def discover_identity(
    ref: ContextRef,
    root: Path,
    *,
    short_hostname: str | None = None,
    hostname: str | None = None,
    address: str | None = None,
    ssh_host_key: str | None = None,
    data: str = "",
) -> Identity:
    """This node's identity; every field may be given instead of discovered."""
    host = hostname or socket.getfqdn() or socket.gethostname()
    short = short_hostname or (hostname or socket.gethostname()).split(".")[0]
    return Identity(
        short,
        host,
        address or _route_address(ref.uri),
        read_ssh_key(root, ssh_host_key),
        data,
    )


@dataclass(frozen=True)
class AgentSettings:
    """Everything the agent needs to run; built by the CLI."""

    context: ContextRef
    identity: Identity
    scripts: Path = DEFAULT_SCRIPTS
    state: Path = Path("/var/lib/elasticsite/agent.json")
    root: Path = Path("/")
    period: float = 0.0
    wait: float = 30.0
    leave: bool = True
    strict: bool = False
    once: bool = False
    script_timeout: float = 120.0


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
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(raw, out, indent=1)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
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
            n = step.node
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


# --- retrying ------------------------------------------------------------------------


class Backoff:
    """Exponential delays, capped, with jitter so a fleet does not retry in step."""

    def __init__(
        self, base: float = 0.5, cap: float = 30.0, rng: random.Random | None = None
    ) -> None:
        self.base = base
        self.cap = cap
        self.attempts = 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        """The next delay: uniform in [d/2, d], d = min(cap, base * 2**attempts)."""
        ceiling = min(self.cap, self.base * 2**self.attempts)
        self.attempts = min(self.attempts + 1, 62)
        return self._rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempts = 0


# --- the agent -----------------------------------------------------------------------


class _Interrupted(BaseException):
    """Raised by the signal handler to cut a network wait or a sleep short."""


class Agent:
    """One node's agent. :meth:`run` returns the process exit code."""

    journal_slack = 100
    """Journal lines allowed beyond the membership's size before a full rewrite."""

    def __init__(
        self,
        settings: AgentSettings,
        link: BrokerLink,
        *,
        sleep: Callable[[float], None] = time.sleep,
        backoff: Backoff | None = None,
    ) -> None:
        self.settings = settings
        self.link = link
        self.state = AgentState.load(settings.state, settings.context.uri)
        link.node_id, link.node_secret = self.state.node_id, self.state.node_secret
        self.runner = ScriptRunner(
            settings.scripts,
            context_uri=settings.context.uri,
            root=settings.root,
            self_hostname=settings.identity.hostname,
            timeout=settings.script_timeout,
            strict=settings.strict,
        )
        self._sleep = sleep
        self._backoff = backoff or Backoff()
        self._stop = False
        self._interruptible = False
        self._journaled = 0

    # -- signals

    def request_stop(self, signum: int = signal.SIGTERM, _frame: FrameType | None = None) -> None:
        """Signal handler: stop after the current entry; cut a wait short at once."""
        log.info("received %s: stopping", signal.Signals(signum).name)
        self._stop = True
        if self._interruptible:
            self._interruptible = False
            raise _Interrupted

    @contextlib.contextmanager
    def _waiting(self) -> Iterator[None]:
        """A stretch (network wait, sleep) that a stop request may interrupt."""
        if self._stop:
            raise _Interrupted
        self._interruptible = True
        try:
            yield
        finally:
            self._interruptible = False

    def _pause(self, seconds: float) -> None:
        if seconds > 0:
            with self._waiting():
                self._sleep(seconds)

    def _retry_later(self, what: str, exc: ContextError) -> None:
        delay = self._backoff.next()
        log.warning("%s: %s; retrying in %.1f s", what, exc.detail, delay)
        self._pause(delay)

    # -- main loop

    def run(self) -> int:
        """Join, then apply updates until stopped (or caught up, with ``once``)."""
        handlers = {s: signal.signal(s, self.request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            try:
                self._start()
                self._loop()
            except _Interrupted:
                pass
            if self.state.restart_pending:
                self._restart()
        finally:
            for s, h in handlers.items():
                signal.signal(s, h)
        if self._stop and self.settings.leave and not self.settings.once:
            self._leave()
        return 0

    def _start(self) -> None:
        if not self.state.init_done:
            log.info("first start: running init scripts")
            self.runner.run("init")
            self.state.init_done = True
            self._save()
        if self.state.restart_pending:  # the last run stopped before its restart scripts
            self._restart()
        self._ensure_joined()

    def _loop(self) -> None:
        s = self.settings
        while not self._stop:
            started = time.monotonic()
            wait = 0.0 if (s.period > 0 or s.once) else s.wait
            updates = self._fetch(wait)
            if updates.entries:
                self._apply(updates)
            elif s.once:
                return
            if s.period > 0:
                self._pause(s.period - (time.monotonic() - started))
            elif not updates.entries and time.monotonic() - started < wait / 2:
                self._pause(min(1.0, wait))  # a long poll answered early and empty: no spin

    def _fetch(self, wait: float) -> Updates:
        """One updates request, retried until it answers; handles 401 and 409."""
        while True:
            try:
                with self._waiting():
                    updates = self.link.updates(self.state.last_id, wait)
                self._backoff.reset()
                return updates
            except ContextError as exc:
                if _retryable(exc):
                    self._retry_later("broker unavailable", exc)
                elif exc.status == 401:
                    log.warning("broker refused this node's credential: joining again")
                    self._forget_node()
                    self._ensure_joined()
                elif exc.status == 409:
                    log.warning("broker has no entry %d: resynchronising", self.state.last_id)
                    self.state.last_id = 0
                    self._save()
                else:
                    raise AgentError(f"broker refused the updates request: {exc}") from None

    def _forget_node(self) -> None:
        self.state.node_id = self.state.node_secret = None
        self.state.joined_as = None
        self.link.node_id = self.link.node_secret = None
        self._save()

    def _ensure_joined(self) -> None:
        """Join, or update our record if our identity changed since we joined."""
        body = self.settings.identity.body()
        while self.state.node is None or self.state.joined_as != body:
            try:
                with self._waiting():
                    if self.state.node is None:
                        result: JoinResult | None = self.link.join(body)
                    else:
                        self.link.update(body)
                        result = None
            except ContextError as exc:
                if _retryable(exc):
                    self._retry_later("cannot join yet", exc)
                elif exc.status == 401 and self.state.node is not None:
                    self._forget_node()  # removed meanwhile: join afresh
                elif exc.status == 401:
                    raise AgentError(
                        f"broker refused the context key/secret for {self.settings.context.uri}"
                        " (context deleted, or wrong user data)"
                    ) from None
                else:
                    raise AgentError(f"broker refused this node's record: {exc.detail}") from None
                continue
            if result is not None:
                self.state.node_id, self.state.node_secret = result.node_id, result.node_secret
                self.link.node_id, self.link.node_secret = result.node_id, result.node_secret
                log.info(
                    "joined %s as node %s (entry %d)",
                    self.settings.context.uri,
                    result.node_id,
                    result.entry_id,
                )
            else:
                log.info("updated this node's record: its identity changed")
            self.state.joined_as = body
            self._save()
            self._backoff.reset()

    def _apply(self, updates: Updates) -> None:
        """Apply one answer, saving after every step, then run the restart scripts."""
        steps = plan(self.state.members, updates)
        if updates.snapshot:
            log.info(
                "applying a snapshot of %d members (%d changes)", len(updates.entries), len(steps)
            )
            # Until the diff is complete, a restart asks for a new snapshot.
            self._record({"last_id": 0})
        for step in steps:
            self.runner.run(step.op, step)
            change: dict[str, Any] = {"restart_pending": True}
            if step.op == "add":
                change["add"] = step.node.model_dump()
            else:
                change["delete"] = step.node.node_id
            if not updates.snapshot:
                change["last_id"] = step.entry_id
            self._record(change)
            log.info("applied entry %d: %s %s", step.entry_id, step.op, step.node.hostname)
            if self._stop and not updates.snapshot:
                return  # run() runs the restart scripts for what was applied
        last = updates.last_id if updates.snapshot else updates.entries[-1].id
        if last != self.state.last_id:
            self._record({"last_id": last})
        if steps:
            self._restart()

    def _restart(self) -> None:
        self.runner.run("restart")
        self._record({"restart_pending": False})

    def _record(self, change: dict[str, Any]) -> None:
        """Journal one change; rewrite the whole state once the journal has grown
        as long as the membership (so the cost per entry stays constant)."""
        self.state.record(self.settings.state, change)
        self._journaled += 1
        if self._journaled > self.journal_slack + len(self.state.members):
            self._save()

    def _leave(self) -> None:
        if self.state.node is None:
            return
        try:
            self.link.leave()
        except ContextError as exc:
            if exc.status != 404:
                log.warning("could not leave the context: %s", exc.detail)
                return
        log.info("left %s", self.settings.context.uri)
        self._forget_node()

    def _save(self) -> None:
        self.state.save(self.settings.state)
        self._journaled = 0


def configure(
    *,
    userdata: Path | None = None,
    uri: str | None = None,
    key: str | None = None,
    secret: str | None = None,
    ca: Path | None = None,
    root: Path = Path("/"),
    state: Path | None = None,
    scripts: Path = DEFAULT_SCRIPTS,
    short_hostname: str | None = None,
    hostname: str | None = None,
    address: str | None = None,
    ssh_host_key: str | None = None,
    data: str = "",
    period: float = 0.0,
    wait: float = 30.0,
    leave: bool = True,
    strict: bool = False,
    once: bool = False,
    script_timeout: float = 120.0,
) -> AgentSettings:
    """Settings from user data (``userdata``, else ``$ELASTICSITE_USERDATA``) with
    explicit values taking precedence; identity discovered where not given."""
    path = userdata or (Path(os.environ[USERDATA_ENV]) if os.environ.get(USERDATA_ENV) else None)
    base = load_userdata(path) if path is not None else None
    uri = uri or (base.uri if base else None)
    key = key or (base.key if base else None)
    secret = secret or (base.secret if base else None)
    if not (uri and key and secret):
        raise AgentError(
            f"no context given: pass --userdata FILE (or set {USERDATA_ENV}), "
            "or --uri, --key and --secret"
        )
    if ca is not None:
        try:
            ca_pem: str | None = ca.read_text(encoding="utf-8")
        except OSError as exc:
            raise AgentError(f"cannot read CA certificate {ca}: {exc.strerror}") from None
    else:
        ca_pem = base.ca_pem if base else None
    if not scripts.is_dir():
        raise AgentError(f"scripts directory {scripts} does not exist")
    if period < 0 or not 0 <= wait <= 60:
        raise AgentError("--period must be >= 0 and --wait between 0 and 60 seconds")
    context = ContextRef(uri, key, secret, ca_pem)
    identity = discover_identity(
        context,
        root,
        short_hostname=short_hostname,
        hostname=hostname,
        address=address,
        ssh_host_key=ssh_host_key,
        data=data,
    )
    return AgentSettings(
        context=context,
        identity=identity,
        scripts=scripts,
        state=state or root / "var" / "lib" / "elasticsite" / "agent.json",
        root=root,
        period=period,
        wait=wait,
        leave=leave,
        strict=strict,
        once=once,
        script_timeout=script_timeout,
    )


def run_agent(settings: AgentSettings) -> int:
    """Run the agent against the real broker until stopped; returns the exit code."""
    from elasticsite.context.client import NodeClient

    c = settings.context
    try:
        link = NodeClient(c.uri, c.key, c.secret, ca=c.ca_pem)
    except ContextError as exc:
        raise AgentError(exc.detail) from None
    with link:
        return Agent(settings, link).run()
