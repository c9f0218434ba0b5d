"""Paper 001's Figure 4 measured: agents against the real broker on 127.0.0.1.

The recontextualization time (paper 001, IV) runs from the moment a new node sends
its record to the broker until every node of the context has received and applied
it. Here the broker is ``elasticsite broker`` (its own process, HTTPS, a fresh state
directory and admin token, :mod:`.paper001_rig`) and the nodes are of two kinds:

* two real ``elasticsite agent`` processes, polling every ``period`` (``--period``),
  whose scripts note when they applied an entry (:mod:`.paper001_rig`);
* the rest in this process on one event loop (the client library's
  :class:`~elasticsite.context.client.AsyncNodeClient`, each on its own kept-alive
  connection as a real agent is), applying each answer with the agent's own
  :func:`~elasticsite.context.agent.plan` to its membership, polling every ``period``
  at its own phase as the agent's ``--period`` does, or long polling as the agent
  does by default.

The cluster grows through ``sizes``; at each size it settles (every node has applied
every join), then a new node joins ``trials`` times (and leaves after each trial).
Paper 001 polled every 120 s, as the full run does; a shorter period (the quick
run's) is a heavier load on the broker, and the time beyond the period, in seconds,
is what request, apply and scheduling delays add whatever the period. Nothing here
touches the broker beyond its documented routes.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

from elasticsite.context.agent import plan
from elasticsite.context.client import AdminClient, AsyncNodeClient, ContextError
from elasticsite.context.models import NodeInfo
from elasticsite.reproduce.paper001_rig import (
    REAL_AGENTS,
    START_TIMEOUT,
    RecontextError,
    RecontextPlan,
    RecontextRig,
    identity,
)

__all__ = [
    "PAPER_BEYOND",
    "REAL_AGENTS",
    "RecontextError",
    "RecontextPlan",
    "RecontextRig",
    "RecontextTrial",
    "measure",
    "summary_rows",
]

PAPER_BEYOND = 1.0
"""Paper 001: every cluster recontextualized within 1 s of its period (lines 564-565)."""
JOINING = 8
"""Joins in flight at once (over as many kept-alive connections)."""


@dataclass(frozen=True, slots=True)
class RecontextTrial:
    """One join: ``seconds`` from the new node's record sent until the last of the
    ``nodes`` that had to apply it did (``real`` of them real agent processes)."""

    mode: str
    """``periodic`` or ``long poll``."""
    nodes: int
    period: float
    """The polling period (0 for long polls)."""
    seconds: float
    real_seconds: float | None
    """The last real agent's time, when real agents were measured."""
    real: int

    @property
    def beyond(self) -> float:
        """Seconds past the polling period (negative: every node within it)."""
        return self.seconds - self.period


@dataclass(slots=True)
class _Node:
    """An in-process agent: its connection, membership and when it applied entries."""

    client: AsyncNodeClient
    members: dict[str, NodeInfo] = field(default_factory=dict)
    since: int = 0
    applied: dict[int, float] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    busy: bool = False
    """In the middle of a request (its task must not be cancelled)."""
    leaving: bool = False

    async def poll(self, wait: float) -> None:
        """One updates request, applied as the agent applies an answer."""
        for attempt in range(5):
            try:
                updates = await self.client.updates(self.since, wait)
                break
            except ContextError as exc:
                if exc.status is not None or attempt == 4:
                    raise RecontextError(f"an agent's poll failed: {exc}") from None
                await asyncio.sleep(0.1 * 2**attempt)
        for step in plan(self.members, updates):
            if step.op == "add":
                self.members[step.node.node_id] = step.node
            else:
                self.members.pop(step.node.node_id, None)
        if updates.entries:
            now = time.monotonic()
            for e in updates.entries:
                self.applied[e.id] = now
        self.since = (
            updates.last_id if updates.snapshot or not updates.entries else updates.entries[-1].id
        )


def measure(
    rig: RecontextRig, progress: Callable[[str], None] | None = None
) -> list[RecontextTrial]:
    """Run ``rig``'s plan (starting its agents if it has not yet); every trial in order."""
    if rig.ctx is None:
        rig.start_agents()
    return asyncio.run(_Measurement(rig, progress or (lambda _: None)).run())


class _Measurement:
    """The asynchronous part of :meth:`RecontextRig.measure`."""

    def __init__(self, rig: RecontextRig, say: Callable[[str], None]) -> None:
        assert rig.ctx is not None
        self.rig = rig
        self.ctx = rig.ctx
        self.plan = rig.plan
        self.say = say
        self.tls = ssl.create_default_context(cafile=str(rig.cert))
        self.http = httpx.AsyncClient(verify=self.tls, timeout=30)
        """The admin's requests (the broker's metrics). Each node has a client, and a
        connection, of its own: in one shared pool, httpx matches every request to a
        connection by scanning all requests against all connections, which with a
        long poll held per node costs the square of the nodes in this process's CPU."""
        self.nodes: list[_Node] = []
        self.gone: list[_Node] = []
        """Nodes that left: closed once their last poll is over."""
        self.tasks: list[asyncio.Task[None]] = []
        self.stop = asyncio.Event()
        self.joiners = 0
        self.last_entry = 0

    async def run(self) -> list[RecontextTrial]:
        out: list[RecontextTrial] = []
        plan = self.plan
        try:
            await self._wait_real_agents()
            for n in plan.sizes:
                self.say(f"Figure 4: {n} nodes polling every {plan.period:g} s, "
                         f"{plan.trials} joins")  # fmt: skip
                self._poll(await self._grow(n - REAL_AGENTS), periodic=True)
                await self._settled(self.last_entry, real=True)
                for _ in range(plan.trials):
                    out.append(await self._trial("periodic", n))
            if plan.long_poll and plan.long_sizes:
                await self._stop_polling()
                await self._grow(max(plan.long_sizes))
                self._poll(self.nodes, periodic=False)
                for n in sorted(plan.long_sizes, reverse=True):
                    self.say(f"Figure 4: {n} nodes long polling, {plan.trials} joins")
                    await self._shrink(n)
                    for _ in range(plan.trials):
                        out.append(await self._trial("long poll", n))
            return out
        finally:
            await self._stop_polling()
            for node in self.nodes + self.gone:
                await node.client.aclose()
            await self.http.aclose()

    # -- the cluster ---------------------------------------------------------------

    async def _wait_real_agents(self) -> None:
        """Both real agents have joined and applied each other's join."""
        deadline = time.monotonic() + START_TIMEOUT + self.plan.period  # the first learns
        agents = self.rig.agents  # of the second at its next poll
        while True:
            with AdminClient(self.rig.url, self.rig.token, ca=self.tls) as admin:
                last = admin.members(self.ctx.id).last_id
            if last >= REAL_AGENTS and all(a.last_applied() >= last for a in agents):
                self.last_entry = last
                return
            dead = next((a for a in agents if not a.process.alive()), None)
            if dead is not None:
                raise RecontextError(f"a real agent exited; see {dead.process.log}")
            if time.monotonic() > deadline:
                raise RecontextError(
                    f"the real agents did not join in time; see {agents[0].process.log}"
                )
            await asyncio.sleep(0.1)

    def _client(self) -> AsyncNodeClient:
        return AsyncNodeClient(self.ctx.uri, self.ctx.key, self.ctx.secret, ca=self.tls)

    async def _grow(self, count: int) -> list[_Node]:
        """In-process agents join until there are ``count``; returns the new ones.

        Each new agent's first answer would be the same snapshot of the membership
        (all of them have joined by then): one of them fetches it and the others start
        from a copy, where each would have fetched its own (``size`` squared records
        for the broker to send, setting up, not measuring)."""
        if count <= len(self.nodes):
            return []
        gate = asyncio.Semaphore(JOINING)

        async def one(i: int) -> _Node:
            async with gate:
                node = _Node(self._client())
                joined = await node.client.join(identity("n", i))
                self.last_entry = max(self.last_entry, joined.entry_id)
                return node

        new = list(await asyncio.gather(*(one(i) for i in range(len(self.nodes), count))))
        first = new[0]
        await first.poll(0)
        for node in new[1:]:
            node.members, node.since = dict(first.members), first.since
        self.nodes.extend(new)
        return new

    async def _shrink(self, count: int) -> None:
        """In-process agents leave until ``count`` remain (the last joined first)."""
        while len(self.nodes) > count:
            node = self.nodes.pop()
            node.leaving = True
            self.gone.append(node)
            self.last_entry = max(self.last_entry, await node.client.leave())
        await self._settled(self.last_entry, real=False)

    async def _settled(self, entry: int, *, real: bool) -> None:
        """Every node has applied ``entry`` (the cluster is stable)."""
        deadline = time.monotonic() + self.plan.period + self.plan.timeout
        while not self._applied(entry, real, settled=True):
            if time.monotonic() > deadline:
                raise RecontextError(f"the cluster did not settle on entry {entry}")
            await asyncio.sleep(0.02)

    def _applied(self, entry: int, real: bool, settled: bool = False) -> bool:
        if real and any(a.applied(entry) is None for a in self.rig.agents):
            return False
        if settled:
            return all(n.since >= entry for n in self.nodes)
        return all(entry in n.applied for n in self.nodes)

    # -- polling -------------------------------------------------------------------

    def _poll(self, nodes: list[_Node], *, periodic: bool) -> None:
        """Start polling on ``nodes``: every period from a random phase, or long polls."""
        for node in nodes:
            if periodic:
                coro = self._periodic(node, self.rig.rng.uniform(0, self.plan.period))
            else:
                coro = self._long(node)
            node.task = asyncio.create_task(coro)
            self.tasks.append(node.task)

    async def _periodic(self, node: _Node, phase: float) -> None:
        """Poll every period from ``phase`` on, as the agent's ``--period`` does: the
        next poll is a period after the start of the last."""
        period = self.plan.period
        next_at = time.monotonic() + phase
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if self.stop.is_set() or node.leaving:
                return
            started = time.monotonic()
            node.busy = True
            try:
                await self._poll_once(node, 0.0)
            finally:
                node.busy = False
            next_at = started + period

    async def _long(self, node: _Node) -> None:
        """Long polls back to back, as the agent does by default."""
        node.busy = True
        try:
            while not (self.stop.is_set() or node.leaving):
                await self._poll_once(node, 30.0)
        finally:
            node.busy = False

    @staticmethod
    async def _poll_once(node: _Node, wait: float) -> None:
        try:
            await node.poll(wait)
        except RecontextError:
            if not node.leaving:  # a node that left may be refused its last poll
                raise

    async def _stop_polling(self) -> None:
        """Stop every poller between two requests (long polls are woken by one more
        entry), so no connection is left in the middle of an answer."""
        if not self.tasks:
            return
        self.stop.set()
        for node in self.nodes + self.gone:
            if node.task is not None and not node.busy:
                node.task.cancel()  # waiting for its next poll: nothing is in flight
        if any(node.busy for node in self.nodes + self.gone):
            client, _, _, _ = await self._join()
            await client.leave()
            await client.aclose()
        done, pending = await asyncio.wait(self.tasks, timeout=self.plan.period + 40)
        for t in pending:
            t.cancel()
        failed = next((t.exception() for t in done if not t.cancelled() and t.exception()), None)
        for node in self.nodes + self.gone:
            node.task, node.busy = None, False
        self.tasks = []
        self.stop = asyncio.Event()
        if failed is not None:
            raise RecontextError(str(failed)) from failed

    async def _join(self) -> tuple[AsyncNodeClient, int, float, float]:
        """A new node joins; returns its client, its join entry and when its record was
        sent (``time.monotonic()`` and ``time.time()``)."""
        self.joiners += 1
        client = self._client()
        sent, sent_wall = time.monotonic(), time.time()
        joined = await client.join(identity("j", self.joiners))
        return client, joined.entry_id, sent, sent_wall

    async def _waiting_polls(self) -> int:
        """Long polls the broker holds open now (its ``/metrics``, for the admin)."""
        r = await self.http.get(
            f"{self.rig.url}/metrics", headers={"Authorization": f"Bearer {self.rig.token}"}
        )
        r.raise_for_status()
        for line in r.text.splitlines():
            if line.startswith("elasticsite_broker_waiting_polls "):
                return int(float(line.split()[1]))
        raise RecontextError("the broker's /metrics shows no waiting polls")

    async def _ready(self, real: bool) -> None:
        """Before a join: periodic pollers are at a random point of their period (a
        trial starts a random time after the last); long pollers are all waiting."""
        if real:
            await asyncio.sleep(self.rig.rng.uniform(0, self.plan.period))
            return
        deadline = time.monotonic() + self.plan.timeout
        while await self._waiting_polls() < len(self.nodes):
            if time.monotonic() > deadline:
                raise RecontextError("the agents' long polls did not all reach the broker")
            await asyncio.sleep(0.01)

    async def _trial(self, mode: str, n: int) -> RecontextTrial:
        """One new node joins; wait until every node has applied it; it leaves."""
        real = mode == "periodic"
        await self._ready(real)
        client, entry, sent, sent_wall = await self._join()
        deadline = time.monotonic() + self.plan.period + self.plan.timeout
        while not self._applied(entry, real):
            if time.monotonic() > deadline:
                raise RecontextError(f"{n} nodes: entry {entry} was not applied by all in time")
            await asyncio.sleep(0.005)
        seconds = max((node.applied[entry] for node in self.nodes), default=sent) - sent
        real_seconds = None
        if real:
            walls = [a.applied(entry) for a in self.rig.agents]
            real_seconds = max(w for w in walls if w is not None) - sent_wall
        self.last_entry = max(self.last_entry, await client.leave())
        await client.aclose()
        return RecontextTrial(
            mode, n, self.plan.period if real else 0.0, max(seconds, real_seconds or 0.0),
            real_seconds, REAL_AGENTS if real else 0,
        )  # fmt: skip


def summary_rows(trials: Sequence[RecontextTrial]) -> list[list[str]]:
    """One row per mode and size: trials, the slowest time and its excess."""
    rows = []
    keys = sorted({(t.mode, t.nodes) for t in trials}, key=lambda k: (k[0] != "periodic", k[1]))
    for mode, n in keys:
        group = [t for t in trials if (t.mode, t.nodes) == (mode, n)]
        worst = max(group, key=lambda t: t.seconds)
        rows.append([mode, str(n), str(len(group)), ", ".join(f"{t.seconds:.3f}" for t in group),
                     f"{worst.beyond:+.3f}" if mode == "periodic" else "-"])  # fmt: skip
    return rows
