"""Paper 001's Figure 4 set up: the real broker and real agents on 127.0.0.1.

:class:`RecontextRig` starts ``elasticsite broker`` (its own process, HTTPS, a fresh
state directory and admin token) on a free port of 127.0.0.1, creates a context, and
starts two real ``elasticsite agent`` processes polling every ``period``
(``--period``), whose add and restart scripts note when they ran: a node has applied
an entry when its restart scripts have run after the entry's add scripts. The
measurement itself is :mod:`.paper001_broker`'s. Nothing here touches the broker
beyond its documented routes; every process is stopped on the way out.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from elasticsite.context.client import AdminClient, ContextError
from elasticsite.context.models import ContextCreated
from elasticsite.files import write_private

__all__ = [
    "REAL_AGENTS",
    "START_TIMEOUT",
    "RealAgent",
    "RecontextError",
    "RecontextPlan",
    "RecontextRig",
    "identity",
]

REAL_AGENTS = 2
"""Real agent processes among the nodes (the smallest cluster is only them)."""
PORT_RETRIES = 3
"""Times the broker is started again on another port when its free port was taken
between the probe and the broker's bind (other tests run in parallel)."""
START_TIMEOUT = 90.0
"""Seconds the broker and the agents get to start on a busy machine."""
_RECORD = """#!/bin/sh
# Notes when this node applied an entry: the entry id, then the time (add), or the
# time its restart scripts ran (restart).
echo "{kind} ${{ELASTICSITE_ENTRY_ID:--}} $(date +%s.%N)" >>"$ELASTICSITE_AGENT_ROOT/applied.log"
"""


class RecontextError(OSError):
    """The measurement could not run: the broker or an agent did not start or answer,
    or a node never applied an entry. One line, naming the log to read."""


@dataclass(frozen=True, slots=True)
class RecontextPlan:
    """What to measure: cluster ``sizes`` (ascending, at least :data:`REAL_AGENTS`),
    ``trials`` joins at each, agents polling every ``period`` seconds; with
    ``long_poll``, the in-process agents then long poll and ``long_sizes`` are measured
    again (largest first, the cluster shrinking)."""

    sizes: tuple[int, ...]
    trials: int
    period: float
    long_poll: bool = True
    long_sizes: tuple[int, ...] = ()
    timeout: float = 60.0
    """Seconds beyond the period a node may take to apply an entry before the
    measurement stops with an error."""

    def __post_init__(self) -> None:
        if not self.sizes or list(self.sizes) != sorted(set(self.sizes)):
            raise ValueError(f"sizes must be ascending and distinct, got {self.sizes}")
        if self.sizes[0] < REAL_AGENTS or self.sizes[-1] > 1024:
            raise ValueError(f"sizes must lie in {REAL_AGENTS}..1024, got {self.sizes}")
        if not 1 <= self.trials <= 20:
            raise ValueError(f"trials must be in 1..20, got {self.trials}")
        if not 0.1 <= self.period <= 120:
            raise ValueError(f"the polling period must be in 0.1..120 s, got {self.period:g}")
        if any(n > self.sizes[-1] or n < 1 for n in self.long_sizes):
            raise ValueError(f"long_sizes must lie in 1..{self.sizes[-1]}")


def ssh_key(seed: str) -> str:
    """A real ed25519 public key line, the same for the same seed."""
    private = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(seed.encode()).digest())
    line = private.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
    return f"{line} root@{seed}"


def identity(kind: str, i: int) -> dict[str, str]:
    """Node ``i`` of a kind (``r`` real agent, ``n`` in-process, ``j`` joiner): unique
    names and a unique address in 10.0.0.0/8 (the broker refuses clashes)."""
    block = {"r": 0, "n": 1, "j": 2}[kind]
    short = f"{kind}{i:04d}"
    return {
        "short_hostname": short,
        "hostname": f"{short}.fig4.example",
        "address": f"10.{block}.{i // 250}.{i % 250 + 1}",
        "ssh_host_key": ssh_key(short),
        "data": "paper001-fig4",
    }


def _port_taken(log: Path) -> bool:
    """Whether the broker's log says its port was taken before it could listen."""
    try:
        return "address already in use" in log.read_text(errors="replace").lower()
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Process:
    """A child process with its stderr in a log file; stopped on the way out."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with log.open("wb") as err:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                env=env, start_new_session=True,
            )  # fmt: skip

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class RealAgent:
    """One ``elasticsite agent`` process and the log its scripts keep."""

    def __init__(self, work: Path, ctx: ContextCreated, ca: str, period: float, i: int) -> None:
        self.root = work / f"agent{i}"
        self.root.mkdir(mode=0o700)
        userdata = write_private(
            self.root / "userdata.json",
            json.dumps({"context_uri": ctx.uri, "context_key": ctx.key,
                        "context_secret": ctx.secret, "context_ca": ca}),
        )  # fmt: skip
        me = identity("r", i)
        argv = [
            sys.executable, "-m", "elasticsite", "agent", "--userdata", str(userdata),
            "--root", str(self.root), "--scripts", str(work / "scripts"),
            "--period", repr(period), "--short-hostname", me["short_hostname"],
            "--hostname", me["hostname"], "--address", me["address"],
            "--ssh-host-key", me["ssh_host_key"], "--data", me["data"], "-q",
        ]  # fmt: skip
        env = {**os.environ, "ELASTICSITE_FIREWALL": "off"}
        self.process = _Process(argv, self.root / "agent.log", env)
        self._read = 0
        self._applied: dict[int, float] = {}
        self._pending: list[int] = []

    def applied(self, entry: int) -> float | None:
        """When (``time.time()``) this agent had applied ``entry``, or None yet."""
        self._scan()
        return self._applied.get(entry)

    def last_applied(self) -> int:
        self._scan()
        return max(self._applied, default=0)

    def _scan(self) -> None:
        path = self.root / "applied.log"
        try:
            with path.open("rb") as f:
                f.seek(self._read)
                chunk = f.read()
        except FileNotFoundError:
            return
        end = chunk.rfind(b"\n") + 1
        self._read += end
        for line in chunk[:end].decode().splitlines():
            kind, entry, at = line.split()
            if kind == "add":
                self._pending.append(int(entry))
            elif kind == "restart":
                for e in self._pending:
                    self._applied[e] = float(at)
                self._pending.clear()


class RecontextRig:
    """The broker, the real agents and the in-process agents of one measurement.

    Start it early (:meth:`start_broker`, then :meth:`start_agents`: both return at
    once and the processes start meanwhile), then measure
    (:func:`~.paper001_broker.measure`); :meth:`close` stops everything. A context
    manager does the closing.
    """

    def __init__(self, work: Path, plan: RecontextPlan, seed: int) -> None:
        self.work = work
        self.plan = plan
        self.rng = random.Random(seed)
        self.broker: _Process | None = None
        self.agents: list[RealAgent] = []
        self.port = 0
        self.token = ""
        self.ctx: ContextCreated | None = None

    def __enter__(self) -> RecontextRig:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def cert(self) -> Path:
        return self.work / "broker" / "broker.crt"

    def start_broker(self) -> None:
        """Start ``elasticsite broker`` on a free port of 127.0.0.1 (returns at once)."""
        if not self.token:
            self.token = hashlib.sha256(f"{self.rng.random()}{time.time()}".encode()).hexdigest()
        token_file = write_private(self.work / "admin.token", self.token)
        self.port = _free_port()
        self.broker = _Process(
            [sys.executable, "-m", "elasticsite", "broker", "--state-dir",
             str(self.work / "broker"), "--port", str(self.port),
             "--admin-token-file", str(token_file)],
            self.work / "broker.log",
        )  # fmt: skip

    def _wait_broker(self) -> AdminClient:
        assert self.broker is not None
        deadline = time.monotonic() + START_TIMEOUT
        retries = PORT_RETRIES
        while True:
            if not self.broker.alive():
                if retries and _port_taken(self.broker.log):
                    retries -= 1  # another process took the free port first: a new one
                    self.start_broker()
                    continue
                raise RecontextError(f"the broker exited; see {self.broker.log}")
            if self.cert.exists():
                admin = AdminClient(self.url, self.token, ca=self.cert, timeout=5)
                try:
                    admin.list()
                    return admin
                except ContextError:
                    admin.close()
            if time.monotonic() > deadline:
                raise RecontextError(f"the broker did not answer in time; see {self.broker.log}")
            time.sleep(0.1)

    def start_agents(self) -> None:
        """Wait for the broker, create the context and start the real agents (which
        return at once and join meanwhile)."""
        with self._wait_broker() as admin:
            self.ctx = admin.create("paper001-fig4")
        scripts = self.work / "scripts"
        for kind in ("add", "restart"):
            (scripts / kind).mkdir(parents=True)
            path = scripts / kind / "90-record"
            path.write_text(_RECORD.format(kind=kind))
            path.chmod(0o700)
        ca = self.cert.read_text()
        self.agents = [
            RealAgent(self.work, self.ctx, ca, self.plan.period, i + 1) for i in range(REAL_AGENTS)
        ]

    def close(self) -> None:
        for agent in self.agents:
            agent.process.stop()
        if self.broker is not None:
            self.broker.stop()
