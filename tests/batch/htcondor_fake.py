"""A stateful stand-in for an HTCondor schedd and collector, behind :class:`CondorPool`.

No HTCondor pool can run on this machine (no Debian package; the ``htcondor`` wheel has
only the bindings, and ``Schedd()`` fails with "Unable to locate local daemon"), so the
contract suite drives :class:`FakeCondorPool`. Provenance of the ads it answers with:

- every job ad is a copy of the recorded ``condor_q -long`` ad in
  ``fixtures/htcondor/7.4/condor_q-long.txt``, parsed by the real ``classad2`` module,
  with the attributes a schedd changes set per job (``ClusterId``, ``ProcId``,
  ``JobStatus``, ``QDate``, ``JobPrio``, ``RequestCpus``, ``Cmd``, ``Arguments``,
  ``AllowedExecuteDuration``, ``RemoteHost`` and ``JobCurrentStartDate`` while running);
- every slot ad is a copy of the recorded ``condor_status -long`` ad in
  ``fixtures/htcondor/7.6/condor_status-long.txt``, turned into the partitionable and
  dynamic slots of current HTCondor (``SlotType``, ``PartitionableSlot``,
  ``TotalSlotCpus``, ``Cpus``, ``State``/``Activity``, ``Draining`` as ``condor_drain``
  sets it), as the HTCondor manual describes them.

A job that completes or is removed leaves the queue for the schedd's history, its ad
then carrying what the HTCondor manual lists for an ended job (``JobStatus`` 4 or 3,
``ExitBySignal``, ``ExitCode`` or ``ExitSignal``, ``RemoveReason``,
``CompletionDate``, ``EnteredCurrentStatus``); the recorded ad's ``JobRunCount``
counts the job's starts. ``act`` answers with the counts a schedd returns
(``TotalSuccess``, ``TotalNotFound``, ``TotalPermissionDenied``).

Its negotiator is simple: after every change, idle jobs in ``JobPrio`` then cluster order
get the first startd with enough free cores that is not draining.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import classad2

from elasticsite.batch.htcondor_output import parse_long

FIXTURES = Path(__file__).parent / "fixtures" / "htcondor"


def _template(path: str) -> Any:
    (ad,) = parse_long((FIXTURES / path).read_text())
    return ad


def _copy(ad: Any) -> Any:
    return classad2.parseOne(ad.printOld(), classad2.ParserType.Old)


@dataclass
class FakeJob:
    cluster: int
    cores: int
    prio: int
    qdate: float
    cmd: str
    arguments: str
    walltime: int
    status: int = 1
    machine: str | None = None
    started: float | None = None
    last_machine: str | None = None
    runs: int = 0
    ended: float | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    remove_reason: str = ""


@dataclass
class FakeStartd:
    machine: str
    cores: int
    born: float
    draining: bool = False
    reason: str = ""
    jobs: list[int] = field(default_factory=list)
    owner: str | None = None
    """``ElasticsiteOwner`` as the worker's startd configuration sets it (None: unset)."""


class FakeCondorPool:
    """Schedd and collector in memory, as a :class:`~elasticsite.batch.htcondor.CondorPool`."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start
        self.queue: dict[int, FakeJob] = {}
        self.startds: dict[str, FakeStartd] = {}
        self.next_cluster = 1
        self.calls: list[tuple[str, ...]] = []
        self.ended: dict[int, FakeJob] = {}
        """Jobs that left the queue (completed, removed): the schedd's history."""
        self.denied: set[int] = set()
        """Clusters this caller may not act on (another user's, no queue superuser)."""
        self.owners: dict[int, str] = {}
        """Cluster -> the user it was submitted as, when not the caller."""
        self.job_template = _template("7.4/condor_q-long.txt")
        self.slot_template = _template("7.6/condor_status-long.txt")

    # -- test hooks -----------------------------------------------------------------------

    def startd_joins(self, machine: str, cores: int) -> None:
        """A worker's startd starts and advertises itself to the collector."""
        self.startds[machine] = FakeStartd(machine, cores, self.now)
        self._negotiate()

    def job_ends(self, job_id: str, code: int = 0, signal: int | None = None) -> None:
        """A running job exits with ``code``, or is killed by ``signal``."""
        job = self._job(job_id)
        assert job.status == 2, job
        job.exit_code, job.exit_signal = (None, signal) if signal else (code, None)
        self._leave(job, 4)
        self._negotiate()

    def _leave(self, job: FakeJob, status: int) -> None:
        if job.machine is not None:
            self.startds[job.machine].jobs.remove(job.cluster)
        job.status, job.machine, job.ended = status, None, self.now
        self.ended[job.cluster] = self.queue.pop(job.cluster)

    # -- queries ------------------------------------------------------------------------

    def jobs(self, constraint: str) -> list[Any]:
        self.calls.append(("jobs", constraint))
        expr = classad2.ExprTree(constraint)
        return [ad for ad in map(self._job_ad, self.queue.values()) if expr.eval(ad) is True]

    def history(self, constraint: str) -> list[Any]:
        self.calls.append(("history", constraint))
        expr = classad2.ExprTree(constraint)
        return [ad for ad in map(self._job_ad, self.ended.values()) if expr.eval(ad) is True][:1]

    def slots(self) -> list[Any]:
        self.calls.append(("slots",))
        ads = []
        for startd in self.startds.values():
            used = sum(self.queue[c].cores for c in startd.jobs)
            idle_state = ("Drained", "Retiring" if startd.jobs else "Idle")
            state = idle_state if startd.draining else ("Unclaimed", "Idle")
            ads.append(self._slot_ad(startd, "slot1", "Partitionable", startd.cores - used, state))
            for n, cluster in enumerate(startd.jobs, 1):
                activity = "Retiring" if startd.draining else "Busy"
                ads.append(
                    self._slot_ad(
                        startd, f"slot1_{n}", "Dynamic", self.queue[cluster].cores,
                        ("Claimed", activity),
                    )
                )  # fmt: skip
        return ads

    def _job_ad(self, job: FakeJob) -> Any:
        ad = _copy(self.job_template)
        for key in ("RemoteHost", "JobCurrentStartDate", "JobStartDate", "RemoteSlotID"):
            if key in ad:
                del ad[key]
        ad["ClusterId"] = job.cluster
        ad["ProcId"] = 0
        ad["GlobalJobId"] = f"fake-schedd#{job.cluster}.0#{int(job.qdate)}"
        ad["JobStatus"] = job.status
        ad["QDate"] = int(job.qdate)
        ad["JobPrio"] = job.prio
        ad["RequestCpus"] = job.cores
        ad["Cmd"] = job.cmd
        ad["Arguments"] = job.arguments
        ad["AllowedExecuteDuration"] = job.walltime
        ad["Owner"] = self.owners.get(job.cluster, "elastic")
        ad["JobRunCount"] = job.runs
        ad["EnteredCurrentStatus"] = int(job.ended or job.started or job.qdate)
        if job.last_machine is not None:
            ad["LastRemoteHost"] = f"slot1_1@{job.last_machine}"
        if job.status == 4:
            ad["CompletionDate"] = int(job.ended or self.now)
            ad["ExitBySignal"] = job.exit_signal is not None
            if job.exit_signal is not None:
                ad["ExitSignal"] = job.exit_signal
            else:
                ad["ExitCode"] = job.exit_code
        if job.status == 3:
            ad["RemoveReason"] = job.remove_reason
        if job.started is not None:  # kept in the history once it ended
            ad["JobCurrentStartDate"] = int(job.started)
            ad["JobStartDate"] = int(job.started)
        if job.status == 2 and job.machine is not None:
            ad["RemoteHost"] = (
                f"slot1_{self.startds[job.machine].jobs.index(job.cluster) + 1}@{job.machine}"
            )
        return ad

    def _slot_ad(
        self, startd: FakeStartd, slot: str, kind: str, cpus: int, state: tuple[str, str]
    ) -> Any:
        ad = _copy(self.slot_template)
        ad["Machine"] = startd.machine
        ad["Name"] = f"{slot}@{startd.machine}"
        ad["SlotType"] = kind
        ad["Cpus"] = cpus
        if kind == "Partitionable":
            ad["PartitionableSlot"] = True
            ad["TotalSlotCpus"] = startd.cores
        else:
            ad["DynamicSlot"] = True
        ad["State"], ad["Activity"] = state
        ad["DaemonStartTime"] = int(startd.born)
        ad["LastHeardFrom"] = int(self.now)
        if startd.draining:
            ad["Draining"] = True
            ad["DrainReason"] = startd.reason
        if startd.owner is not None:
            ad["ElasticsiteOwner"] = startd.owner
        return ad

    # -- actions ------------------------------------------------------------------------

    def submit(self, description: Mapping[str, str]) -> int:
        self.calls.append(("submit", shlex.join(f"{k}={v}" for k, v in description.items())))
        self.now += 1.0
        assert description["universe"] == "vanilla"
        cluster = self.next_cluster
        self.next_cluster += 1
        self.queue[cluster] = FakeJob(
            cluster=cluster,
            cores=int(description["request_cpus"]),
            prio=int(description.get("priority", "0")),
            qdate=self.now,
            cmd=description["executable"],
            arguments=description["arguments"],
            walltime=int(description["allowed_execute_duration"]),
        )
        self._negotiate()
        return cluster

    def submit_as(self, user: str, description: Mapping[str, str]) -> int:
        """As ``condor_submit`` run as ``user``: the job is theirs (``owners``)."""
        cluster = self.submit(description)
        self.owners[cluster] = user
        return cluster

    def _job(self, job_id: str) -> FakeJob:
        cluster, _, proc = job_id.partition(".")
        job = self.queue.get(int(cluster))
        if job is None or proc not in ("", "0"):
            raise RuntimeError(f"Job {job_id} not found")  # what the bindings raise, roughly
        return job

    def edit(self, job_ids: Sequence[str], attribute: str, value: str) -> None:
        self.calls.append(("edit", *job_ids, attribute, value))
        assert attribute == "JobPrio"
        for job_id in job_ids:
            self._job(job_id).prio = int(value)
        self._negotiate()

    def act(self, action: str, job_ids: Sequence[str], reason: str) -> dict[str, int]:
        self.calls.append(("act", action, *job_ids))
        done = {"TotalSuccess": 0, "TotalPermissionDenied": 0}
        for job_id in job_ids:
            job = self._job(job_id)
            if job.cluster in self.denied:
                done["TotalPermissionDenied"] += 1
                continue
            done["TotalSuccess"] += 1
            if action == "Remove":
                job.remove_reason = reason
                self._leave(job, 3)
            elif action == "Hold":
                if job.machine is not None:
                    self.startds[job.machine].jobs.remove(job.cluster)
                job.status, job.machine, job.started = 5, None, None
            elif action == "Release" and job.status == 5:
                job.status = 1
        self._negotiate()
        return done

    def drain(self, machine: str, mode: str, reason: str) -> None:
        self.calls.append(("drain", machine, mode))
        startd = self.startds[machine]
        if startd.draining:
            raise RuntimeError(f"startd {machine} is already draining")
        startd.draining, startd.reason = True, reason

    def cancel_drain(self, machine: str) -> None:
        self.calls.append(("cancel_drain", machine))
        startd = self.startds[machine]
        startd.draining, startd.reason = False, ""
        self._negotiate()

    def off_peaceful(self, machine: str) -> None:
        self.calls.append(("off_peaceful", machine))
        startd = self.startds[machine]
        assert not startd.jobs, "peaceful off with jobs would wait for them"
        del self.startds[machine]

    def set_owner(self, machine: str, user: str) -> None:
        """As a runtime ``ElasticsiteOwner`` and a reconfig of the startd would."""
        self.calls.append(("set_owner", machine, user))
        self.startds[machine].owner = user
        self._negotiate()

    def _negotiate(self) -> None:
        idle = sorted(
            (j for j in self.queue.values() if j.status == 1), key=lambda j: (-j.prio, j.cluster)
        )
        for job in idle:
            for startd in self.startds.values():
                used = sum(self.queue[c].cores for c in startd.jobs)
                owner = self.owners.get(job.cluster, "elastic")
                if startd.owner and startd.owner != owner:  # its START expression
                    continue
                if not startd.draining and startd.cores - used >= job.cores:
                    job.status, job.machine, job.started = 2, startd.machine, self.now
                    job.last_machine = startd.machine
                    job.runs += 1
                    startd.jobs.append(job.cluster)
                    break
