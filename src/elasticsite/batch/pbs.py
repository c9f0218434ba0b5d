"""PBS adapter: OpenPBS / PBS Professional (JSON output) and Torque (XML output).

Everything goes through the batch system's own commands, run by one
:data:`~elasticsite.batch.command.Runner` (tests replay recorded output through it).
What differs between the families (the commands' flags, the output format, how a node
is created) is one class each in :mod:`~elasticsite.batch.pbs_flavours`, of which the
adapter holds one; reading the output, and the node state table, are in
:mod:`~elasticsite.batch.pbs_output`. What every family shares:

=================  ============================================================================
remove_node        ``qrerun`` its jobs, then ``qmgr -c "delete node X"``
submit             ``qsub -N name -l <one node of C cores> -l walltime=H:MM:SS -p P script``
                   (another user's job: ``runuser -u USER -- qsub ...``, as root only)
set_priority       ``qalter -p P id``
move_to_front      ``qalter -p`` one above the queue's highest (``qorder`` at the 1023 ceiling)
preempt            ``qrerun id`` (the job goes back to the queue, keeping its id)
cancel             ``qdel id`` (the server decides who may: the owner, an operator, a manager)
job                ``qstat -f -F json -x id`` / ``qstat -f -x id`` (:mod:`.pbs_jobs`)
=================  ============================================================================

Errors: every failure is a :class:`BatchError`; a job or node the server does not know
is :class:`UnknownJob` / :class:`UnknownNode`.
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, ValidationInfo, field_validator

from elasticsite import attributes
from elasticsite.batch.base import (
    BatchError,
    BatchView,
    JobDetail,
    JobRequest,
    Node,
    UnknownJob,
    UnknownNode,
    checked_command,
)
from elasticsite.batch.command import CommandError, Runner, run
from elasticsite.batch.identity import checked_submitter, run_as
from elasticsite.batch.pbs_flavours import (
    FLAVOURS,
    OpenPbs,
    PbsFlavour,
    Torque,
    delete_node_command,
    detect_flavour,
    format_walltime,
    parse_jobs,
    parse_nodes,
    pbs_flavour,
    qalter_priority_command,
    qdel_command,
    qorder_command,
    qrerun_command,
)
from elasticsite.batch.pbs_output import (
    NODE_STATES,
    PbsJob,
    node_state,
    parse_walltime,
    request_cores,
    time_zone,
)
from elasticsite.model import JobState, state_text
from elasticsite.plugins import BatchPlugin, FilePath, PluginOptions, number, validate_options

if TYPE_CHECKING:
    from elasticsite.plugins import SiteInfo

__all__ = [
    "FLAVOURS",
    "NODE_STATES",
    "OpenPbs",
    "PbsBatch",
    "PbsFlavour",
    "PbsJob",
    "PbsOptions",
    "Torque",
    "delete_node_command",
    "detect_flavour",
    "format_walltime",
    "node_state",
    "parse_jobs",
    "parse_nodes",
    "parse_walltime",
    "pbs_flavour",
    "qalter_priority_command",
    "qorder_command",
    "qrerun_command",
    "request_cores",
]

PRIORITY_MIN, PRIORITY_MAX = -1024, 1023
"""The range ``qsub -p`` and ``qalter -p`` accept on every family."""

# -- the adapter -------------------------------------------------------------------------

_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*")
"""What ``qmgr -c "create node ..."`` gets: a host name, never more qmgr syntax."""


class PbsOptions(PluginOptions):
    """A PBS or Torque site's ``[batch.options]`` (the table in docs/pbs-htcondor.md):
    :class:`PbsBatch`'s arguments of the same names."""

    flavour: str | None = None
    queue: str = ""
    timezone: str = "UTC"
    default_walltime: Annotated[float, number("seconds", text=True)] = Field(3600.0, gt=0)
    job_name: str = "elasticsite"
    script_dir: FilePath | None = None

    @field_validator("flavour", "timezone")
    @classmethod
    def _known(cls, v: str | None, info: ValidationInfo) -> str | None:
        """A flavour or time zone the adapter knows, by the adapter's own lookup."""
        lookup = pbs_flavour if info.field_name == "flavour" else time_zone
        if v is not None:
            try:
                lookup(v)
            except BatchError as exc:
                raise ValueError(str(exc)) from None
        return v


class PbsBatch:
    """A PBS/Torque server driven through its commands.

    ``flavour`` is ``"openpbs"`` (also PBS Pro), ``"torque"`` or ``None`` (ask ``qstat
    --version`` once); it picks the :class:`PbsFlavour` the adapter holds as ``system``.
    ``timezone`` is the server's zone: OpenPBS prints times as local wall-clock text.
    ``default_walltime`` stands in for jobs that ask for none.
    """

    def __init__(
        self,
        flavour: str | None = None,
        *,
        runner: Runner = run,
        queue: str = "",
        timezone: str = "UTC",
        default_walltime: float = 3600.0,
        job_name: str = "elasticsite",
        script_dir: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.runner = runner
        self.system: PbsFlavour = (
            detect_flavour(runner) if flavour is None else pbs_flavour(flavour)
        )
        """What this server's family does its own way: commands, flags, output format."""
        self.queue = queue
        self.timezone = timezone
        self.default_walltime = float(default_walltime)
        self.job_name = job_name
        self.script_dir = script_dir
        self.clock = clock

    @classmethod
    def from_options(
        cls, options: PbsOptions | Mapping[str, Any], runner: Runner = run
    ) -> PbsBatch:
        """Build from validated :class:`PbsOptions`, or from a plain options table
        (validated by that model: an unknown key or a bad value is one :class:`BatchError`
        line). The options are checked there alone, once."""
        if not isinstance(options, PbsOptions):
            options = validate_options(PbsOptions, options, "PBS", BatchError)
        return cls(
            options.flavour,
            runner=runner,
            queue=options.queue,
            timezone=options.timezone,
            default_walltime=options.default_walltime,
            job_name=options.job_name,
            script_dir=options.script_dir,
        )

    @property
    def flavour(self) -> str:
        """The family's name, as a site configures it (``openpbs`` or ``torque``)."""
        return self.system.name

    # -- reading ------------------------------------------------------------------------

    def _run(self, argv: Sequence[str]) -> str:
        return self.runner(argv).stdout

    def _jobs(self) -> list[PbsJob]:
        jobs = self.system.parse_jobs(
            self._run(self.system.jobs_command()),
            timezone=self.timezone, default_walltime=self.default_walltime,
        )  # fmt: skip
        return jobs

    def _nodes(self) -> list[Node]:
        return self.system.parse_nodes(self._run(self.system.nodes_command()))

    def snapshot(self) -> BatchView:
        """Jobs then nodes (two commands: PBS has no single consistent read of both)."""
        now = self.clock()
        jobs = self._jobs()
        nodes = self._nodes()
        queued = [j.job for j in jobs if j.job.state.waiting]
        # The server starts the highest priority first and keeps its own order
        # (submission, or qorder's swaps) among equals: a stable sort keeps that order.
        queued.sort(key=lambda j: -j.priority)
        running = [j.job for j in jobs if j.job.state is JobState.RUNNING]
        return BatchView(taken_at=now, queued=queued, running=running, nodes=nodes)

    def _find(self, jobs: list[PbsJob], job_id: str) -> PbsJob:
        for candidate in jobs:
            full = candidate.job.id
            if job_id in (full, full.split(".")[0]):
                return candidate
        raise UnknownJob(f"no job {job_id!r} queued or running on the PBS server")

    def _node_names(self) -> set[str]:
        return {n.name for n in self._nodes()}

    def _require_node(self, name: str) -> None:
        if name not in self._node_names():
            raise UnknownNode(f"no node {name!r} on the PBS server")

    def _act(self, argv: Sequence[str], job_id: str = "", node: str = "") -> None:
        try:
            self.runner(argv)
        except CommandError as exc:
            output = exc.output.lower()
            if job_id and "unknown job" in output:
                raise UnknownJob(f"no job {job_id!r} on the PBS server ({exc})") from exc
            if node and "unknown node" in output:
                raise UnknownNode(f"no node {node!r} on the PBS server ({exc})") from exc
            raise

    # -- nodes --------------------------------------------------------------------------

    def add_node(self, name: str, cores: int, pool: str = "") -> None:
        """``qmgr create node`` (labelled with its VM type ``pool``, if given: a Torque
        property, an OpenPBS ``vm_type`` resource); a known node is left alone."""
        if not _NODE_NAME.fullmatch(name) or cores < 1:
            raise BatchError(f"add_node: need a host name and cores >= 1, got {name!r}, {cores}")
        if pool and not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,63}", pool):
            raise BatchError(f"add_node: {pool!r} is not a valid VM type label")
        if name in self._node_names():
            return
        self._act(self.system.create_node_command(name, cores))
        if pool:
            self._act(self.system.pool_command(name, pool), node=name)

    def drain(self, name: str, reason: str) -> None:
        """Mark the node OFFLINE with ``reason`` as its comment/note."""
        self._require_node(name)
        self._act(self.system.offline_command(name, reason or "drained by elasticsite"), node=name)

    def undrain(self, name: str) -> None:
        self._require_node(name)
        self._act(self.system.online_command(name), node=name)

    def set_owner(self, name: str, user: str) -> None:
        """PBS has no way to keep a node for one user's jobs without every job asking
        for it (a reservation queue, a node property): only ``""`` (anyone's) is taken."""
        if user:
            raise BatchError(OWNERS_UNSUPPORTED)

    def remove_node(self, name: str) -> None:
        """Offline it, requeue its jobs (``qrerun``), delete it; an unknown node is a no-op."""
        if name not in self._node_names():
            return
        on_node = [
            j.job.id for j in self._jobs() if j.job.state is JobState.RUNNING and j.job.node == name
        ]
        if on_node:  # offline first, or the scheduler restarts them right there
            self._act(self.system.offline_command(name, "removed by elasticsite"), node=name)
        for job_id in on_node:
            self._act(qrerun_command(job_id), job_id=job_id)
        self._act(delete_node_command(name), node=name)

    # -- jobs ---------------------------------------------------------------------------

    def submit(self, request: JobRequest) -> str:
        """Write a script running ``request.command`` and ``qsub`` it; returns the job id.
        Another user's job is submitted as that user (``runuser``, as root only), the
        script theirs to read; else refused: it would run as this process's account."""
        argv = checked_command(request)
        _check_priority(request.priority)
        runs_as = checked_submitter(request.user)
        try:
            fd, path = tempfile.mkstemp(prefix="elasticsite-", suffix=".sh", dir=self.script_dir)
        except OSError as exc:
            raise BatchError(f"submit: cannot write the job script: {exc}") from exc
        try:
            with os.fdopen(fd, "w") as handle:
                if runs_as is not None:
                    os.fchown(handle.fileno(), runs_as.uid, runs_as.gid)
                handle.write(f"#!/bin/sh\nexec {shlex.join(argv)}\n")
            qsub = self.system.qsub_command(
                path, request.cores, request.walltime, request.priority,
                _queue(request) or self.queue, self.job_name,
            )  # fmt: skip
            if runs_as is not None:
                qsub = run_as(runs_as.name, qsub, keep=("PBS_CONF_FILE",))
            result = self.runner(qsub)
        except OSError as exc:
            raise BatchError(f"submit: cannot write the job script {path}: {exc}") from exc
        finally:
            os.unlink(path)  # qsub copies the script at submission
        job_id = result.stdout.strip().splitlines()[-1].strip() if result.stdout.strip() else ""
        if not re.fullmatch(r"\d+(\[\d*\])?(\.[\w.\-]+)?", job_id):
            raise BatchError(f"qsub printed {result.stdout.strip()!r}, expected a job id")
        return job_id

    def set_priority(self, job_id: str, priority: int) -> None:
        _check_priority(priority)
        job = self._find(self._jobs(), job_id)
        self._act(qalter_priority_command(job.job.id, priority), job_id=job_id)

    def move_to_front(self, job_id: str) -> None:
        """One above the queue's highest priority; at the ceiling, also swap with the head."""
        jobs = self._jobs()
        job = self._find(jobs, job_id)
        if not job.job.state.waiting:
            return
        queued = sorted((j.job for j in jobs if j.job.state.waiting), key=lambda j: -j.priority)
        head = queued[0]
        if head.id == job.job.id:
            return
        if head.priority < PRIORITY_MAX:
            self._act(qalter_priority_command(job.job.id, head.priority + 1), job_id=job_id)
            return
        self._act(qalter_priority_command(job.job.id, PRIORITY_MAX), job_id=job_id)
        self._act(qorder_command(job.job.id, head.id), job_id=job_id)

    def preempt(self, job_id: str) -> None:
        """``qrerun`` a running job (it needs to be rerunnable); a queued job is left alone."""
        job = self._find(self._jobs(), job_id)
        if job.job.state is JobState.RUNNING:
            self._act(qrerun_command(job.job.id), job_id=job_id)

    def hold(self, job_id: str) -> None:
        """``qhold``: the queued job waits until released (held already: no-op). A job
        that started or ended raises UnknownJob."""
        try:
            self._act(["qhold", job_id], job_id=job_id)
        except CommandError as exc:
            if "invalid for state" in exc.output.lower():
                raise UnknownJob(f"hold: job {job_id} is no longer queued") from exc
            raise

    def release(self, job_id: str) -> None:
        """``qrls``: a held job may start again (a job not held: no-op)."""
        try:
            self._act(["qrls", job_id], job_id=job_id)
        except CommandError as exc:
            if "invalid for state" not in exc.output.lower():
                raise

    def cancel(self, job_id: str) -> None:
        """``qdel``: the queued, held or running job is deleted. Cancelled already: no-op;
        ended otherwise: BatchError."""
        job = self.job(job_id)
        if job.state is JobState.CANCELLED:
            return
        if job.state.finished:
            raise BatchError(f"cancel: job {job_id} already ended ({state_text(job)})")
        self._act(qdel_command(job.id), job_id=job_id)

    def job(self, job_id: str) -> JobDetail:
        """``qstat -f`` of the one job, finished ones included while the server keeps
        them (OpenPBS: ``job_history_enable``; Torque: ``keep_completed``)."""
        if not re.fullmatch(r"\d+(\[\d*\])?(\.[\w.\-]+)?", str(job_id)):
            raise UnknownJob(f"no job {job_id!r} on the PBS server (ids are like 123.server)")
        try:
            text = self._run(self.system.job_command(job_id))
        except CommandError as exc:
            if "unknown job" in exc.output.lower():
                raise UnknownJob(
                    f"no job {job_id!r} on the PBS server (a finished job is kept only with "
                    "job_history_enable on OpenPBS, keep_completed on Torque)"
                ) from exc
            raise
        return self.system.parse_job(text, job_id, timezone=self.timezone)

    def redirect(self, job_id: str, target: str) -> None:
        """``qmove TARGET JOB``: the queued job moves to the cloud workers' queue (already
        there: no-op). A job no longer queued raises UnknownJob."""
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,63}", target or ""):
            raise BatchError(f"redirect: {target!r} is not a valid PBS queue name")
        job = self._find(self._jobs(), job_id)
        if not job.job.state.waiting:
            raise UnknownJob(f"redirect: job {job_id} is no longer queued")
        if job.job.attributes.get(attributes.PARTITION) == target:
            return
        self._act(["qmove", target, job.job.id], job_id=job_id)


def _queue(request: JobRequest) -> str | None:
    """The request's ``partition`` attribute, as a PBS queue name (checked)."""
    queue = request.attributes.get(attributes.PARTITION)
    if queue and not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,63}", queue):
        raise BatchError(f"submit: {queue!r} is not a valid PBS queue name")
    return queue or None


def _check_priority(priority: int) -> None:
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise BatchError(
            f"PBS priority must be within {PRIORITY_MIN}..{PRIORITY_MAX}, got {priority}"
        )


def _create(options: PbsOptions, site: SiteInfo) -> PbsBatch:
    return PbsBatch.from_options(options)


OWNERS_UNSUPPORTED = (
    "pbs cannot keep a node for one user's jobs (no per-user node access without every "
    "job asking for it), so the cloud_scheduler policy's fair share cannot hold there; "
    "use slurm, htcondor or the embedded batch system"
)
plugin = BatchPlugin(PbsOptions, _create, owners=False)
"""The ``pbs`` entry point of ``elasticsite.batch``."""
