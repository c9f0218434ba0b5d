"""The I/O at both ends of a step that is not a command: what the clouds show, and the
plan's records written to the state store before any command runs.

Sensing asks every cloud at once (:class:`CloudSensor`), each ``describe()`` on a
thread of its own, and waits for the answers until the step's deadline
(``[manager] describe_timeout``, the interval by default). A cloud that has not
answered by then is *not sensed* this step: it is left out of what the core is
given, so its workers keep their states and none is declared lost for it; the step
goes on with the other clouds. Its describe goes on too (a cloud is never asked
again while it is still answering), and its answer serves the next step, judged as of
when it was asked (an instance started since is not missing from it). The store is
written on the loop's thread only.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from elasticsite.clouds.base import SITE_TAG, CloudDriver, CloudError, Instance
from elasticsite.core import (
    AddAndLaunch,
    CoreState,
    Outcome,
    Plan,
    TerminateInstance,
    by_tag,
    health,
)
from elasticsite.logs import ids
from elasticsite.manager.report import StepReport
from elasticsite.manager.store import StateStore, worker_number
from elasticsite.model import Cause, WorkerState

__all__ = [
    "CloudSensor",
    "Described",
    "cloud_resets",
    "note_cloud_errors",
    "persist",
    "reserve_tagged",
]

log = logging.getLogger("elasticsite.manager.loop")
S = WorkerState
_CHATTY = (Cause.JOB_STARTED, Cause.JOB_FINISHED)


class Described(dict[str, dict[str, Instance]]):
    """Each sensed cloud's instances by worker id (or name); ``listed``: when each was
    asked for (the step's time, or an earlier step's for a slow cloud); ``failed``:
    clouds whose ``describe()`` failed this step, ``late``: clouds that did not answer
    in time (both left out), ``problems``: what went wrong with each of those."""

    failed: int = 0
    late: list[str]
    listed: dict[str, float]
    problems: dict[str, dict[str, str]]

    def __init__(self) -> None:
        super().__init__()
        self.late = []
        self.listed = {}
        self.problems = {}


@dataclass
class _Asking:
    """One ``describe()`` running on its own thread."""

    started: float
    asked_at: float
    """The step's time (the manager's clock) when it was asked."""
    done: threading.Event = field(default_factory=threading.Event)
    finished: float = 0.0
    found: list[Instance] | None = None
    error: BaseException | None = None
    reported: bool = False
    """Its lateness was logged already (once per slow describe, not every step)."""


class _Describer:
    """One cloud's thread for its ``describe()`` calls, started at its first: a step
    hands it a question and goes on (a cloud is never asked while still answering, so
    one thread is enough). A daemon: a cloud that never answers must not keep the
    process alive."""

    def __init__(self, name: str, driver: CloudDriver) -> None:
        self.driver = driver
        self._questions: queue.SimpleQueue[_Asking | None] = queue.SimpleQueue()
        thread = threading.Thread(target=self._run, name=f"es-describe-{name}", daemon=True)
        thread.start()

    def put(self, asking: _Asking) -> None:
        self._questions.put(asking)

    def close(self) -> None:
        """End the thread once it has answered what it was asked."""
        self._questions.put(None)

    def _run(self) -> None:
        while (asking := self._questions.get()) is not None:
            try:
                asking.found = self.driver.describe()
            except BaseException as exc:  # reported on the loop's thread
                asking.error = exc
            finally:
                asking.finished = time.monotonic()
                asking.done.set()


class CloudSensor:
    """Asks each cloud's ``describe()`` at once and waits for them until a deadline.

    ``timeout``: seconds a step waits for the answers; an answer that comes later
    serves the next step. A cloud whose describe took longer than ``timeout`` rests as
    long again (up to ``max_rest`` seconds) before it is asked again, so listing takes
    at most half of a slow API's time, and launches and terminations the rest. A
    cloud the manager is busy with (a backlog of launches, terminations running) is
    not asked while its last listing is younger than ``max_defer`` seconds.
    """

    def __init__(
        self, clouds: Mapping[str, CloudDriver], timeout: float, max_rest: float,
        max_defer: float = 0.0,
    ) -> None:  # fmt: skip
        self.clouds = clouds
        self.timeout = timeout
        self.max_rest = max_rest
        self.max_defer = max_defer
        self._asked: dict[str, float] = {}
        self._deferred: set[str] = set()
        self._asking: dict[str, _Asking] = {}
        self._resting: dict[str, tuple[float, float]] = {}
        """Clouds whose last describe was slow: until when they rest, and how long it took."""
        self._began: float | None = None
        self._describers: dict[str, _Describer] = {}

    def _ask(self, name: str, driver: CloudDriver, now: float) -> _Asking:
        asking = _Asking(time.monotonic(), now)
        describer = self._describers.get(name)
        if describer is None:
            describer = self._describers[name] = _Describer(name, driver)
        describer.put(asking)
        return asking

    def close(self) -> None:
        """End the clouds' describe threads (a describe still running finishes first)."""
        for describer in self._describers.values():
            describer.close()
        self._describers.clear()

    def ask(self, now: float, busy: Collection[str] = ()) -> None:
        """Ask every cloud not still answering the last question, nor resting, nor
        ``busy`` (for a while), at the step's time ``now``; the step's deadline runs
        from here."""
        self._began = began = time.monotonic()
        self._deferred.clear()
        for name, driver in self.clouds.items():
            if name in self._resting and self._resting[name][0] <= began:
                del self._resting[name]
            if name in self._asking or name in self._resting:
                continue
            if name in busy and began - self._asked.get(name, began) < self.max_defer:
                self._deferred.add(name)
                continue
            self._asked[name] = began
            self._asking[name] = self._ask(name, driver, now)

    def sense(self, report: StepReport, now: float) -> Described:
        """Every cloud that answered in time, by worker id; the others reported."""
        if self._began is None:
            self.ask(now)
        assert self._began is not None
        deadline, self._began = self._began + self.timeout, None
        for waiting in self._asking.values():
            waiting.done.wait(max(0.0, deadline - time.monotonic()))
        instances = Described()
        for name in self.clouds:
            asking = self._asking.get(name)
            if name in self._deferred:  # on purpose: its commands' answers will tell
                report.unsensed.append(name)
                continue
            if asking is None:
                took = self._resting[name][1]
                self._unsensed(name, f"resting after a describe that took {took:.0f} s",
                               report, instances)  # fmt: skip
                continue
            if not asking.done.is_set():
                self._late(name, asking, report, instances)
                continue
            del self._asking[name]
            took = asking.finished - asking.started
            if took > self.timeout:  # rests as long, up to max_rest
                self._resting[name] = (asking.finished + min(took, self.max_rest), took)
            if asking.error is not None:
                self._failed(name, asking.error, report, instances)
            else:
                if asking.reported:
                    log.warning("cloud %s: describe answered after %.0f s", name, took,
                                extra=ids(cloud=name))  # fmt: skip
                found = asking.found or []
                instances[name] = by_tag(found)
                instances.listed[name] = asking.asked_at
        return instances

    def _late(self, name: str, asking: _Asking, report: StepReport, instances: Described) -> None:
        message = f"no answer within {self.timeout:g} s"
        self._unsensed(name, message, report, instances)
        if not asking.reported:
            asking.reported = True
            log.warning("cloud %s: describe: %s; not sensed this step", name, message,
                        extra=ids(cloud=name))  # fmt: skip

    @staticmethod
    def _unsensed(name: str, why: str, report: StepReport, instances: Described) -> None:
        message = f"describe: {why}; not sensed this step"
        report.errors.append(f"cloud {name}: {message}")
        report.unsensed.append(name)
        instances.late.append(name)
        instances.problems[name] = {"what": "describe", "kind": "no_answer", "call": "",
                                    "error": message}  # fmt: skip

    @staticmethod
    def _failed(name: str, exc: BaseException, report: StepReport, instances: Described) -> None:
        if not isinstance(exc, CloudError):  # a driver's bug: the step goes on without it
            log.error("cloud %s: describe failed unexpectedly", name, exc_info=exc,
                      extra=ids(cloud=name))  # fmt: skip
        report.errors.append(f"cloud {name}: describe failed: {exc}")
        report.unsensed.append(name)
        log.warning("cloud %s: describe failed: %s", name, exc, extra=ids(cloud=name))
        instances.failed += 1
        kind = str(exc.kind) if isinstance(exc, CloudError) else "unknown"
        call = exc.call if isinstance(exc, CloudError) else ""
        instances.problems[name] = {"what": "describe", "kind": kind, "call": call,
                                    "error": str(exc) or type(exc).__name__}  # fmt: skip


def note_cloud_errors(
    errors: dict[str, dict[str, object]],
    now: float,
    outcomes: Iterable[Outcome],
    described: Described,
) -> bool:
    """Keep in ``errors`` the last thing that went wrong on each cloud (a failed launch
    or termination, a describe that failed or did not answer): when, what, its kind and
    the API call; True if any changed (for the store and ``elasticsite status``)."""
    changed = False
    for out in outcomes:
        command = out.command
        if out.error is None or not isinstance(command, AddAndLaunch | TerminateInstance):
            continue
        errors[command.cloud] = {"at": now, "what": command.kind,
                                 "kind": out.error_kind or "unknown", "call": out.call or "",
                                 "error": out.error}  # fmt: skip
        changed = True
    for name, problem in described.problems.items():
        errors[name] = {"at": now, **problem}
        changed = True
    return changed


def cloud_resets(store: StateStore, state: CoreState, plan: Plan) -> None:
    """Open the clouds an operator reset (``elasticsite cloud reset``)."""
    for name in store.take_cloud_resets():
        if health.reset(state, name):
            log.warning("cloud %s: reset by an operator; launches allowed again", name,
                        extra=ids(cloud=name))  # fmt: skip
        plan.health_changed = True


def reserve_tagged(
    store: StateStore,
    site_id: str,
    instances: Mapping[str, Mapping[str, Instance]],
    reserved: int,
    seen: dict[str, Mapping[str, Instance]] | None = None,
) -> int:
    """Keep the id counter beyond every worker id the clouds' tags show, before any
    launch: an instance whose record was lost (with the counter's last bump) keeps its
    id, and no new worker is given it. Returns the highest number reserved.

    ``seen`` keeps each cloud's last listing: only instances new since are looked at
    (a number once reserved stays reserved), so a large site's step does not parse
    every id every time."""
    highest = 0
    for cloud, found in instances.items():
        new: Iterable[str] = found
        if seen is not None:
            before = seen.get(cloud)
            seen[cloud] = found
            if before is not None:
                if found.keys() <= before.keys():  # one pass in C: nothing new
                    continue
                new = found.keys() - before.keys()
        for wid in new:
            if found[wid].tags.get(SITE_TAG) == site_id:
                n = worker_number(wid)
                if n is not None and n > highest:
                    highest = n
    if highest > reserved:
        log.warning("worker ids up to %d are in use by instances; reserving them", highest)
        store.reserve_worker_numbers(highest)
        return highest
    return reserved


def persist(store: StateStore, state: CoreState, plan: Plan) -> None:
    """Log the plan's transitions, then write them, the changed records and the pending
    departures in one transaction; forget the records of workers that are finished."""
    for t in plan.transitions:
        level = logging.DEBUG if t.cause in _CHATTY else logging.INFO
        if log.isEnabledFor(level):
            before = t.from_state.value if t.from_state else "-"
            rec = state.records.get(t.worker_id)
            w = rec.worker if rec is not None else None
            extra = ids(worker=t.worker_id, cloud=w and w.cloud, instance=w and w.instance_id,
                        node=w and w.node)  # fmt: skip
            log.log(level, "worker %s: %s -> %s (%s)", t.worker_id, before, t.to_state,
                    t.cause, extra=extra)  # fmt: skip
    if plan.transitions or plan.dirty or plan.counts or plan.departures_changed:
        with store.transaction():
            for wid in plan.dirty:
                rec = state.records.get(wid)
                if rec is not None:
                    store.save(rec)
            store.record(plan.transitions)
            for name, by in plan.counts.items():
                store.bump(name, by)
            if plan.departures_changed:  # kept until the broker has them: sent on restart
                store.save_departures(state.departures)
    if plan.health_changed:
        store.save_cloud_health(health.dump(state))
    if plan.held_changed:
        store.save_held_jobs(state.held.values())
    records = state.records
    for wid in plan.dirty:  # a record changes only through the plan
        rec = records.get(wid)
        if rec is None:
            continue
        w = rec.worker
        if w.state is S.TERMINATED or (w.state is S.FAILED and rec.instance_gone):
            del records[wid]
        elif len(w.history) > 64:
            del w.history[:-32]  # every transition is in the store
