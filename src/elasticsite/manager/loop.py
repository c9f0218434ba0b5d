"""The decision loop: every ``interval``, sense -> reconcile -> decide -> act.

* **sense**: one batch snapshot and one ``describe()`` per cloud;
* **reconcile**: move each worker through its state machine from what the cloud
  and the batch system report; adopt tagged instances no record knows of;
  terminate instances of workers that are already finished;
* **decide**: :func:`elasticsite.policies.evaluate` on a :class:`SiteSnapshot`;
* **act**: drains and undrains inline (quick batch commands), launches and
  terminations on a thread pool so a slow cloud never blocks the loop. Their
  results are collected at the start of the next iteration, on the loop's thread,
  which is the only one that writes the state store.

Failed launches and terminations are retried with exponential backoff and counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from elasticsite.batch.base import BatchError, BatchSystem, Node, NodeState
from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, CloudDriver, CloudError, Instance
from elasticsite.clouds.base import InstanceState as IS
from elasticsite.config import ManagerConfig
from elasticsite.manager.store import StateStore, WorkerRecord, worker_number
from elasticsite.model import (
    Cause,
    CloudSpec,
    Decision,
    Drain,
    SiteSnapshot,
    Terminate,
    Transition,
    Worker,
    WorkerState,
)
from elasticsite.policies import Policy, PolicySettings, evaluate
from elasticsite.policies.power_save import decide_power

POWER_DOWN_GRACE = 15.0
"""Seconds a joined node may look down under power saving before it counts as lost."""

if TYPE_CHECKING:
    from elasticsite.manager.context_link import ContextLink

__all__ = ["Manager", "StepReport"]

log = logging.getLogger(__name__)
S = WorkerState
_UP = (NodeState.IDLE, NodeState.BUSY, NodeState.DRAINING, NodeState.DRAINED)
_FAIL_CAUSES = (Cause.STALLED, Cause.LOST, Cause.LAUNCH_ERROR)
_CHATTY = (Cause.JOB_STARTED, Cause.JOB_FINISHED)
_FINAL = (S.TERMINATED, S.FAILED)
# Worker state -> the node state that means "nothing changed".
_STEADY = {
    S.IDLE: NodeState.IDLE,
    S.BUSY: NodeState.BUSY,
    S.DRAINING: NodeState.DRAINING,
}


@dataclass(slots=True)
class StepReport:
    """What one iteration saw and did, for logs, progress displays and benchmarks."""

    at: float
    queued: int = 0
    running: int = 0
    workers: dict[str, int] = field(default_factory=dict)
    decision: Decision = field(default_factory=Decision)
    sense_seconds: float = 0.0
    decide_seconds: float = 0.0
    total_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


class Manager:
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
    ) -> None:
        self.config = config
        self.site_id = config.site_id
        self.batch = batch
        self.clouds = dict(clouds)
        self.specs = list(specs)
        self._spec = {s.name: s for s in specs}
        self.store = store
        self.policy = policy
        self.settings = settings
        self.clock = clock
        self.userdata = dict(userdata or {})
        self.context = context
        self.power_save = power_save
        self._down_since: dict[str, float] = {}
        """Slurm's power saving decides when nodes come and go (``elasticsite slurm``);
        the policy is not consulted and the batch system keeps its own node list."""
        self._pool = ThreadPoolExecutor(config.launch_threads, thread_name_prefix="es-cloud")
        self._inflight: dict[str, tuple[str, Future[Any]]] = {}
        self._transitions: list[Transition] = []
        self._dirty: set[str] = set()
        self._strays: set[str] = set()
        self._stop = threading.Event()
        self._abort = threading.Event()
        self.shutting_down = False
        self.last_report: StepReport | None = None
        known = store.get_meta("site_id")
        if known is not None and known != self.site_id:
            raise ValueError(
                f"state store {store.path} belongs to site {known!r}, not {self.site_id!r}"
            )
        store.set_meta("site_id", self.site_id)
        self.records: dict[str, WorkerRecord] = {r.worker.id: r for r in store.load()}
        self._known_ids = {r.worker.id for r in store.load(include_done=True)}
        self._reserved = store.last_worker_number()
        if self.records:
            log.info("resuming with %d workers from %s", len(self.records), store.path)

    # -- the loop ------------------------------------------------------------

    def run(self, on_step: Callable[[StepReport], None] | None = None) -> None:
        """Iterate until :meth:`stop`, then shut down as configured."""
        while not self._stop.is_set():
            started = time.monotonic()
            report = self._guarded_step()
            if on_step is not None and report is not None:
                on_step(report)
            self._stop.wait(max(0.0, self.config.interval - (time.monotonic() - started)))
        self.shutdown(on_step)

    def stop(self) -> None:
        """Stop after the current iteration; called again, cut a draining shutdown short."""
        if self._stop.is_set():
            self._abort.set()
        self._stop.set()

    def _guarded_step(self) -> StepReport | None:
        """One iteration that cannot kill the loop: on an unexpected error the in-memory
        view is rebuilt from the state store, which is the source of truth."""
        try:
            return self.step()
        except Exception:
            log.exception("iteration failed; reloading state from %s", self.store.path)
            self._bump("loop_errors")
            self._transitions.clear()
            self._dirty.clear()
            try:
                self.records = {r.worker.id: r for r in self.store.load()}
            except Exception:
                log.exception("cannot reload state; will retry next iteration")
            return None

    def step(self) -> StepReport:
        """One full iteration."""
        t0 = time.perf_counter()
        now = self.clock()
        report = StepReport(at=now)
        self._collect(now, report)
        try:
            view = self.batch.snapshot()
        except BatchError as exc:
            report.errors.append(f"batch snapshot failed: {exc}")
            log.warning("batch snapshot failed, skipping this iteration: %s", exc)
            self._bump("sense_errors")
            self._flush()
            return report
        instances: dict[str, dict[str, Instance]] = {}
        for name, driver in self.clouds.items():
            try:
                found = driver.describe()
            except CloudError as exc:
                report.errors.append(f"cloud {name}: describe failed: {exc}")
                log.warning("cloud %s: describe failed: %s", name, exc)
                self._bump("describe_errors")
                continue
            instances[name] = {i.tags.get(WORKER_TAG) or i.name: i for i in found}
        self._reserve_tagged(instances)
        report.sense_seconds = time.perf_counter() - t0
        nodes = {n.name: n for n in view.nodes}
        if self.power_save and not self.shutting_down:
            # Before reconciling: a node Slurm has just powered down is a release, not a loss.
            self._power_requests(now, report)
        self._reconcile(now, nodes, instances)
        if self.context is not None and self.context.pending():
            self.context.flush()  # departures the broker could not take earlier

        t1 = time.perf_counter()
        workers = [r.worker for r in self.records.values() if r.worker.state not in _FINAL]
        snapshot = SiteSnapshot(now, view.queued, view.running, workers, self.specs)
        if self.shutting_down:
            decision = self._shutdown_decision(snapshot)
        elif self.power_save:
            decision = Decision()  # the power requests were carried out before reconciling
        else:
            decision = evaluate(self.policy, snapshot, self.settings)
        report.decide_seconds = time.perf_counter() - t1
        self._act(now, decision, report)
        self._flush()

        report.decision = decision
        report.queued = len(view.queued)
        report.running = len(view.running)
        by_state: dict[WorkerState, int] = {}
        for r in self.records.values():
            st = r.worker.state
            by_state[st] = by_state.get(st, 0) + 1
        report.workers = {st.value: n for st, n in by_state.items()}
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

    def shutdown(self, on_step: Callable[[StepReport], None] | None = None) -> None:
        """Leave workers for the next start to adopt, or drain and terminate them all."""
        if self.config.on_shutdown == "drain":
            self.shutting_down = True
            deadline = time.monotonic() + self.config.shutdown_timeout
            while self.records and time.monotonic() < deadline and not self._abort.is_set():
                started = time.monotonic()
                report = self._guarded_step()
                if on_step is not None and report is not None:
                    on_step(report)
                if not self.records:
                    break
                self._abort.wait(max(0.0, self.config.interval - (time.monotonic() - started)))
            if self.records:
                log.warning(
                    "stopped with %d workers still up (%s); the next start adopts them",
                    len(self.records),
                    "cut short" if self._abort.is_set() else "shutdown timed out",
                )
        self._pool.shutdown(wait=True)
        self._collect(self.clock(), StepReport(at=self.clock()))
        self._flush()
        self.store.close()

    # -- reconcile -----------------------------------------------------------

    def _reconcile(
        self, now: float, nodes: dict[str, Node], instances: dict[str, dict[str, Instance]]
    ) -> None:
        grace = max(30.0, 3 * self.config.interval)
        inflight = self._inflight
        running, up = IS.RUNNING, _STEADY
        for rec in list(self.records.values()):
            w = rec.worker
            cloud = instances.get(w.cloud)
            inst = cloud.get(w.id) if cloud is not None else None
            node = nodes.get(w.node or w.id)
            st = w.state
            # Fast path, the common case on a large site: a joined worker whose node and
            # instance say nothing new (or whose cloud could not be asked this time).
            if (
                node is not None
                and up.get(st) is node.state
                and (cloud is None or (inst is not None and inst.state is running))
            ):
                w.running_jobs = node.running_jobs
                w.free_cores = node.free_cores
                continue
            cloud_ok = cloud is not None
            busy = w.id in inflight

            if st is S.REQUESTED and not busy:
                if inst is not None and inst.state not in (IS.TERMINATED, IS.ERROR):
                    w.instance_id = inst.id
                    self._move(rec, S.BOOTING, now, Cause.BOOTED)
                elif inst is not None and inst.state is IS.ERROR:
                    self._move(rec, S.FAILED, now, Cause.LAUNCH_ERROR)
                elif cloud_ok and now >= rec.next_attempt_at:
                    self._submit_launch(rec)
                st = w.state

            if st is S.BOOTING:
                if node is not None and node.state in _UP:
                    self._update_load(w, node)
                    # Date the join when the node came up, not when this loop noticed.
                    joined = now
                    if node.registered_at is not None:
                        joined = min(now, max(w.state_since, node.registered_at))
                    if node.state in (NodeState.DRAINING, NodeState.DRAINED):
                        self._move(rec, S.DRAINING, joined, Cause.JOINED)
                    else:
                        to = S.BUSY if w.running_jobs else S.IDLE
                        self._move(rec, to, joined, Cause.JOINED)
                elif cloud_ok and not busy and self._vanished(inst, w, now, grace):
                    self._move(rec, S.FAILED, now, Cause.LOST)
                continue

            if st in (S.IDLE, S.BUSY, S.DRAINING):
                lost_heartbeat = node is None or node.state is NodeState.DOWN
                if lost_heartbeat and self.power_save:
                    # Slurm marks a node powering down before its SuspendProgram has told
                    # us: wait a little for that request before calling the node lost.
                    since = self._down_since.setdefault(w.id, now)
                    if now - since < POWER_DOWN_GRACE:
                        continue
                self._down_since.pop(w.id, None)
                if lost_heartbeat or (cloud_ok and self._vanished(inst, w, now, grace)):
                    self._move(rec, S.FAILED, now, Cause.LOST)
                    continue
                assert node is not None
                self._update_load(w, node)
                if node.state is NodeState.UNKNOWN:
                    continue
                draining = node.state in (NodeState.DRAINING, NodeState.DRAINED)
                if st is S.DRAINING:
                    if not draining:
                        to = S.BUSY if w.running_jobs else S.IDLE
                        self._move(rec, to, now, Cause.OPERATOR)
                elif draining:
                    self._move(rec, S.DRAINING, now, Cause.OPERATOR)
                elif st is S.IDLE and w.running_jobs:
                    self._move(rec, S.BUSY, now, Cause.JOB_STARTED)
                elif st is S.BUSY and not w.running_jobs:
                    self._move(rec, S.IDLE, now, Cause.JOB_FINISHED)
                continue

        # Second pass: take down what must go (including workers failed just now).
        for rec in list(self.records.values()):
            w = rec.worker
            if not (w.state is S.TERMINATING or (w.state is S.FAILED and not rec.instance_gone)):
                continue
            cloud = instances.get(w.cloud)
            if cloud is None or w.id in self._inflight:
                continue
            inst = cloud.get(w.id)
            if inst is None or inst.state is IS.TERMINATED:
                try:
                    if not self.power_save:
                        self.batch.remove_node(w.node or w.id)
                except BatchError as exc:
                    log.warning("removing node %s failed (will retry): %s", w.node, exc)
                    self._bump("remove_node_errors")
                    continue
                rec.instance_gone = True
                self._dirty.add(w.id)
                if self.context is not None:
                    self.context.forget(w.node or w.id)
                if w.state is S.TERMINATING:
                    self._move(rec, S.TERMINATED, now, Cause.CLOUD_REPORTED)
            elif now >= rec.next_attempt_at:
                self._submit_terminate(rec, inst.id)

        self._adopt(now, instances)

    @staticmethod
    def _update_load(w: Worker, node: Node) -> None:
        w.running_jobs = node.running_jobs
        w.free_cores = node.free_cores

    @staticmethod
    def _vanished(inst: Instance | None, w: Worker, now: float, grace: float) -> bool:
        if inst is None:
            return now - w.state_since > grace
        return inst.state in (IS.TERMINATED, IS.ERROR)

    def _reserve_tagged(self, instances: dict[str, dict[str, Instance]]) -> None:
        """Keep the id counter beyond every worker id the clouds' tags show, before any
        launch: an instance whose record was lost (with the counter's last bump) keeps
        its id, and no new worker is given it."""
        seen = (worker_number(wid) for found in instances.values() for wid in found)
        highest = max((n for n in seen if n is not None), default=0)
        if highest > self._reserved:
            log.warning("worker ids up to %d are in use by instances; reserving them", highest)
            self.store.reserve_worker_numbers(highest)
            self._reserved = highest

    def _adopt(self, now: float, instances: dict[str, dict[str, Instance]]) -> None:
        """Tagged instances no live record knows of: adopt new ones, clean up stale ones."""
        for cloud_name, found in instances.items():
            spec = self._spec.get(cloud_name)
            for wid, inst in found.items():
                if wid in self.records or inst.tags.get(SITE_TAG) != self.site_id:
                    continue
                if inst.state in (IS.TERMINATED, IS.STOPPING):
                    continue
                if wid in self._known_ids or spec is None or self.store.has_worker(wid):
                    # Its worker is finished; the instance must not outlive it.
                    if inst.id not in self._strays:
                        log.warning("terminating stray instance %s (%s)", inst.id, wid)
                        self._strays.add(inst.id)
                        self._bump("strays_terminated")
                        self._pool.submit(self.clouds[cloud_name].terminate, [inst.id])
                    continue
                vm = spec.default_vm
                w = Worker(
                    id=wid,
                    cloud=cloud_name,
                    vm_type=vm.name,
                    cores=vm.cores,
                    requested_at=inst.created_at or now,
                    instance_id=inst.id,
                )
                rec = WorkerRecord(w)
                self.records[wid] = rec
                self._known_ids.add(wid)
                self._record_new(rec, now, Cause.ADOPTED)
                self._move(rec, S.BOOTING, now, Cause.ADOPTED)
                self._bump("adopted")
                log.info("adopted instance %s as worker %s", inst.id, wid)

    # -- act -----------------------------------------------------------------

    def _act(self, now: float, decision: Decision, report: StepReport) -> None:
        for t in decision.terminate:
            rec = self.records.get(t.worker_id)
            if rec is None or not rec.worker.state.live:
                continue
            to = S.FAILED if t.cause in _FAIL_CAUSES else S.TERMINATING
            self._move(rec, to, now, t.cause)
            rec.attempts = 0
            rec.next_attempt_at = 0.0
            self._dirty.add(rec.worker.id)
        for d in decision.drain:
            rec = self.records.get(d.worker_id)
            if rec is None or rec.worker.state not in (S.IDLE, S.BUSY, S.BOOTING):
                continue
            node = rec.worker.node or rec.worker.id
            try:
                self.batch.drain(node, f"elasticsite: {d.cause}")
            except BatchError as exc:
                report.errors.append(f"drain {node}: {exc}")
                self._bump("drain_errors")
                continue
            self._move(rec, S.DRAINING, now, d.cause)
        for u in decision.undrain:
            rec = self.records.get(u.worker_id)
            if rec is None or rec.worker.state is not S.DRAINING:
                continue
            node = rec.worker.node or rec.worker.id
            try:
                self.batch.undrain(node)
            except BatchError as exc:
                report.errors.append(f"undrain {node}: {exc}")
                self._bump("undrain_errors")
                continue
            to = S.BUSY if rec.worker.running_jobs else S.IDLE
            self._move(rec, to, now, u.cause)
        fresh: list[WorkerRecord] = []
        for launch in decision.launch:
            spec = self._spec[launch.cloud]
            vm = next((v for v in spec.vm_types if v.name == launch.vm_type), spec.default_vm)
            ids = self.store.new_worker_ids(launch.cloud, launch.count, self._known_ids)
            self._reserved = max([self._reserved, *(worker_number(i) or 0 for i in ids)])
            for i, wid in enumerate(ids):
                w = Worker(
                    id=wid, cloud=launch.cloud, vm_type=vm.name, cores=vm.cores, requested_at=now
                )
                if i < len(launch.nodes):
                    w.node = launch.nodes[i]
                rec = WorkerRecord(w)
                self.records[wid] = rec
                self._known_ids.add(wid)
                self._record_new(rec, now, launch.cause)
                fresh.append(rec)
        if fresh:
            # Persist the rows, and their count in the same commit, before asking the
            # cloud: a crash now leaves records that the next start relaunches
            # (idempotently, by name) or adopts, and no launch goes uncounted.
            with self.store.transaction():
                self._flush()
                self.store.bump("launched", len(fresh))
            for rec in fresh:
                self._submit_launch(rec)

    def _power_requests(self, now: float, report: StepReport) -> None:
        """Carry out what Slurm's ResumeProgram/SuspendProgram asked since the last step."""
        last: dict[str, str] = {}
        for action, node, _at in self.store.take_power_requests():
            last.pop(node, None)
            last[node] = action  # a node's later request overrides its earlier one
        if not last:
            return
        resume = [n for n, a in last.items() if a == "resume"]
        suspend = [n for n, a in last.items() if a == "suspend"]
        workers = [r.worker for r in self.records.values() if r.worker.state not in _FINAL]
        snapshot = SiteSnapshot(now, [], [], workers, self.specs)
        planned = decide_power(snapshot, self.settings, resume, suspend)
        if planned.refused:
            msg = f"power saving: no cloud may take {', '.join(planned.refused)} now"
            log.warning("%s (caps or spend limit); Slurm's resume timeout will apply", msg)
            report.errors.append(msg)
            self._bump("power_refused", len(planned.refused))
        log.info("power saving: resume %s, suspend %s", resume or "-", suspend or "-")
        self._act(now, planned.decision, report)
        report.decision = planned.decision

    def _shutdown_decision(self, snapshot: SiteSnapshot) -> Decision:
        d = Decision()
        for w in snapshot.workers:
            if w.state.pending:
                d.terminate.append(Terminate(w.id, Cause.SHUTDOWN))
            elif w.state in (S.IDLE, S.BUSY):
                d.drain.append(Drain(w.id, Cause.SHUTDOWN))
            elif w.state is S.DRAINING and w.running_jobs == 0:
                d.terminate.append(Terminate(w.id, Cause.DRAINED))
        return d

    # -- cloud calls on the pool -------------------------------------------

    def _submit_launch(self, rec: WorkerRecord) -> None:
        w = rec.worker
        driver = self.clouds[w.cloud]
        spec = self._spec[w.cloud]
        vm = next((v for v in spec.vm_types if v.name == w.vm_type), spec.default_vm)
        node = w.node or w.id
        userdata = {
            **self.userdata,
            "site_id": self.site_id,
            "worker_id": w.id,
            "node": node,
            "cloud": w.cloud,
            "cores": str(w.cores),
        }
        tags = {SITE_TAG: self.site_id, WORKER_TAG: w.id}

        def launch() -> tuple[float, list[Instance]]:
            if not self.power_save:  # under power saving, Slurm declared the node itself
                self.batch.add_node(node, w.cores)
            found = driver.launch(vm, [w.id], userdata, tags)
            return self.clock(), found

        self._inflight[w.id] = ("launch", self._pool.submit(launch))

    def _submit_terminate(self, rec: WorkerRecord, instance_id: str) -> None:
        driver = self.clouds[rec.worker.cloud]
        self._inflight[rec.worker.id] = (
            "terminate",
            self._pool.submit(driver.terminate, [instance_id]),
        )

    def _collect(self, now: float, report: StepReport) -> None:
        for wid, (kind, fut) in list(self._inflight.items()):
            if not fut.done():
                continue
            del self._inflight[wid]
            rec = self.records.get(wid)
            if rec is None:
                continue
            exc = fut.exception()
            w = rec.worker
            if exc is None:
                if kind == "launch":
                    # Dated when the cloud answered, not when this loop looked.
                    answered, found = fut.result()
                    if found:
                        w.instance_id = found[0].id
                    if w.state is S.REQUESTED:
                        at = min(now, max(w.state_since, answered))
                        self._move(rec, S.BOOTING, at, Cause.BOOTED)
                    self._dirty.add(wid)
                continue
            rec.attempts += 1
            rec.last_error = f"{kind}: {exc}"
            self._bump(f"{kind}_errors")
            report.errors.append(f"{kind} {wid} failed (attempt {rec.attempts}): {exc}")
            log.warning("%s of %s failed (attempt %d): %s", kind, wid, rec.attempts, exc)
            if kind == "launch" and rec.attempts >= self.config.max_attempts and w.state.live:
                self._move(rec, S.FAILED, now, Cause.LAUNCH_ERROR)
            else:
                delay = self.config.retry_backoff * 2 ** (rec.attempts - 1)
                rec.next_attempt_at = now + min(delay, self.config.retry_backoff_max)
            self._dirty.add(wid)

    # -- bookkeeping ---------------------------------------------------------

    def _record_new(self, rec: WorkerRecord, now: float, cause: Cause | str) -> None:
        w = rec.worker
        t = Transition(w.id, None, S.REQUESTED, now, cause)
        log.info("worker %s: requested on %s (%s)", w.id, w.cloud, cause)
        w.history.append(t)
        self._transitions.append(t)
        self._dirty.add(w.id)

    def _move(self, rec: WorkerRecord, to: WorkerState, now: float, cause: Cause | str) -> None:
        w = rec.worker
        t = w.transition(to, now, cause)
        self._transitions.append(t)
        self._dirty.add(w.id)
        # Job starts and ends flip workers between idle and busy all the time: keep
        # those out of the default log; every other move is worth a line.
        level = logging.DEBUG if cause in _CHATTY else logging.INFO
        if log.isEnabledFor(level):
            before = t.from_state.value if t.from_state else "-"
            log.log(level, "worker %s: %s -> %s (%s)", w.id, before, to.value, cause)
        if len(w.history) > 64:
            del w.history[:-32]

    def _bump(self, name: str, by: int = 1) -> None:
        try:
            self.store.bump(name, by)
        except Exception:  # counters must never break a decision
            log.exception("could not count %s", name)

    def _flush(self) -> None:
        if not self._dirty and not self._transitions:
            return
        with self.store.transaction():
            for wid in self._dirty:
                rec = self.records.get(wid)
                if rec is not None:
                    self.store.save(rec)
            self.store.record(self._transitions)
        self._dirty.clear()
        self._transitions.clear()
        for wid, rec in list(self.records.items()):
            st = rec.worker.state
            if st is S.TERMINATED or (st is S.FAILED and rec.instance_gone):
                del self.records[wid]
