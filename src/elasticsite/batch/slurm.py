"""Slurm, driven through its own commands and their machine-readable output.

One snapshot is two commands: one ``squeue`` for the jobs and ``sinfo --json`` for
the nodes (with their state flags), or ``scontrol show nodes --json`` on Slurm 23.02
and later, where ``sinfo --json`` reports partitions instead of nodes.

Jobs are read by default from ``squeue --array --format`` (``jobs_from="json"``
reads ``squeue --json``); how every output is read, and the node state table, are in
:mod:`elasticsite.batch.slurm_output`.

Nodes the manager adds are Slurm *dynamic nodes* (``scontrol create node ...
state=cloud``) carrying a feature (``elastic`` by default) that a ``Nodeset`` of
slurm.conf puts in a partition; the cloud worker then runs ``slurmd -Z`` and
registers under that name. Every native node state, with its flags, is translated
by :func:`node_state` (the table is in its docstring and in docs/slurm.md).

Errors: every failure is a :class:`BatchError`; a job or node Slurm does not know
is :class:`UnknownJob` / :class:`UnknownNode`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator

from elasticsite import attributes
from elasticsite.attributes import NODES, PARTITION
from elasticsite.batch.base import (
    BatchError,
    BatchView,
    JobDetail,
    JobRequest,
    UnknownJob,
    UnknownNode,
)
from elasticsite.batch.command import CommandError, CommandResult, Runner, run
from elasticsite.batch.identity import USER_NAME
from elasticsite.batch.slurm_jobs import JobReader
from elasticsite.batch.slurm_output import (
    SQUEUE_FORMAT_ARGV,
    jobs_per_node,
    load_json,
    nodes_from,
    parse_squeue,
    parse_squeue_format,
)
from elasticsite.batch.slurm_submit import sbatch_argv
from elasticsite.model import Job, JobState, state_text
from elasticsite.plugins import BatchPlugin, PluginOptions, number, validate_options

if TYPE_CHECKING:
    from elasticsite.plugins import SiteInfo

__all__ = ["SlurmBatch", "SlurmOptions"]

log = logging.getLogger(__name__)

_Seconds = Annotated[float, number("seconds", text=True)]


class SlurmOptions(PluginOptions):
    """A Slurm site's ``[batch.options]`` (the table in docs/slurm.md).

    ``command_timeout`` is how long any Slurm command may take (the runner's default
    when None); the others are :class:`SlurmBatch`'s arguments of the same names.
    """

    partition: str | None = None
    node_feature: str = "elastic"
    default_walltime: _Seconds = Field(3600.0, gt=0)
    include_held: bool = False
    jobs_from: Literal["format", "json"] = "format"
    demand_partitions: list[str] | None = None
    remove_timeout: _Seconds = Field(15.0, ge=0)
    command_timeout: Annotated[float | None, number("seconds", text=True)] = Field(None, gt=0)

    @field_validator("node_feature")
    @classmethod
    def _plain_word(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", v):
            raise ValueError("must be a plain word (letters, digits, '_', '.', '-')")
        return v

    @field_validator("demand_partitions", mode="before")
    @classmethod
    def _partition_names(cls, v: Any) -> Any:
        names = isinstance(v, list | tuple) and all(isinstance(p, str) and p for p in v)
        if v is not None and not names:
            raise ValueError("must be a list of partition names")
        return v


class SlurmBatch:
    """A Slurm cluster as a :class:`~elasticsite.batch.base.BatchSystem`.

    ``partition`` is where :meth:`submit` sends jobs (Slurm's default partition if
    None); ``node_feature`` is the feature given to nodes :meth:`add_node` creates,
    which slurm.conf's ``Nodeset`` maps to the partition of elastic nodes.
    Each job's partition, QOS, account, features, nodes and Slurm state come in its
    :attr:`~elasticsite.model.Job.attributes`. ``jobs_from`` picks how jobs
    are read: ``"format"`` (fast, the default) or ``"json"`` (``squeue --json``).
    ``demand_partitions``, when given, limits the jobs a snapshot reports to those
    submitted to one of these partitions (a job submitted to several counts if any is
    listed): the jobs cloud workers can serve, so jobs waiting for the static part of
    the cluster do not make the manager launch workers that cannot take them.
    """

    def __init__(
        self,
        runner: Runner = run,
        partition: str | None = None,
        node_feature: str = "elastic",
        default_walltime: float = 3600.0,
        include_held: bool = False,
        jobs_from: str = "format",
        demand_partitions: Sequence[str] | None = None,
        remove_timeout: float = 15.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.jobs_from = jobs_from
        self.demand_partitions = frozenset(demand_partitions or ())
        self._run = runner
        self.partition = partition
        self.node_feature = node_feature
        self.default_walltime = float(default_walltime)
        self.include_held = include_held
        self.remove_timeout = remove_timeout
        self.clock = clock
        self._nodes_argv: tuple[str, ...] = ("sinfo", "--json")
        self._job_reader = JobReader(self._try)

    @classmethod
    def from_options(cls, options: SlurmOptions | Mapping[str, Any]) -> SlurmBatch:
        """Build from validated :class:`SlurmOptions`, or from a plain options table
        (validated by that model: an unknown key or a bad value is one :class:`BatchError`
        line). The options are checked there alone, once."""
        if not isinstance(options, SlurmOptions):
            options = validate_options(SlurmOptions, options, "slurm", BatchError)
        runner: Runner = run
        if options.command_timeout is not None:
            seconds = options.command_timeout

            def timed(argv: Sequence[str]) -> CommandResult:
                return run(argv, timeout=seconds)

            runner = timed
        return cls(
            runner=runner,
            partition=options.partition,
            node_feature=options.node_feature,
            default_walltime=options.default_walltime,
            include_held=options.include_held,
            jobs_from=options.jobs_from,
            demand_partitions=options.demand_partitions,
            remove_timeout=options.remove_timeout,
        )

    # -- commands ------------------------------------------------------------------

    def _cmd(self, *argv: str) -> str:
        return self._run(argv).stdout

    def _try(self, *argv: str) -> tuple[bool, str]:
        """Run a command; (True, output) or (False, its error output)."""
        try:
            return True, self._cmd(*argv)
        except CommandError as exc:
            return False, exc.output

    # -- sensing ---------------------------------------------------------------------

    def _read_jobs(self, include_held: bool) -> tuple[list[Job], list[Job]]:
        if self.jobs_from == "json":
            text = self._cmd("squeue", "--json")
            return parse_squeue(text, self.default_walltime, include_held)
        text = self._cmd(*SQUEUE_FORMAT_ARGV)
        return parse_squeue_format(text, self.default_walltime, include_held)

    def snapshot(self) -> BatchView:
        """Queued and running jobs and all nodes: one ``squeue`` and one node query."""
        taken = self.clock()
        queued, running = self._read_jobs(self.include_held)
        data = load_json(self._cmd(*self._nodes_argv), " ".join(self._nodes_argv))
        if "nodes" not in data and "sinfo" in data:  # 23.02+: sinfo --json lists partitions
            self._nodes_argv = ("scontrol", "show", "nodes", "--json")
            data = load_json(self._cmd(*self._nodes_argv), " ".join(self._nodes_argv))
        nodes = nodes_from(data, jobs_per_node(running))
        if self.demand_partitions:
            wanted = self.demand_partitions

            def served(job: Job) -> bool:
                return not wanted.isdisjoint(attributes.values(job.attributes, PARTITION))

            queued = [j for j in queued if served(j)]
            running = [j for j in running if served(j)]
        return BatchView(taken_at=taken, queued=queued, running=running, nodes=nodes)

    # -- nodes -------------------------------------------------------------------------

    def _node_exists(self, name: str) -> bool:
        ok, out = self._try("scontrol", "show", "node", name, "--oneliner")
        if ok:
            return f"NodeName={name} " in out
        if "not found" in out:
            return False
        raise BatchError(f"node {name}: cannot ask slurm about it: {out}")

    def add_node(self, name: str, cores: int, pool: str = "") -> None:
        """Create a dynamic node (powered down, DOWN) that a ``slurmd -Z`` will fill; its
        features are ``node_feature`` and the VM type ``pool`` (jobs ask for it with
        ``--constraint``)."""
        _check_name(name)
        if cores < 1:
            raise BatchError(f"add_node: cores must be >= 1, got {cores}")
        if pool and not _NAME.fullmatch(pool):
            raise BatchError(f"add_node: {pool!r} is not a valid feature name")
        features = ",".join(f for f in (self.node_feature, pool) if f)
        ok, out = self._try(
            "scontrol", "create", f"nodename={name}", f"cpus={cores}",
            f"feature={features}", "state=cloud",
        )  # fmt: skip
        if not ok and not self._node_exists(name):
            raise BatchError(f"add_node {name}: scontrol create node failed: {out}")

    def drain(self, name: str, reason: str) -> None:
        """``state=drain``: running jobs go on, no new job starts there."""
        _check_name(name)
        reason = " ".join(reason.split()) or "drained by elasticsite"
        self._node_update(name, "state=drain", f"reason={reason}")

    def undrain(self, name: str) -> None:
        """``state=undrain``: clears the drain, leaves the rest (power, down) as it is."""
        _check_name(name)
        self._node_update(name, "state=undrain")

    def _node_update(self, name: str, *settings: str) -> None:
        # Ask first: slurmctld 22.05 was seen to crash (in slurm_conf_get_nodename) on
        # ``scontrol update nodename=X`` for an unknown X after dynamic nodes came and went.
        if not self._node_exists(name):
            raise UnknownNode(f"no node {name!r} in slurm")
        ok, out = self._try("scontrol", "update", f"nodename={name}", *settings)
        if not ok:
            if "Invalid node name" in out:
                raise UnknownNode(f"no node {name!r} in slurm")
            raise BatchError(f"node {name}: scontrol update {' '.join(settings)} failed: {out}")

    def set_owner(self, name: str, user: str) -> None:
        """A ``MAGNETIC`` reservation of the node for ``user`` (``elasticsite-NODE``):
        their jobs are drawn to it without asking for it, and no one else's starts
        there; handed to another user by updating it, deleted for ``""``."""
        _check_name(name)
        if not isinstance(user, str) or (user and not USER_NAME.fullmatch(user)):
            raise BatchError(f"set_owner: {user!r} is not a user name")
        held = f"reservationname={RESERVATION_PREFIX}{name}"
        if not user:
            self._unreserve(name)
            return
        ok, out = self._try("scontrol", "update", held, f"users={user}")
        if ok:
            return
        if "invalid" not in out.lower():
            raise BatchError(f"set_owner {name}: scontrol update reservation failed: {out}")
        if not self._node_exists(name):
            raise UnknownNode(f"no node {name!r} in slurm")
        ok, out = self._try(
            "scontrol", "create", "reservation", held, f"nodes={name}", f"users={user}",
            "starttime=now", "duration=infinite", "flags=magnetic",
        )  # fmt: skip
        if not ok:
            raise BatchError(f"set_owner {name}: scontrol create reservation failed: {out}")

    def _unreserve(self, name: str, requeue: bool = False) -> None:
        """Delete the node's reservation, if any. Slurm refuses while a job runs in it
        (``in use``): with ``requeue``, that job is requeued and the delete retried
        until ``remove_timeout``; else a BatchError."""
        deadline = time.monotonic() + self.remove_timeout
        while True:
            held = f"reservationname={RESERVATION_PREFIX}{name}"
            ok, out = self._try("scontrol", "delete", held)
            if ok or "invalid" in out.lower():
                return
            if not (requeue and "in use" in out) or time.monotonic() > deadline:
                raise BatchError(f"node {name}: scontrol delete reservation failed: {out}")
            jobs = self._jobs_on(name)  # again: the reservation may draw a job back
            if jobs:
                log.info("node %s removed: requeueing %s", name, ", ".join(jobs))
                self._try("scontrol", "requeue", ",".join(jobs))
            time.sleep(0.3)

    def remove_node(self, name: str) -> None:
        """Requeue what still runs there, delete its owner's reservation (Slurm keeps
        one naming a deleted node, and deletes no node in one), then ``scontrol
        delete``; an unknown node: no-op."""
        _check_name(name)
        self._unreserve(name, requeue=True)
        if not self._node_exists(name):  # already gone (and see _node_update)
            return
        deadline = time.monotonic() + self.remove_timeout
        requeued = False
        while True:
            # slurmctld 22.05 can crash (SIGSEGV in delete_nodes) deleting a dynamic node
            # that is already gone, so every retry asks first: someone may have beaten us
            if requeued and not self._node_exists(name):
                return
            ok, out = self._try("scontrol", "delete", f"nodename={name}")
            if ok or "Invalid node name" in out:
                return
            if "busy" not in out:
                raise BatchError(f"remove_node {name}: scontrol delete failed: {out}")
            if not requeued:
                jobs = self._jobs_on(name)
                if jobs:
                    log.info("node %s removed: requeueing %s", name, ", ".join(jobs))
                    self._try("scontrol", "requeue", ",".join(jobs))
                requeued = True
            if time.monotonic() > deadline:
                raise BatchError(
                    f"remove_node {name}: still busy after {self.remove_timeout:g} s "
                    f"(jobs completing there?): {out}"
                )
            time.sleep(0.3)

    def _jobs_on(self, name: str) -> list[str]:
        _, running = self._read_jobs(include_held=True)
        return [j.id for j in running if name in attributes.values(j.attributes, NODES)]

    # -- jobs --------------------------------------------------------------------------

    def submit(self, request: JobRequest) -> str:
        """``sbatch --parsable --wrap`` (:func:`~.slurm_submit.sbatch_argv`): the job id."""
        out = self._cmd(*sbatch_argv(request, self.partition)).strip()
        job_id = out.split(";", 1)[0].strip()
        if not job_id.isdigit():
            raise BatchError(f"submit: sbatch printed no job id: {out!r}")
        return job_id

    def _job_update(self, verb: str, job_id: str, *argv: str) -> tuple[bool, str]:
        _check_job(job_id)
        ok, out = self._try(*argv)
        if not ok and "configuration not available now" in out:
            # Slurm re-checks the job after the change and finds its partition without a
            # usable node yet (elastic nodes not booted): the change itself was applied.
            log.debug("%s %s: applied; slurm notes: %s", verb, job_id, out)
            ok = True
        if not ok and "Invalid job id" in out:
            raise UnknownJob(f"no job {job_id!r} in slurm")
        if not ok and "already completed" in out.lower():
            raise BatchError(f"{verb}: job {job_id} has already finished")
        return ok, out

    def set_priority(self, job_id: str, priority: int) -> None:
        """Raise (or lower) a job ``priority`` points above its normal Slurm priority.

        Done with ``nice=-priority`` (``scontrol update jobid=X nice=N``), the same knob
        :meth:`submit` turns: ``set_priority(job, 0)`` restores Slurm's own order, and
        the job keeps aging as usual. Negative nice values need a Slurm administrator.
        """
        ok, out = self._job_update(
            "set_priority", job_id, "scontrol", "update", f"jobid={job_id}", f"nice={-priority}"
        )
        if not ok:
            raise BatchError(f"set_priority: job {job_id}: {out}")

    def move_to_front(self, job_id: str) -> None:
        """``scontrol top``; if the job is still not first, a priority above every other.

        ``scontrol top`` only reorders a user's own jobs (same partition, account and
        QOS), so a job of someone else can stay behind: the priority raise covers it.
        A running job: no-op.
        """
        ok, out = self._job_update("move_to_front", job_id, "scontrol", "top", job_id)
        if not ok and "no longer pending" in out:
            return  # running already
        queued, running = self._read_jobs(include_held=True)
        if any(j.id == job_id for j in running):
            return
        ahead = [j for j in queued if j.id != job_id]
        mine = next((j for j in queued if j.id == job_id), None)
        if mine is None:
            raise BatchError(f"move_to_front: job {job_id} is not queued")
        if ahead and queued[0].id != job_id:  # fix its Slurm priority above all others
            top = max(j.priority for j in ahead)
            ok, out = self._job_update(
                "move_to_front", job_id, "scontrol", "update", f"jobid={job_id}",
                f"priority={min(top + 1, 0xFFFFFFFD)}",
            )  # fmt: skip
            if not ok:
                raise BatchError(f"move_to_front: job {job_id}: {out}")

    def preempt(self, job_id: str) -> None:
        """``scontrol requeue``: the running job is killed and queued again. Queued: no-op."""
        ok, out = self._job_update("preempt", job_id, "scontrol", "requeue", job_id)
        if not ok and "is pending" not in out:
            raise BatchError(f"preempt: job {job_id}: {out}")

    def redirect(self, job_id: str, target: str) -> None:
        """``scontrol update jobid=X partition=TARGET``: the pending job moves to the
        cloud's partition (a job already there: no-op). A started job raises UnknownJob."""
        if not _NAME.fullmatch(target or ""):
            raise BatchError(f"redirect: {target!r} is not a valid partition name")
        ok, out = self._job_update(
            "redirect", job_id, "scontrol", "update", f"jobid={job_id}", f"partition={target}"
        )
        if ok:
            return
        if "no longer pending" in out or "not pending" in out.lower():
            raise UnknownJob(f"redirect: job {job_id} is no longer queued")
        raise BatchError(f"redirect: job {job_id} to partition {target}: {out}")

    def hold(self, job_id: str) -> None:
        """``scontrol hold``: the pending job waits until released (held already: no-op).
        A started job raises UnknownJob."""
        _check_job(job_id)
        _, running = self._read_jobs(include_held=True)
        if any(j.id == job_id for j in running):  # scontrol would "hold" it, uselessly
            raise UnknownJob(f"hold: job {job_id} is no longer queued")
        ok, out = self._job_update("hold", job_id, "scontrol", "hold", job_id)
        if ok or "already held" in out.lower():
            return
        if "no longer pending" in out or "not pending" in out.lower():
            raise UnknownJob(f"hold: job {job_id} is no longer queued")
        raise BatchError(f"hold: job {job_id}: {out}")

    def release(self, job_id: str) -> None:
        """``scontrol release``: a held job may start again (a job not held: no-op)."""
        ok, out = self._job_update("release", job_id, "scontrol", "release", job_id)
        if not ok and "not held" not in out.lower() and "no longer pending" not in out:
            raise BatchError(f"release: job {job_id}: {out}")

    def cancel(self, job_id: str) -> None:
        """``scancel``: the queued, held or running job ends CANCELLED (Slurm decides
        who may: the job's owner, an operator or root). Cancelled already: no-op; ended
        otherwise: BatchError."""
        job = self.job(job_id)
        if job.state is JobState.CANCELLED:
            return
        if job.state.finished:
            raise BatchError(f"cancel: job {job_id} already ended ({state_text(job)})")
        ok, out = self._try("scancel", job_id)
        if ok:
            return
        if "Invalid job id" in out:
            raise UnknownJob(f"no job {job_id!r} in slurm")
        if "already completing or completed" in out:
            raise BatchError(f"cancel: job {job_id} already ended")
        raise BatchError(f"cancel: job {job_id}: scancel failed: {' '.join(out.split())}")

    def job(self, job_id: str) -> JobDetail:
        """``scontrol show job`` (``--json`` from Slurm 23.02, its text before); a job
        slurmctld no longer holds (``MinJobAge`` after its end) from ``sacct``, where
        accounting is configured. UnknownJob when neither knows it, saying why."""
        _check_job(job_id)
        return self._job_reader.read(job_id)


RESERVATION_PREFIX = "elasticsite-"
"""A node kept for one user is in the reservation of this prefix and its name."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_JOB = re.compile(r"\d+(_\d+)?")


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name or ""):
        raise BatchError(f"slurm: {name!r} is not a valid node name")


def _check_job(job_id: str) -> None:
    if not _JOB.fullmatch(str(job_id)):
        raise UnknownJob(f"no job {job_id!r} in slurm (ids are numbers, or ARRAY_TASK)")


def _create(options: SlurmOptions, site: SiteInfo) -> SlurmBatch:
    return SlurmBatch.from_options(options)


def _userdata(options: SlurmOptions, mode: str) -> dict[str, str]:
    """How a worker joins: external mode adds dynamic nodes, power saving starts the
    declared CLOUD nodes; either carries the elastic nodes' feature."""
    return {
        "slurm_node_mode": "cloud" if mode == "power_save" else "dynamic",
        "slurm_feature": options.node_feature,
    }


plugin = BatchPlugin(SlurmOptions, _create, modes=("external", "power_save"), userdata=_userdata)
"""The ``slurm`` entry point of ``elasticsite.batch``: the only system with power saving."""
