"""An elastic site on the virtual clock: the live manager's policies, simulated clouds.

Every ``interval`` the run builds the same :class:`~elasticsite.model.SiteSnapshot`
the live manager builds and calls the same
:func:`elasticsite.policies.evaluate`; the decision is carried out by simulated
clouds (workers join after a sampled boot time, leave after a sampled shutdown
time) and the queue is scheduled by the same code as the embedded batch system
(:mod:`elasticsite.batch.scheduling`). What a policy does here is what it does in
production.

Simplifications, each the live manager's best case: a cloud answers a launch at
once (the boot time is the whole delay), the batch system sees a node the moment
its worker joins, and no worker stalls or fails. Workers move between idle and busy
when jobs start and end; a drained worker is terminated at the next decision, as
the live loop does. When the last job has finished, workers a policy keeps (steady
stream's floor, a dedicated pool) are drained and terminated, as a manager stopped
with ``on_shutdown = "drain"`` would.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from elasticsite import policies
from elasticsite.batch import scheduling
from elasticsite.metrics import WorkloadMetrics, workload_metrics
from elasticsite.model import (
    Cause,
    Decision,
    Job,
    JobState,
    SiteSnapshot,
    Transition,
    Worker,
    WorkerState,
)
from elasticsite.sim.cloud import CloudModel
from elasticsite.sim.engine import Simulation

__all__ = ["ElasticResult", "simulate_elastic"]

S = WorkerState


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


class _Run:
    """The state of one simulated elastic site; handlers are scheduled on ``sim``."""

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
    ) -> None:
        if not clouds:
            raise ValueError("an elastic site needs at least one cloud")
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        if scheduler not in scheduling.POLICIES:
            raise ValueError(
                f"unknown scheduler {scheduler!r}; use one of {', '.join(scheduling.POLICIES)}"
            )
        if warm_up < 0:
            raise ValueError(f"warm_up must be >= 0 seconds, got {warm_up}")
        first = min((a[0] for a in arrivals), default=0.0)
        self.sim = Simulation(start=first - warm_up)
        self.rng = random.Random(seed)
        self.clouds = {c.name: c for c in clouds}
        self.specs = [c.spec() for c in clouds]
        self.policy = policy
        self.settings = settings
        self.interval = interval
        self.scheduler = scheduler
        self.jobs: list[Job] = []
        self.queue: list[Job] = []
        self.running: dict[str, Job] = {}
        self.workers: dict[str, Worker] = {}
        self.free: dict[str, int] = {}  # joined, schedulable nodes -> free cores
        self.decisions = 0
        self.pending_arrivals = len(arrivals)
        self.done = 0
        self.ticking = False
        self.seq = 0
        for i, (at, cores, runtime, walltime) in enumerate(arrivals):
            if cores < 1 or runtime < 0 or walltime <= 0:
                raise ValueError(
                    f"job {i}: needs cores >= 1, runtime >= 0 and walltime > 0, "
                    f"got {cores}, {runtime}, {walltime}"
                )
            job = Job(str(i + 1), cores, walltime, at, runtime=runtime)
            self.jobs.append(job)
            self.sim.at(at, self._arrive, job)
        if warm_up > 0:
            # Decisions start ahead of the workload, so a policy's floor (a dedicated
            # pool, steady stream's worker) is booted and joined before the first job.
            self.ticking = True
            self.sim.at(self.sim.now, self._tick)

    # -- jobs --------------------------------------------------------------------

    def _arrive(self, job: Job) -> None:
        self.pending_arrivals -= 1
        self.queue.append(job)
        self._schedule()
        if not self.ticking:
            # Decisions start with the first job, as a manager started with the site.
            self.ticking = True
            self.sim.at(self.sim.now, self._tick)

    def _schedule(self) -> None:
        if not self.queue or not self.free:
            return
        now = self.sim.now
        running = [
            (j.node or "", j.cores, (j.started_at or now) + j.walltime)
            for j in self.running.values()
        ]
        nodes = list(self.free.items())
        starts = dict(scheduling.schedule(self.scheduler, now, self.queue, nodes, running))
        if not starts:
            return
        kept = []
        for job in self.queue:
            node = starts.get(job.id)
            if node is None:
                kept.append(job)
                continue
            job.state = JobState.RUNNING
            job.started_at = now
            job.node = node
            self.free[node] -= job.cores
            self.running[job.id] = job
            w = self.workers[node]
            w.running_jobs += 1
            if w.state is S.IDLE:
                w.transition(S.BUSY, now, Cause.JOB_STARTED)
            duration = min(job.runtime or 0.0, job.walltime)
            self.sim.at(now + duration, self._finish, job)
        self.queue = kept

    def _finish(self, job: Job) -> None:
        now = self.sim.now
        job.state = JobState.DONE
        job.finished_at = now
        job.exit_code = 0 if (job.runtime or 0.0) <= job.walltime else -9
        del self.running[job.id]
        self.done += 1
        node = job.node or ""
        w = self.workers[node]
        w.running_jobs -= 1
        if node in self.free:
            self.free[node] += job.cores
        if w.running_jobs == 0 and w.state is S.BUSY:
            w.transition(S.IDLE, now, Cause.JOB_FINISHED)
        self._schedule()

    # -- decisions -----------------------------------------------------------------

    def _tick(self, _: object) -> None:
        now = self.sim.now
        all_done = self.pending_arrivals == 0 and not self.queue and not self.running
        live = [w for w in self.workers.values() if w.state.live]
        if all_done:
            self._wind_down(live)
            return
        for w in live:
            w.free_cores = self.free.get(w.node or w.id, 0)
        snapshot = SiteSnapshot(
            now, list(self.queue), list(self.running.values()), live, self.specs
        )
        decision = policies.evaluate(self.policy, snapshot, self.settings)
        self.decisions += 1
        self._act(decision)
        self.sim.at(now + self.interval, self._tick)

    def _wind_down(self, live: list[Worker]) -> None:
        """All work is done: drain and terminate whatever the policy keeps."""
        now = self.sim.now
        for w in live:
            if w.state in (S.IDLE, S.BUSY):
                w.transition(S.DRAINING, now, Cause.SHUTDOWN)
                self._terminate(w, Cause.DRAINED)
            elif w.state is S.DRAINING:
                self._terminate(w, Cause.DRAINED)
            elif w.state.pending:
                self._terminate(w, Cause.SHUTDOWN)

    def _act(self, decision: Decision) -> None:
        now = self.sim.now
        for t in decision.terminate:
            self._terminate(self.workers[t.worker_id], t.cause)
        for d in decision.drain:
            w = self.workers[d.worker_id]
            if w.state in (S.IDLE, S.BUSY):
                w.transition(S.DRAINING, now, d.cause)
                self.free.pop(w.node or w.id, None)
        for u in decision.undrain:
            w = self.workers[u.worker_id]
            if w.state is S.DRAINING:
                w.transition(S.BUSY if w.running_jobs else S.IDLE, now, u.cause)
                self.free[w.node or w.id] = w.cores - sum(
                    j.cores for j in self.running.values() if j.node == w.node
                )
        for launch in decision.launch:
            cloud = self.clouds[launch.cloud]
            for _ in range(launch.count):
                self.seq += 1
                wid = f"{cloud.name}-{self.seq:05d}"
                w = Worker(wid, cloud.name, launch.vm_type, cloud.cores_per_vm, now)
                w.history.append(Transition(wid, None, S.REQUESTED, now, launch.cause))
                w.transition(S.BOOTING, now, Cause.BOOTED)
                self.workers[wid] = w
                self.sim.at(now + cloud.boot.sample(self.rng), self._join, w)
        if decision.undrain or decision.launch:
            self._schedule()

    def _join(self, w: Worker) -> None:
        if w.state is not S.BOOTING:
            return  # terminated while booting
        w.transition(S.IDLE, self.sim.now, Cause.JOINED)
        self.free[w.node or w.id] = w.cores
        self._schedule()

    def _terminate(self, w: Worker, cause: Cause) -> None:
        now = self.sim.now
        if not w.state.live or w.state is S.TERMINATING:
            return
        self.free.pop(w.node or w.id, None)
        if w.state in (S.IDLE, S.BUSY):
            w.transition(S.DRAINING, now, cause)
        w.transition(S.TERMINATING, now, cause)
        self.sim.at(now + self.clouds[w.cloud].shutdown.sample(self.rng), self._gone, w)

    def _gone(self, w: Worker) -> None:
        w.transition(S.TERMINATED, self.sim.now, Cause.CLOUD_REPORTED)


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
    progress: Callable[[float], None] | None = None,
) -> ElasticResult:
    """Replay ``arrivals`` — ``(submit_time, cores, runtime, requested_walltime)`` — on a
    site that has only cloud workers, provisioned by ``policy`` every ``interval``.

    Decisions start with the first job, or ``warm_up`` seconds before it (the papers'
    dedicated baseline has its pool booted before the workload arrives).
    """
    run = _Run(
        arrivals,
        clouds,
        policies.get(policy),
        settings or policies.PolicySettings(),
        interval,
        scheduler,
        seed,
        warm_up,
    )
    run.sim.run(progress=progress)
    return ElasticResult(
        run.jobs, list(run.workers.values()), list(clouds), run.decisions, run.sim.events
    )
