"""Paper 003 (Cloud Scheduler) on the simulator: the manager's own core and the
``cloud_scheduler`` policy on a virtual clock, watched every decision step.

The scenario is the paper's fair-share example, the one ``benchmarks/fair_share.py``
replays: 12 VMs; ann queues ``small`` jobs, a little later bob queues ``small`` ones,
later still cid ``large`` ones. The paper's text gives the expected shares: the VMs
evenly among the users with jobs, so 12/0/0, then 6/6/0, then 4/4/4. Each step records
the VMs each user holds (a VM held by a user runs one of their jobs), their fair share
at that instant (:func:`~elasticsite.policies.fair_share.fair_shares`), the jobs held
in the batch system and the jobs a terminated VM sent back to the queue.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from elasticsite import policies
from elasticsite.clouds.base import InstanceState
from elasticsite.model import Cause, Job, VMType, Worker, WorkerState
from elasticsite.policies.fair_share import fair_shares
from elasticsite.sim.cloud import CloudModel, Durations
from elasticsite.sim.elastic import ElasticRun

__all__ = [
    "BURSTS",
    "EXPECTED",
    "LIMIT",
    "SAMPLES",
    "TYPES",
    "USERS",
    "Rebalance",
    "Run",
    "Watch",
    "failed",
    "simulate",
    "watched_run",
]

Rebalance = Literal["graceful", "immediate"]
INTERVAL = 10.0
LIMIT = 12
"""The site's VMs in the paper's example."""
TYPES = (VMType("small", 1), VMType("large", 2))
BURSTS = (
    (0.0, "ann", "small", 60, 600.0),
    (900.0, "bob", "small", 30, 600.0),
    (1800.0, "cid", "large", 20, 600.0),
)
"""(submitted at, user, VM type named, jobs, run time of each), as the benchmark's."""
USERS = ("ann", "bob", "cid")
SAMPLES = (600.0, 1500.0, 2400.0)
"""When the shares are read: ann alone, ann with bob, all three (each after a boot)."""
EXPECTED = {600.0: (12, 0, 0), 1500.0: (6, 6, 0), 2400.0: (4, 4, 4)}
"""The paper's shares at each sample: VMs of ann/bob/cid."""


@dataclass
class Run:
    """What one simulated run showed."""

    rebalance: str
    times: list[float] = field(default_factory=list)
    held: dict[str, list[int]] = field(default_factory=dict)
    """VMs each user held (ran a job of theirs on) at each of ``times``."""
    fair: dict[str, list[int]] = field(default_factory=dict)
    """Each user's fair share at each of ``times``."""
    used: dict[str, float] = field(default_factory=lambda: dict.fromkeys(USERS, 0.0))
    """Each user's VM-seconds."""
    due: dict[str, float] = field(default_factory=lambda: dict.fromkeys(USERS, 0.0))
    """Each user's fair VM-seconds."""
    jobs_held: set[str] = field(default_factory=set)
    requeued: int = 0
    """Jobs sent back to the queue by a VM terminated under them."""
    jobs: list[Job] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)
    moves: Counter[str] = field(default_factory=Counter)
    """Fair-share moves of workers, by the state they moved to."""
    errors: int = 0
    """VMs put in error by the cloud."""

    def at(self, when: float) -> tuple[int, ...]:
        """The VMs of ann/bob/cid at the first step at or after ``when``."""
        i = next((k for k, t in enumerate(self.times) if t >= when), len(self.times) - 1)
        return tuple(self.held[u][i] for u in USERS)

    def jain(self) -> float:
        """Jain's index of each user's VM-seconds over their fair VM-seconds."""
        x = [self.used[u] / self.due[u] for u in USERS if self.due[u]]
        return sum(x) ** 2 / (len(x) * sum(v * v for v in x)) if x else 1.0

    def wrong_type(self) -> list[str]:
        """Jobs that ran on a VM of another type than they named."""
        typed = {w.node or w.id: w.vm_type for w in self.workers}
        return [j.id for j in self.jobs if typed.get(j.node or "") != j.attributes["vm_type"]]


def _jobs(scale: float) -> list[tuple[float, str, str, float]]:
    return [
        (at, user, vm, run)
        for at, user, vm, n, run in BURSTS
        for _ in range(max(1, round(n * scale)))
    ]


Watch = Callable[[ElasticRun, Counter[str], dict[str, int]], None]
"""Called after every decision step with the run, the VMs each user holds (runs one of
their jobs on) and each user's fair share at that instant."""


def watched_run(
    jobs: Sequence[tuple[float, str, str, float]],
    limit: int,
    users: Sequence[str],
    policy: policies.Policy,
    rebalance: Rebalance,
    seed: int,
    watch: Watch,
) -> ElasticRun:
    """The scenario's simulated site, ready to run: ``jobs`` (submitted at, user, VM
    type named, run time) on one cloud of ``limit`` VMs of :data:`TYPES`, decided by
    ``policy``; ``watch`` sees every step. The fair share counts the users of
    ``users`` with jobs running or waiting (held ones included)."""

    class Watched(ElasticRun):
        def step(self, _: object = None) -> None:
            super().step(_)
            running = Counter(j.user for j in self.batch.running.values())
            waiting = Counter(j.user for j in (*self.batch.queue, *self.batch.held.values()))
            demand = {u: running[u] + waiting[u] for u in users if running[u] + waiting[u]}
            watch(self, running, fair_shares(limit, demand))

    cloud = CloudModel(
        name="science",
        vm_limit=limit,
        boot=Durations.uniform(60.0, 120.0),
        shutdown=Durations.uniform(5.0, 15.0),
        billing_increment=1.0,
        vm_types=TYPES,
    )
    cores = {t.name: t.cores for t in TYPES}
    return Watched(
        [(at, cores[vm], run, run * 1.2) for at, _, vm, run in jobs], [cloud], policy,
        policies.settings_for("cloud_scheduler", rebalance=rebalance), INTERVAL, "easy", seed,
        users=[u for _, u, _, _ in jobs], attributes=[{"vm_type": vm} for _, _, vm, _ in jobs],
    )  # fmt: skip


def simulate(rebalance: Rebalance, *, errors: int = 0, scale: float = 1.0, seed: int = 1) -> Run:
    """The paper's scenario with ``rebalance`` (``graceful`` or ``immediate``); with
    ``errors``, that many of ann's running VMs are put in error by the cloud at 400 s.
    ``scale`` shortens the workload (the number of jobs of each burst)."""
    jobs = _jobs(scale)
    out = Run(rebalance, held={u: [] for u in USERS}, fair={u: [] for u in USERS})

    def watch(run: ElasticRun, running: Counter[str], shares: dict[str, int]) -> None:
        out.jobs_held.update(run.batch.held)
        out.times.append(run.sim.now)
        for user in USERS:
            out.held[user].append(running[user])
            out.fair[user].append(shares.get(user, 0))
            out.used[user] += running[user] * INTERVAL
            out.due[user] += shares.get(user, 0) * INTERVAL

    sim = watched_run(jobs, LIMIT, USERS, policies.get("cloud_scheduler"), rebalance, seed, watch)
    requeue = sim.batch._requeue

    def counted(name: str) -> None:
        out.requeued += sum(j.node == name for j in sim.batch.running.values())
        requeue(name)

    sim.batch._requeue = counted  # type: ignore[method-assign]
    if errors:
        sim.sim.at(400.0, lambda _: _break(sim, errors, out), None)
    sim.sim.run()
    out.jobs, out.workers = sim.jobs, sim.workers
    for t in sim.log:
        if t.cause == Cause.FAIR_SHARE:
            out.moves[t.to_state.value] += 1
    return out


def _break(sim: ElasticRun, count: int, out: Run) -> None:
    """The cloud reports ``count`` running VMs in error: their nodes stop, their jobs
    go back to the queue, the instances stay listed in error until terminated."""
    cloud = sim.clouds["science"]
    running = [i for i in cloud.describe() if i.state is InstanceState.RUNNING][:count]
    for inst in running:
        inst.state = InstanceState.ERROR
        sim.batch.node_down(cloud._node[inst.id])
        out.errors += 1
    terminate = cloud.terminate

    def taken_back(instance_ids: Sequence[str]) -> None:
        """An instance in error is terminated like any other (the simulated cloud
        stops only pending and running ones)."""
        for inst in running:
            if inst.id in instance_ids and inst.state is InstanceState.ERROR:
                inst.state = InstanceState.RUNNING
        terminate(instance_ids)

    cloud.terminate = taken_back  # type: ignore[method-assign]


def failed(run: Run) -> list[Worker]:
    """Workers that ended failed (a VM in error among them)."""
    return [w for w in run.workers if w.state is WorkerState.FAILED]
