"""The decision loop: every ``interval``, sense -> core -> persist -> run commands.

* **sense**: collect the outcomes of the commands that finished, take one batch
  snapshot and one ``describe()`` per cloud, all clouds at once, waiting for them
  until the step's deadline (a cloud that misses it is not sensed this step);
* **core**: :func:`elasticsite.core.step`, as in the simulator, moves every worker from
  what was sensed, has :func:`elasticsite.policies.evaluate` decide on the snapshot it
  gives (or winds a stopping site down) and carries the decision out;
* **persist**: the step's transitions and changed records, in one transaction,
  *before* any command runs (a crash then leaves records a restart relaunches or
  adopts);
* **run**: every command (launches, terminations, drains, node removals, broker
  departures) on a thread pool, so nothing slow runs on the loop's thread, which is
  the only one that writes the state store; a step's terminations on one cloud go
  in as few calls as the cloud takes. Outcomes come back at the next step.

How steps follow each other until the manager stops, and how it winds a site down,
is :mod:`elasticsite.manager.lifetime`, the base of :class:`Manager`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from operator import attrgetter
from typing import TYPE_CHECKING

from elasticsite import core
from elasticsite.batch.base import BatchError, BatchSystem, Node
from elasticsite.clouds.base import CloudDriver, Instance
from elasticsite.config import ManagerConfig
from elasticsite.core import CoreState, Outcome, Plan, WorkerRecord, health
from elasticsite.core.runner import CommandRunner
from elasticsite.logs import ids
from elasticsite.manager.dispatch import Dispatch
from elasticsite.manager.lifetime import Lifetime
from elasticsite.manager.power import power_decision
from elasticsite.manager.report import StepReport
from elasticsite.manager.spending import Spending
from elasticsite.manager.step_io import (
    CloudSensor,
    Described,
    cloud_resets,
    note_cloud_errors,
    persist,
    reserve_tagged,
)
from elasticsite.manager.store import StateStore, worker_number
from elasticsite.manager.unservable import UnservableMarks
from elasticsite.model import CloudSpec, Decision, Job
from elasticsite.policies import Policy, PolicySettings, evaluate
from elasticsite.snapshot import SiteSnapshot
from elasticsite.spend import Spent

if TYPE_CHECKING:
    from elasticsite.history.recorder import Recorder
    from elasticsite.manager.context_link import ContextLink
    from elasticsite.manager.exporter import ManagerMetrics

__all__ = ["Manager", "StepReport"]

log = logging.getLogger(__name__)
POWER_DOWN_GRACE = 15.0
"""Seconds a joined node may look down under power saving before it counts as lost."""
DESCRIBE_TIMEOUT = 5.0
"""Seconds a step waits at least for the clouds' describes, unless configured."""
_WORKER = attrgetter("worker")


class Manager(Lifetime):
    """Keeps a site's cloud workers matched to its batch queue."""

    def __init__(
        self,
        *,
        config: ManagerConfig,
        batch: BatchSystem,
        clouds: Mapping[str, CloudDriver],
        specs: Sequence[CloudSpec],
        store: StateStore,
        policy: Policy,
        settings: PolicySettings,
        clock: Callable[[], float] = time.time,
        userdata: Mapping[str, str] | None = None,
        context: ContextLink | None = None,
        power_save: bool = False,
        executor: Executor | None = None,
        recorder: Recorder | None = None,
        metrics: ManagerMetrics | None = None,
        observers: Sequence[Callable[[StepReport], None]] = (),
        currency: str = "USD",
    ) -> None:
        self.config = config
        self.site_id = config.site_id
        self.batch = batch
        self.clouds = dict(clouds)
        self.specs = list(specs)
        self.store = store
        self.policy = policy
        self.settings = settings
        self.clock = clock
        self.context = context
        self.power_save = power_save
        """Slurm's power saving decides when nodes come and go (``elasticsite slurm``);
        the policy is not consulted and the batch system keeps its own node list."""
        self.core_config = core.core_config(
            policy,
            site_id=config.site_id,
            clouds=specs,
            interval=config.interval,
            max_attempts=config.max_attempts,
            retry_backoff=config.retry_backoff,
            retry_backoff_max=config.retry_backoff_max,
            power_save=power_save,
            power_down_grace=POWER_DOWN_GRACE,
            capacity_cooldown=config.capacity_cooldown,
            protect_after=config.protect_after,
            protect_cooldown=config.protect_cooldown,
        )
        pool = executor or ThreadPoolExecutor(config.launch_threads, thread_name_prefix="es-cloud")
        self.runner = CommandRunner(
            batch=batch,
            clouds=self.clouds,
            specs=self.specs,
            site_id=self.site_id,
            userdata=dict(userdata or {}),
            clock=clock,
            context=context,
        )
        self.dispatch = Dispatch(pool, self.runner)
        deadline = config.describe_timeout or max(config.interval, DESCRIBE_TIMEOUT)
        grace = self.core_config.grace
        self.sensor = CloudSensor(self.clouds, deadline, grace, max_defer=2 * grace)
        self._unsettled: list[Outcome] = []
        self._sensing = True
        """False for a wind-down's first step: it acts on the store alone, so the clouds'
        first listing is asked after its terminations and confirms them."""
        self._stop = threading.Event()
        self._abort = threading.Event()
        self.last_report: StepReport | None = None
        self.recorder = recorder
        """Hands each step's job starts and worker joins to the advisor's history."""
        self.metrics = metrics
        """Counts what each step did for Prometheus (``[manager] metrics_port``)."""
        self.observers = list(observers)
        """Called with each step's report after the step (the dashboard's history)."""
        self._record_failed = False
        known = store.get_meta("site_id")
        if known is not None and known != self.site_id:
            raise ValueError(
                f"state store {store.path} belongs to site {known!r}, not {self.site_id!r}"
            )
        store.set_meta("site_id", self.site_id)
        self.state = CoreState(
            records={r.worker.id: r for r in store.load()},
            known={r.worker.id for r in store.load(include_done=True)},
        )
        self.state.health = health.load(store.cloud_health())
        self.state.held = {j.id: j for j in store.held_jobs()}
        self.state.departures = store.departures()  # sent again at the first step
        self.cloud_errors = store.cloud_errors()
        """The last error of each cloud, with its kind and API call (``status`` shows it)."""
        self._reserved = store.last_worker_number()
        self._tagged: dict[str, Mapping[str, Instance]] = {}
        """Each cloud's last listing (:func:`reserve_tagged`)."""
        self.spending = Spending(store, self.specs, settings.budget, currency, clock())
        """What the site has spent (bills of finished workers) and its budget watch."""
        self.unservable = UnservableMarks(store, self.site_id)
        """The queued jobs no cloud can run, and why, as the store holds them."""
        if self.state.records:
            log.info("resuming with %d workers from %s", len(self.state.records), store.path)

    @property
    def records(self) -> dict[str, WorkerRecord]:
        """The unfinished workers, by id."""
        return self.state.records

    @property
    def shutting_down(self) -> bool:
        return self.state.shutting_down

    # -- one step ------------------------------------------------------------

    def step(self) -> StepReport:
        """One full iteration."""
        t0 = time.perf_counter()
        now = self.clock()
        report = StepReport(at=now)
        # Kept until the step that settles them has persisted: a step that fails before
        # that (its records reloaded from the store) must not lose what commands did.
        outcomes = self._unsettled = self._unsettled + self._outcomes()
        plan = Plan()
        cloud_resets(self.store, self.state, plan)
        sensing, self._sensing = self._sensing, True
        if sensing:
            busy = self.dispatch.busy(self.config.launch_threads)
            self.sensor.ask(now, busy)  # the clouds answer while the batch system does
        try:
            view = self.batch.snapshot()
        except BatchError as exc:
            report.errors.append(f"batch snapshot failed: {exc}")
            log.warning("batch snapshot failed, skipping this iteration: %s", exc)
            self._bump("sense_errors")
            # What finished is still settled and kept; nothing new is decided.
            core.settle(self.state, plan, self.core_config, now, outcomes)
            self._finish(plan, report)
            self._unsettled = []
            self._record(None, plan)
            return report
        instances = self._describe(report, outcomes, now) if sensing else Described()
        report.sense_seconds = time.perf_counter() - t0
        nodes: dict[str, Node] = {n.name: n for n in view.nodes}
        sensed = core.Sensed(
            now, outcomes, nodes, instances, view.queued, view.running, instances.listed
        )
        if self.power_save and not self.state.shutting_down:
            # Before reconciling: a node Slurm has just powered down is a release, not a loss.
            self._power(now, plan, report)
        spent: list[Callable[[], Spent]] = []

        def decide(snapshot: SiteSnapshot) -> Decision:
            spent.append(self._spent(now, snapshot))
            t1 = time.perf_counter()
            if self.power_save:
                return Decision()  # the power requests were carried out before reconciling
            decision = evaluate(self.policy, snapshot, self.settings)
            self._mark(decision.unservable, now)
            report.decide_seconds = time.perf_counter() - t1
            return decision

        snapshot, plan = core.step(
            self.state, self.core_config, sensed, decide, self._new_ids, plan
        )
        decision = plan.decision
        report.spent = spent[0] if spent else self._spent(now, snapshot)  # (winding down)
        report.unservable = self.unservable.current
        report.forecast = self.spending.review(
            now, report.spent, snapshot, report.decision if self.power_save else decision
        )
        self._finish(plan, report)
        self._unsettled = []
        self._record(view.running, plan)

        if not report.decision:
            report.decision = decision
        report.queued = len(view.queued)
        report.running = len(view.running)
        report.tally(map(_WORKER, self.state.records.values()))
        report.snapshot = snapshot
        report.total_seconds = time.perf_counter() - t0
        if decision:
            log.info(
                "queued=%d running=%d workers=%s -> %s",
                report.queued,
                report.running,
                report.workers,
                decision.summary(),
            )
        self.last_report = report
        return report

    def _close(self) -> None:
        self.dispatch.close()
        self.sensor.close()
        plan = Plan()
        now = self.clock()
        core.settle(self.state, plan, self.core_config, now, self._unsettled + self._outcomes())
        self._unsettled = []
        self._persist(plan)
        self._record(None, plan)
        if self.recorder is not None:
            self.recorder.close()
        for observer in self.observers:
            close = getattr(observer, "close", None)
            if close is not None:
                close()
        self.store.close()

    def _power(self, now: float, plan: Plan, report: StepReport) -> None:
        """Carry out what Slurm's ResumeProgram/SuspendProgram asked since the last step."""
        requests = self.store.take_power_requests()
        if not requests:
            return
        workers = [r.worker for r in self.state.records.values()]
        spent = None
        if self.settings.budget is not None:
            spent = self.spending.spent(now, workers).period_total
        power = power_decision(requests, workers, self.specs, self.settings, spent, now)
        for level, line in power.log:
            log.log(level, "%s", line)
        report.errors.extend(power.problems)
        if power.refused:
            self._bump("power_refused", len(power.refused))
        decision = report.decision = power.decision
        ids = self._new_ids(core.launches(decision))
        core.apply(self.state, plan, self.core_config, now, decision, ids)

    # -- sensing -------------------------------------------------------------

    def _outcomes(self) -> list[Outcome]:
        """The outcomes of the commands that finished, in the order they were run."""
        return self.dispatch.finished()

    def _describe(self, report: StepReport, outcomes: list[Outcome], now: float) -> Described:
        instances = self.sensor.sense(report, now)
        for name, n in (
            ("describe_errors", instances.failed),
            ("describe_late", len(instances.late)),
        ):
            if n:
                self._bump(name, n)
        if note_cloud_errors(self.cloud_errors, now, outcomes, instances):
            self.store.save_cloud_errors(self.cloud_errors)
        self._reserved = reserve_tagged(
            self.store, self.site_id, instances, self._reserved, self._tagged
        )
        return instances

    def _spent(self, now: float, snapshot: SiteSnapshot) -> Callable[[], Spent]:
        """What the site has spent by ``now``: counted at once only for a budget (the
        snapshot carries it), else when someone asks."""
        spent = self.spending.later(now, [r.worker for r in self.state.records.values()])
        if self.settings.budget is not None:
            snapshot.spent_in_period = spent().period_total
        return spent

    def _new_ids(self, wanted: Mapping[str, int]) -> dict[str, list[str]]:
        """Fresh worker ids from the store, ``wanted`` per cloud."""
        ids: dict[str, list[str]] = {}
        for cloud, count in wanted.items():
            ids[cloud] = self.store.new_worker_ids(cloud, count, self.state.known)
            self._reserved = max([self._reserved, *(worker_number(i) or 0 for i in ids[cloud])])
        return ids

    # -- persist, then run ---------------------------------------------------

    def _finish(self, plan: Plan, report: StepReport) -> None:
        """Persist what the step changed, then run its commands."""
        self._persist(plan)
        for message in plan.errors:
            log.warning("%s", message, extra=ids(site=self.site_id, **getattr(message, "ids", {})))
        report.errors.extend(plan.errors)
        report.transitions.extend(plan.transitions)
        report.commands.extend(plan.commands)
        records = self.state.records
        for t in plan.transitions:
            rec = records.get(t.worker_id)
            if rec is not None:
                report.worker_clouds[t.worker_id] = rec.worker.cloud
        for command in plan.commands:
            if isinstance(command, core.AddAndLaunch):
                rec = records.get(command.worker_id)
                if rec is not None and rec.attempts > 0:
                    report.retried.append(command.cloud)
        self.dispatch.submit(plan.commands)

    def _persist(self, plan: Plan) -> None:
        """Write the plan; the workers whose records it drops leave their bills, in the
        same transaction."""
        before = dict(self.state.records)
        writes = plan.transitions or plan.dirty or plan.counts or plan.departures_changed
        bills = []
        # A step that writes nothing takes no write lock (nor a commit on disk).
        with self.store.transaction() if writes else contextlib.nullcontext():
            persist(self.store, self.state, plan)
            records = self.state.records
            if len(records) < len(before):
                bills = self.spending.bills_for(
                    r.worker for wid, r in before.items() if wid not in records
                )
                self.store.add_bills(bills)
        self.spending.count(bills, self.clock())  # once they are stored

    def _record(self, running: list[Job] | None, plan: Plan) -> None:
        """Hand the step's news to the advisor's recorder (O(new events); it writes on its
        own thread): recording history must never break or slow a decision."""
        if self.recorder is None:
            return
        try:
            self.recorder.observe(running, plan, self.state.records)
        except Exception:
            if not self._record_failed:
                self._record_failed = True
                log.exception("advisor history: recording failed; the loop goes on without it")

    def _mark(self, marks: dict[str, str], now: float) -> None:
        try:
            self.unservable.update(marks, now)
        except Exception:  # telling about jobs must never break a decision
            log.exception("could not record the queued jobs no cloud can run")

    def _bump(self, name: str, by: int = 1) -> None:
        try:
            self.store.bump(name, by)
        except Exception:  # counters must never break a decision
            log.exception("could not count %s", name)
