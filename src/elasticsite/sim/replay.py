"""Replay a workload through a site and a cloud under one of paper 002's strategy sets.

:func:`replay` drives :class:`~elasticsite.sim.engine.Simulation`: one chained
arrival event per distinct submit time, one finish event per started job, and one
scheduling pass per instant that had arrivals or completions, run after the
instant's last event (queued behind the others when there are any), so it sees
all of them. A pass starts what the site's and the cloud's schedulers allow, lets
the strategy redirect, and starts again.

Jobs are planned with their requested time and run for their actual runtime, cut
at the requested time (a scheduler kills a job that outlives its request). A job
sent to the cloud runs on one VM per processor requested; the cloud is a second
pool of ``cloud.vm_limit`` VMs. Paper 002 counts boot time in the request's
duration, so the default cloud (boot 0) adds nothing; a cloud model with a boot
time adds a boot sampled from ``seed`` before the job's work, and plans for the
longest boot. Each VM is billed from the job's start to its end, in whole
``cloud.billing_increment`` increments (:func:`~elasticsite.sim.metrics.vm_bill`).
Shutdown time is not modelled. The same inputs and seed give the same result.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from elasticsite.batch.pools import BackfillPool, EasyPool, Key, make_pool
from elasticsite.policies.strategies import Strategy, edf, get_strategy
from elasticsite.sim.cloud import CloudModel
from elasticsite.sim.engine import Simulation
from elasticsite.sim.metrics import CLOUD, SITE, JobRecords, SimMetrics, sim_metrics

__all__ = ["ReplayResult", "replay"]

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, eq=False)
class ReplayResult:
    """What a replay did: per-job records, the cloud VMs' lifetimes, and the setting."""

    jobs: JobRecords
    vm_start: Floats
    vm_end: Floats
    site_procs: int
    cloud: CloudModel | None
    strategy: str
    events: int

    def metrics(
        self, base_awrt: float | None = None, base_violations: int | None = None
    ) -> SimMetrics:
        """Paper 002's figures for this run; the base run's AWRT enables the performance cost."""
        cloud = self.cloud
        return sim_metrics(
            self.jobs,
            site_processors=self.site_procs,
            vm_start=self.vm_start,
            vm_end=self.vm_end,
            price_per_hour=0.0 if cloud is None else cloud.price_per_hour,
            billing_increment=3600.0 if cloud is None else cloud.billing_increment,
            base_awrt=base_awrt,
            base_violations=base_violations,
        )


class _Replay:
    """The replay's state; it is also the :class:`~.strategies.Context` strategies act on."""

    def __init__(
        self,
        submit: Floats,
        procs: list[int],
        duration: list[float],
        requested: list[float],
        deadline: list[float],
        site_procs: int,
        strategy: Strategy,
        cloud: CloudModel | None,
        seed: int,
    ) -> None:
        self.sim = Simulation(float(submit.min()) if len(submit) else 0.0)
        self.strategy = strategy
        self.site: EasyPool | BackfillPool = strategy.make_site(site_procs)
        self.cloud: EasyPool | BackfillPool | None = None
        self._boot_max = 0.0
        if cloud is not None and strategy.cloud_scheduler is not None and cloud.vm_limit > 0:
            self.cloud = make_pool(strategy.cloud_scheduler, cloud.vm_limit)
            self._boot_max = max(cloud.boot.values)
        self._model = cloud
        self._rng = random.Random(seed)
        self._submit = submit.tolist()
        self._order = np.argsort(submit, kind="stable").tolist()
        self._procs = procs
        self._duration = duration
        self._requested = requested
        self._deadline = deadline
        n = len(procs)
        self.start = [math.nan] * n
        self.finish = [math.nan] * n
        self.where = [SITE] * n
        self.rejected = [False] * n
        self.vm_start: list[float] = []
        self.vm_end: list[float] = []
        self._pending = False
        self._next = 0

    # -- the Context strategies see --------------------------------------------------
    def procs(self, job: int) -> int:
        return self._procs[job]

    def requested(self, job: int) -> float:
        return self._requested[job]

    def cloud_requested(self, job: int) -> float:
        return self._requested[job] + self._boot_max

    def deadline(self, job: int) -> float:
        return self._deadline[job]

    def key(self, job: int) -> Key | None:
        return edf(self._deadline[job], self._submit[job]) if self.strategy.edf else None

    def fits_cloud(self, job: int) -> bool:
        return self.cloud is not None and self._procs[job] <= self.cloud.capacity

    def to_site(self, job: int, now: float) -> None:
        self.site.submit(job, self._procs[job], self._requested[job], now, self.key(job))

    def to_cloud(self, job: int, now: float) -> None:
        if self.cloud is None or not self.fits_cloud(job):
            raise ValueError(f"job {job} cannot go to the cloud: no cloud or too few VMs")
        self.where[job] = CLOUD
        self.cloud.submit(job, self._procs[job], self.cloud_requested(job), now, self.key(job))

    def redirect(self, job: int, now: float) -> None:
        self.site.remove(job, now)
        self.to_cloud(job, now)

    def reject(self, job: int, now: float) -> None:
        self.rejected[job] = True

    def start_cloud(self, now: float) -> None:
        cloud = self.cloud
        if cloud is None:
            return
        sim, model = self.sim, self._model
        assert model is not None
        for job in cloud.start_now(now):
            boot = model.boot.sample(self._rng) if self._boot_max > 0 else 0.0
            end = now + boot + self._duration[job]
            self.start[job] = now
            m = self._procs[job]
            self.vm_start.extend([now] * m)
            self.vm_end.extend([end] * m)
            sim.at(end, self._cloud_done, job)

    # -- events ----------------------------------------------------------------------
    def arrive(self, _: object) -> None:
        """Every job submitted now arrives; then the next submit time is scheduled."""
        now = self.sim.now
        order, submit, place = self._order, self._submit, self.strategy.on_arrival
        i, n = self._next, len(order)
        while i < n and submit[order[i]] == now:
            place(self, order[i], now)
            i += 1
        self._next = i
        if i < n:
            self.sim.at(submit[order[i]], self.arrive)
        self._wake()

    def _wake(self) -> None:
        """Run the instant's pass once every event of the instant is in."""
        if self._pending:
            return
        sim = self.sim
        if sim.peek() > sim.now:  # this was the instant's last event: no need to queue
            self._pass(None)
        else:
            self._pending = True
            sim.at(sim.now, self._pass)

    def _site_done(self, job: int) -> None:
        now = self.sim.now
        self.site.finish(job, now)
        self.finish[job] = now
        self._wake()

    def _cloud_done(self, job: int) -> None:
        now = self.sim.now
        assert self.cloud is not None
        self.cloud.finish(job, now)
        self.finish[job] = now
        self._wake()

    def _start_site(self, now: float) -> None:
        sim, start, duration, done = self.sim, self.start, self._duration, self._site_done
        for job in self.site.start_now(now):
            start[job] = now
            sim.at(now + duration[job], done, job)

    def _pass(self, _: object) -> None:
        self._pending = False
        now = self.sim.now
        self._start_site(now)
        if self.cloud is not None:
            self.start_cloud(now)
            if self.strategy.reacts:
                self.strategy.on_change(self, now)
                self._start_site(now)  # a redirect may have moved site reservations up
                self.start_cloud(now)


def _column(name: str, values: npt.ArrayLike, n: int) -> Floats:
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (n,):
        raise ValueError(f"{name} has shape {arr.shape}, expected ({n},) (one per job)")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite for every job")
    return arr


def replay(
    submit: npt.ArrayLike,
    procs: npt.ArrayLike,
    runtime: npt.ArrayLike,
    requested: npt.ArrayLike,
    *,
    site_procs: int,
    strategy: str | Strategy,
    cloud: CloudModel | None = None,
    deadlines: npt.ArrayLike | None = None,
    seed: int = 0,
    progress: Callable[[float], None] | None = None,
) -> ReplayResult:
    """Replay jobs (one array entry each; times in seconds) under a strategy set.

    ``strategy`` is a name from :data:`~elasticsite.policies.strategies.STRATEGIES` or a
    strategy object (e.g. ``Aggressive(reject=True)``). ``deadlines`` are absolute
    times, NaN for best-effort jobs. ``progress(now)`` is called now and then with
    the simulated clock. Raises ``ValueError`` for a job larger than the site, a
    non-positive requested time or a cloud model with multi-core VMs.
    """
    sub = _column("submit", submit, int(np.size(submit)))
    n = len(sub)
    nprocs = np.asarray(procs)
    if nprocs.shape != (n,) or not np.array_equal(nprocs, np.round(nprocs)):
        raise ValueError("procs must hold one whole number of processors per job")
    run = _column("runtime", runtime, n)
    req = _column("requested", requested, n)
    if site_procs <= 0:
        raise ValueError(f"site_procs must be > 0, got {site_procs}")
    bad = (nprocs < 1) | (nprocs > site_procs) | ~(req > 0) | (run < 0)
    if bad.any():
        j = int(np.argmax(bad))
        raise ValueError(
            f"job {j} (procs {nprocs[j]}, runtime {run[j]}, requested {req[j]}) cannot run: "
            f"it needs 1..{site_procs} processors, runtime >= 0 and requested time > 0"
        )
    if cloud is not None and cloud.cores_per_vm != 1:
        raise ValueError("replay runs one single-core VM per processor; set cores_per_vm=1")
    work = np.minimum(run, req)  # a job is killed at its requested time
    dl = np.full(n, np.nan) if deadlines is None else np.asarray(deadlines, dtype=np.float64)
    if dl.shape != (n,):
        raise ValueError(f"deadlines has shape {dl.shape}, expected ({n},) (one per job)")
    plan = get_strategy(strategy) if isinstance(strategy, str) else strategy
    state = _Replay(
        sub,
        nprocs.astype(np.int64).tolist(),
        work.tolist(),
        req.tolist(),
        np.where(np.isnan(dl), math.inf, dl).tolist(),
        site_procs,
        plan,
        cloud,
        seed,
    )
    if n:
        state.sim.at(float(sub[state._order[0]]), state.arrive)
    state.sim.run(progress=progress)
    return ReplayResult(
        jobs=JobRecords(
            sub,
            state.start,
            state.finish,
            nprocs.astype(np.float64),
            work,
            req,
            dl,
            np.asarray(state.where, dtype=np.int64),
            np.asarray(state.rejected, dtype=np.bool_),
        ),
        vm_start=np.asarray(state.vm_start, dtype=np.float64),
        vm_end=np.asarray(state.vm_end, dtype=np.float64),
        site_procs=site_procs,
        cloud=cloud,
        strategy=plan.name,
        events=state.sim.events,
    )
