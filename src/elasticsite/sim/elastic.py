"""An elastic site on the virtual clock, run by the live manager's own core.

Every ``interval`` the run does what the live manager's step does (:mod:`elasticsite.
manager.loop`): it senses (a snapshot of the simulated batch system, each simulated
cloud's instances) and hands that, with the outcomes of the commands run at the last
step, to the same :func:`elasticsite.core.step`, which moves the workers, asks the same
:func:`elasticsite.policies.evaluate` and carries the decision out. The commands run
against :class:`~elasticsite.sim.cloud.SimCloud` and
:class:`~elasticsite.sim.batch.SimBatch`, which fulfil the same contracts as the real
clouds and batch systems, through the live manager's own command runner. Nothing here
moves a worker between states: what a policy does here is what it does in production.

The simulated clouds answer at once (the boot time is the whole delay) and nothing
fails. When the last job has finished, the site stops as a manager configured with
``on_shutdown = "drain"`` does: pending workers go, the others drain and go.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from elasticsite import core, policies
from elasticsite.batch.urgency import URGENT_PRIORITY
from elasticsite.core import CoreState, Outcome, Plan
from elasticsite.core.runner import CommandRunner
from elasticsite.metrics import WorkloadMetrics, workload_metrics
from elasticsite.model import Decision, Job, Transition, Worker, WorkerState
from elasticsite.policies.redirect import redirect_target
from elasticsite.sim.batch import SimBatch
from elasticsite.sim.cloud import CloudModel, SimCloud
from elasticsite.sim.engine import Simulation
from elasticsite.sim.watch import (
    RunLimits,
    RunStatus,
    SimulationExploded,
    exploded_time,
    exploded_workers,
)
from elasticsite.snapshot import SiteSnapshot
from elasticsite.spend import Ledger, bill

__all__ = [
    "SIM_SITE",
    "ElasticResult",
    "ElasticRun",
    "RunStatus",
    "SimulationExploded",
    "SimulationStalled",
    "simulate_elastic",
]

SIM_SITE = "simulated"
"""The site id of simulated instances' tags."""


@dataclass(slots=True)
class ElasticResult:
    """Every job and worker of the run, with their times, and the clouds they ran on."""

    jobs: list[Job]
    workers: list[Worker]
    clouds: list[CloudModel]
    decisions: int
    events: int

    def metrics(self, tolerance: float = 1.0) -> WorkloadMetrics:
        """Paper 000's and 001's metrics, billed by each cloud's rule."""
        return workload_metrics(
            self.jobs, self.workers, [c.spec() for c in self.clouds], tolerance=tolerance
        )


STATUS_EVERY = 0.25
"""Wall-clock seconds between two calls of a run's status callback."""

STALL_STEPS = 1000
"""Decisions in a row with jobs queued, nothing running and nothing launched after
which a run is stopped as stalled."""


class SimulationStalled(RuntimeError):
    """The simulated site cannot make progress: queued jobs no worker will ever run."""


SITE_NODE = "site"
"""The name of the simulated site's own node, when it has one."""


class ElasticRun:
    """One simulated elastic site: the core, a simulated batch system and clouds."""

    def __init__(
        self,
        arrivals: Sequence[tuple[float, int, float, float]],
        clouds: Sequence[CloudModel],
        policy: policies.Policy,
        settings: policies.PolicySettings,
        interval: float,
        scheduler: str,
        seed: int,
        warm_up: float = 0.0,
        site_cores: int = 0,
        preboot: int = 0,
        urgency: Mapping[int, str] | None = None,
        status: Callable[[RunStatus], None] | None = None,
        limits: RunLimits | None = None,
        *,
        users: Sequence[str] | None = None,
        attributes: Sequence[Mapping[str, str]] | None = None,
    ) -> None:
        """``status`` is called at the first decision, then at most every
        :data:`STATUS_EVERY` s of wall-clock time, with the run's :class:`RunStatus`;
        ``limits`` (default: :meth:`RunLimits.of` the workload and clouds) stop a run
        that explodes with :class:`SimulationExploded`."""
        if not clouds:
            raise ValueError("an elastic site needs at least one cloud")
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        if warm_up < 0:
            raise ValueError(f"warm_up must be >= 0 seconds, got {warm_up}")
        if site_cores < 0:
            raise ValueError(f"site_cores must be >= 0, got {site_cores}")
        largest = max(max(vm.cores for c in clouds for vm in c.spec().vm_types), site_cores)
        for given, what in ((users, "users"), (attributes, "attributes")):
            if given is not None and len(given) != len(arrivals):
                raise ValueError(f"{len(given)} {what} for {len(arrivals)} jobs")
        first = min((a[0] for a in arrivals), default=0.0)
        self.sim = Simulation(start=first - warm_up)
        # A redirecting policy sends jobs to the cloud workers' partition: theirs.
        partition = redirect_target(settings) if policy.redirects else ""
        self.batch = SimBatch(self.sim, scheduler, node_partition=partition)
        if site_cores:
            self.batch.add_site_node(SITE_NODE, site_cores)
        rng = random.Random(seed)
        self.models = list(clouds)
        self.clouds = {c.name: SimCloud(c, self.sim, rng, self.batch) for c in clouds}
        specs = [c.spec() for c in clouds]
        self.policy = policy
        self.settings = settings
        self.config = core.core_config(policy, site_id=SIM_SITE, clouds=specs, interval=interval)
        self.state = CoreState()
        self.ledger = Ledger(settings.budget.period) if settings.budget else None
        """What finished workers cost, for the budget (as the manager's bills)."""
        self._specs = {c.name: c for c in specs}
        self.runner = CommandRunner(
            batch=self.batch,
            clouds=self.clouds,
            specs=specs,
            site_id=SIM_SITE,
            userdata={},
            clock=lambda: self.sim.now,
        )
        self.jobs: list[Job] = []
        self.workers: list[Worker] = []
        self.log: list[Transition] = []
        """Every transition, in the order the core made them (as the manager's store)."""
        self.decisions = 0
        self._outcomes: list[Outcome] = []
        self._numbers = 0
        self._idle_steps = 0
        self._status = status
        self._shown = -math.inf
        self._first = first
        self.limits = limits or RunLimits.of(arrivals, clouds, interval)
        self.wasted = 0
        """Workers that ended without ever joining."""
        for i, (at, cores, runtime, walltime) in enumerate(arrivals):
            if cores < 1 or runtime < 0 or walltime <= 0:
                raise ValueError(
                    f"job {i}: needs cores >= 1, runtime >= 0 and walltime > 0, "
                    f"got {cores}, {runtime}, {walltime}"
                )
            if cores > largest:
                raise ValueError(
                    f"job {i}: needs {cores} cores on one node; the largest VM of these "
                    f"clouds (or the site's node) has {largest}, so it could never run"
                )
            job = Job(str(i + 1), cores, walltime, at, runtime=runtime)
            if urgency and i in urgency:  # as `urgent submit` marks and elevates a job
                job.attributes = {"urgency": urgency[i]}
                job.priority = URGENT_PRIORITY
            if users is not None:  # whose job it is (Cloud Scheduler mode's fair share)
                job.user = users[i]
            if attributes is not None and attributes[i]:  # the VM type it names ...
                job.attributes = {**job.attributes, **attributes[i]}
            self.jobs.append(job)
        self.preboot = preboot
        """Workers to boot and join before the workload starts (the dedicated baseline's
        pool, :func:`elasticsite.policies.preboot_workers`); the jobs' times then shift
        to begin when it has."""
        self._released = False
        if not preboot:
            self._release(0.0)
        # Decisions start with the first job, as a manager started with the site; with a
        # warm-up, ahead of it, so a policy's floor is booted before the workload.
        self.sim.at(self.sim.now, self.step)

    def _release(self, offset: float) -> None:
        """Submit the workload, ``offset`` seconds later than its own times."""
        self._released = True
        for job in self.jobs:
            job.submitted_at += offset
            self.sim.at(job.submitted_at, self.batch.arrive, job)

    def _preboot_check(self, first: float) -> None:
        """Start the workload once the pool has booted, as the live demo does."""
        by_state: dict[str, int] = {}
        for r in self.state.records.values():
            by_state[r.worker.state.value] = by_state.get(r.worker.state.value, 0) + 1
        if policies.preboot_done(by_state, self.preboot):
            self._release(max(0.0, self.sim.now - first))

    def step(self, _: object = None) -> None:
        """One step of the manager's loop, on the virtual clock."""
        now = self.sim.now
        outcomes, self._outcomes = self._outcomes, []
        view = self.batch.snapshot()
        sensed = core.Sensed(
            now,
            outcomes,
            {n.name: n for n in view.nodes},
            {name: core.by_tag(cloud.describe()) for name, cloud in self.clouds.items()},
            view.queued,
            view.running,
        )
        if (
            self._released
            and len(self.batch.jobs) == len(self.jobs)
            and not view.queued
            and not view.running
        ):
            self.state.shutting_down = True  # all work done: the site stops, draining
        _, plan = core.step(self.state, self.config, sensed, self._decide, self._new_ids)
        self._check_progress(view.queued, view.running, plan.decision)
        self._carry_out(plan)
        self._watch(now)
        if not self._released:
            self._preboot_check(min((j.submitted_at for j in self.jobs), default=now))
        if not (self.state.shutting_down and not self.state.records and not self._outcomes):
            self.sim.at(now + self.config.interval, self.step)

    def status(self) -> RunStatus:
        """Where the run is now."""
        booting = workers = 0
        for r in self.state.records.values():
            st = r.worker.state
            if st.live:
                workers += 1
                booting += st is WorkerState.REQUESTED or st is WorkerState.BOOTING
        return RunStatus(self.sim.now - self._first, self.batch.done, len(self.jobs), workers,
                         booting, len(self.workers))  # fmt: skip

    def _watch(self, now: float) -> None:
        """Report the run's status now and then; stop it past its limits."""
        over = now - self._first > self.limits.until or self.wasted > self.limits.wasted
        if self._status is not None and time.monotonic() - self._shown >= STATUS_EVERY:
            self._shown = -math.inf
            self._status(self.status())
        if over:
            stall = self.settings.stall_timeout
            if self.wasted > self.limits.wasted:
                raise exploded_workers(self.status(), self.wasted, self.limits, self.models,
                                       stall)  # fmt: skip
            raise exploded_time(self.status(), self.limits, self.models, stall)

    def _check_progress(
        self, queued: Sequence[Job], running: Sequence[Job], decision: Decision
    ) -> None:
        """Stop a run whose queued jobs can never start (no worker, none launched, for
        :data:`STALL_STEPS` decisions), rather than deciding forever."""
        if (
            queued
            and not running
            and not decision.launch
            and len(self.batch.jobs) == len(self.jobs)
            and not any(r.worker.state.live for r in self.state.records.values())
        ):
            self._idle_steps += 1
            if self._idle_steps >= STALL_STEPS:
                raise SimulationStalled(
                    f"{len(queued)} queued job(s) can never run: policy "
                    f"{getattr(self.policy, '__module__', '?').rsplit('.', 1)[-1]} launched "
                    f"no worker for them in {STALL_STEPS} decisions (does the workload fit "
                    "the policy? cloud_scheduler serves jobs that name a VM type only)"
                )
        else:
            self._idle_steps = 0

    def _decide(self, snapshot: SiteSnapshot) -> Decision:
        """The policy's decision, with what finished workers cost for a budget."""
        if self.ledger is not None:
            on_record = (r.worker for r in self.state.records.values())
            spent = self.ledger.spent(snapshot.now, on_record, self.config.clouds)
            snapshot.spent_in_period = spent.period_total
        self.decisions += 1
        return policies.evaluate(self.policy, snapshot, self.settings)

    def _new_ids(self, wanted: Mapping[str, int]) -> dict[str, list[str]]:
        """Ids as the manager's store gives them: one counter across clouds."""
        ids: dict[str, list[str]] = {}
        for cloud, count in wanted.items():
            ids[cloud] = [core.worker_id(cloud, self._numbers + k + 1) for k in range(count)]
            self._numbers += count
        return ids

    def _carry_out(self, plan: Plan) -> None:
        self.workers.extend(rec.worker for rec in plan.new)
        self.log.extend(plan.transitions)
        for wid in plan.forgotten:
            rec = self.state.records.pop(wid, None)
            if rec is None:
                continue
            if self.ledger is not None:
                self.ledger.add(bill(rec.worker, self._specs), self.sim.now)
            if rec.worker.joined_at is None:
                self.wasted += 1
        for group in self.runner.batches(plan.commands):  # as the manager's pool runs them
            self._outcomes.extend(self.runner.run_all(group))


def simulate_elastic(
    arrivals: Sequence[tuple[float, int, float, float]],
    clouds: Sequence[CloudModel],
    policy: str = "bursts",
    settings: policies.PolicySettings | None = None,
    *,
    interval: float = 10.0,
    scheduler: str = "easy",
    seed: int = 0,
    warm_up: float = 0.0,
    site_cores: int = 0,
    preboot: int = 0,
    progress: Callable[[float], None] | None = None,
    urgency: Mapping[int, str] | None = None,
    status: Callable[[RunStatus], None] | None = None,
    limits: RunLimits | None = None,
    users: Sequence[str] | None = None,
    attributes: Sequence[Mapping[str, str]] | None = None,
) -> ElasticResult:
    """Replay ``arrivals`` — ``(submit_time, cores, runtime, requested_walltime)`` — on a
    site that has only cloud workers (and, with ``site_cores``, one node of its own),
    provisioned by ``policy`` every ``interval``.

    Decisions start with the first job, or ``warm_up`` seconds before it. With
    ``preboot``, the workload waits until that many workers have joined (the papers'
    dedicated baseline has its pool booted before the workload arrives; see
    :func:`elasticsite.policies.preboot_workers`), and its times shift by the wait.
    ``urgency`` marks jobs (by index in ``arrivals``) as urgent, ``red``, ``orange`` or
    ``yellow``: with an urgent allowance in ``settings`` they burst past the limits, and
    a finite cloud (``CloudModel.hosts``) gives their launches its urgent policy.
    ``users`` and ``attributes``, when given, are each job's user and attributes (the
    ``vm_type`` Cloud Scheduler mode serves it by), in the order of ``arrivals``.
    ``status`` gets the run's :class:`RunStatus` now and then; a run past its
    :class:`~elasticsite.sim.watch.RunLimits` (``limits``, default from the workload
    and clouds) raises :class:`SimulationExploded`.
    """
    run = ElasticRun(
        arrivals,
        clouds,
        policies.get(policy),
        settings or policies.PolicySettings(),
        interval,
        scheduler,
        seed,
        warm_up,
        site_cores,
        preboot,
        urgency,
        status,
        limits,
        users=users,
        attributes=attributes,
    )
    run.sim.run(progress=progress)
    return ElasticResult(run.jobs, run.workers, list(clouds), run.decisions, run.sim.events)
