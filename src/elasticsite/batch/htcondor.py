"""HTCondor adapter: the schedd's job queue and the collector's startds, through the bindings.

Everything HTCondor-specific goes through :class:`CondorPool`, a small interface the
real :class:`BindingsPool` implements with the ``htcondor2``/``classad2`` modules of the
``htcondor`` wheel (or the classic ``htcondor``/``classad`` modules when those are what is
installed). Tests substitute a pool built from recorded ``condor_q -long`` and
``condor_status -long`` output.

How the contract maps onto a pool whose startds join by themselves:

==============  ===============================================================================
snapshot        ``Schedd.query`` of idle (1) and running (2) jobs; ``Collector.query`` of
                startd ads, grouped by ``Machine`` into nodes (partitionable slots count
                their ``TotalSlotCpus``, dynamic and claimed static slots are running jobs)
add_node        records an expectation: the node is listed DOWN until a startd of that
                ``Machine`` reports (HTCondor has no way to pre-declare a node)
drain           ``Startd.drainJobs`` (graceful by default: running jobs finish)
undrain         ``Startd.cancelDrainJobs``
remove_node     the startd is drained, its running jobs vacated back to the queue (hold +
                release), its master told ``DaemonsOffPeaceful``; the expectation is dropped
submit          ``Schedd.submit`` (vanilla universe, ``request_cpus``,
                ``allowed_execute_duration`` for the walltime, ``priority``); another
                user's job: ``condor_submit`` as that user (:mod:`.htcondor_submit`)
set_priority    ``Schedd.edit(JobPrio)``
move_to_front   ``JobPrio`` one above the highest queued ``JobPrio``
preempt         ``Schedd.act(Hold)`` then ``Release``: the job leaves its slot and is idle again
set_owner       the startd's ``ElasticsiteOwner`` set at run time (``RemoteParam``) and a
                reconfig: its ``START`` expression takes only jobs whose ``Owner`` it is
cancel          ``Schedd.act(Remove)`` (the schedd decides who may: the owner, a queue superuser)
job             the job's ad from ``Schedd.query``, else ``Schedd.history`` (:mod:`.htcondor_jobs`)
==============  ===============================================================================

``queued`` is ordered as the schedd orders one submitter's jobs: ``JobPrio`` descending,
then cluster and process id. Across submitters the negotiator's fair share decides, which
no job attribute shows.

Cloud Scheduler's VM attributes (``VMType``, ``VMAMI``, ...) come in each job's
:attr:`~elasticsite.model.Job.attributes` (:mod:`.htcondor_output` reads the ads).
HTCondor has no partitions, so :meth:`CondorBatch.redirect` refuses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, field_validator

from elasticsite import plugins
from elasticsite.batch.base import (
    BatchError,
    BatchView,
    JobDetail,
    JobRequest,
    Node,
    NodeState,
    UnknownJob,
    UnknownNode,
    checked_command,
)
from elasticsite.batch.htcondor_jobs import detail_from_ad
from elasticsite.batch.htcondor_output import (
    HELD,
    IDLE,
    RUNNING,
    parse_jobs,
    parse_nodes,
    queue_order,
    submit_description,
)
from elasticsite.batch.htcondor_pool import BindingsPool, CondorPool
from elasticsite.batch.identity import USER_NAME, checked_submitter
from elasticsite.model import Job, JobState, state_text
from elasticsite.plugins import BatchPlugin, PluginOptions, validate_options

if TYPE_CHECKING:
    from elasticsite.plugins import SiteInfo

__all__ = [
    "BindingsPool",
    "CondorBatch",
    "CondorOptions",
    "CondorPool",
]

log = logging.getLogger(__name__)

# -- the adapter -------------------------------------------------------------------------

DRAIN_MODES = ("graceful", "quick", "fast")


class CondorOptions(PluginOptions):
    """An HTCondor site's ``[batch.options]`` (the table in docs/pbs-htcondor.md):
    the daemons to use (``None``: the local configuration's) and :class:`CondorBatch`'s
    arguments of the same names."""

    collector: str | None = None
    schedd: str | None = None
    drain_mode: str = "graceful"
    default_walltime: Annotated[float, plugins.number("seconds", text=True)] = Field(3600.0, gt=0)
    submit_attributes: dict[str, str] = Field(default_factory=dict)

    @field_validator("drain_mode")
    @classmethod
    def _known_mode(cls, v: str) -> str:
        if v not in DRAIN_MODES:
            raise ValueError(f"unknown drain_mode {v!r}; valid: {', '.join(DRAIN_MODES)}")
        return v

    @field_validator("submit_attributes", mode="before")
    @classmethod
    def _string_attributes(cls, v: Any) -> Any:
        if v is None:
            return {}
        if not isinstance(v, Mapping) or not all(
            isinstance(k, str) and isinstance(x, str) for k, x in v.items()
        ):
            raise ValueError("must map submit commands to strings")
        return v


class CondorBatch:
    """An HTCondor pool as a :class:`~elasticsite.batch.base.BatchSystem`.

    ``drain_mode`` is ``graceful`` (running jobs finish, within ``MaxJobRetirementTime``),
    ``quick`` or ``fast`` (jobs are evicted back to the queue). ``submit_attributes`` are
    added to every submit description (e.g. ``{"+VMType": '"small"'}``).
    """

    def __init__(
        self,
        pool: CondorPool | None = None,
        *,
        drain_mode: str = "graceful",
        default_walltime: float = 3600.0,
        submit_attributes: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pool: CondorPool = pool if pool is not None else BindingsPool()
        self.drain_mode = drain_mode
        self.default_walltime = float(default_walltime)
        self.submit_attributes = dict(submit_attributes or {})
        self.clock = clock
        self.expected: dict[str, int] = {}
        """Nodes declared with :meth:`add_node` (name -> cores), listed DOWN until they report."""

    @classmethod
    def from_options(cls, options: CondorOptions | Mapping[str, Any]) -> CondorBatch:
        """Build from validated :class:`CondorOptions`, or from a plain options table
        (validated here, before the bindings are needed: an unknown key or a bad value is
        one :class:`BatchError` line). The options are checked there alone, once."""
        if not isinstance(options, CondorOptions):
            options = validate_options(CondorOptions, options, "HTCondor", BatchError)
        pool = BindingsPool(options.collector, options.schedd)
        return cls(
            pool,
            drain_mode=options.drain_mode,
            default_walltime=options.default_walltime,
            submit_attributes=options.submit_attributes,
        )

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        """Run one bindings call; anything it raises becomes a BatchError naming ``what``."""
        try:
            return call()
        except BatchError:
            raise
        except Exception as exc:  # the bindings raise HTCondorException, RuntimeError, ...
            raise BatchError(f"HTCondor {what} failed: {exc}") from exc

    # -- reading ------------------------------------------------------------------------

    def _jobs(self) -> list[Job]:
        ads = self._call(
            "job query", lambda: self.pool.jobs(f"JobStatus == {IDLE} || JobStatus == {RUNNING}")
        )
        return parse_jobs(ads, self.default_walltime)

    def _nodes(self) -> list[Node]:
        nodes = parse_nodes(self._call("startd query", self.pool.slots))
        seen = {n.name for n in nodes}
        for name, cores in sorted(self.expected.items()):
            if name not in seen:
                nodes.append(Node(name, cores, NodeState.DOWN))
        return nodes

    def snapshot(self) -> BatchView:
        now = self.clock()
        jobs = self._jobs()
        nodes = self._nodes()
        queued = queue_order(j for j in jobs if j.state.waiting)
        running = [j for j in jobs if j.state is JobState.RUNNING]
        return BatchView(taken_at=now, queued=queued, running=running, nodes=nodes)

    def _find(self, job_id: str) -> Job:
        for job in self._jobs():
            if job.id == job_id or (("." not in job_id) and job.id == f"{job_id}.0"):
                return job
        raise UnknownJob(f"no idle or running job {job_id!r} in the HTCondor queue")

    def _node(self, name: str) -> Node:
        for node in self._nodes():
            if node.name == name:
                return node
        raise UnknownNode(f"no startd on machine {name!r} and no node declared by that name")

    # -- nodes --------------------------------------------------------------------------

    def add_node(self, name: str, cores: int, pool: str = "") -> None:
        """Expect a startd on ``name``: DOWN until it reports (startds join by themselves,
        advertising their ``VMType`` themselves, so ``pool`` needs nothing here)."""
        if not name or cores < 1:
            raise BatchError(f"add_node: need a name and cores >= 1, got {name!r}, {cores}")
        self.expected.setdefault(name, cores)

    def set_owner(self, name: str, user: str) -> None:
        """Start only ``user``'s jobs on the machine: its startd's ``ElasticsiteOwner``,
        which its ``START`` expression compares with each job's ``Owner`` (the worker's
        startd configuration, written at boot with the owner it was launched for). A
        machine whose startd has not reported yet starts with that owner: no-op."""
        if not isinstance(user, str) or (user and not USER_NAME.fullmatch(user)):
            raise BatchError(f"set_owner: {user!r} is not a user name")
        slots = self._call("startd query", self.pool.slots)
        node = next((n for n in parse_nodes(slots) if n.name == name), None)
        if node is None:
            if name in self.expected:
                return
            raise UnknownNode(f"no startd on machine {name!r} and no node declared by that name")
        if node.owner != user:
            self._call(f"owner of {name}", lambda: self.pool.set_owner(name, user))

    def drain(self, name: str, reason: str) -> None:
        """``drainJobs`` in :attr:`drain_mode`; a node already draining or down is left alone."""
        node = self._node(name)
        if node.state in (NodeState.IDLE, NodeState.BUSY, NodeState.UNKNOWN):
            self._call(f"drain of {name}", lambda: self.pool.drain(name, self.drain_mode, reason))

    def undrain(self, name: str) -> None:
        node = self._node(name)
        if node.state in (NodeState.DRAINING, NodeState.DRAINED):
            self._call(f"cancelling the drain of {name}", lambda: self.pool.cancel_drain(name))

    def remove_node(self, name: str) -> None:
        """Vacate its jobs back to the queue and turn its daemons off peacefully."""
        self.expected.pop(name, None)
        if name not in {n.name for n in parse_nodes(self._call("startd query", self.pool.slots))}:
            return
        on_node = [j.id for j in self._jobs() if j.node == name]
        if on_node:  # drain first, or the negotiator matches them right back here
            if self._node(name).state not in (NodeState.DRAINING, NodeState.DRAINED):
                reason = f"node {name} removed by elasticsite"
                self._call(f"drain of {name}", lambda: self.pool.drain(name, "graceful", reason))
            self._vacate(on_node, f"node {name} removed by elasticsite")
        self._call(f"turning off {name}", lambda: self.pool.off_peaceful(name))

    # -- jobs ---------------------------------------------------------------------------

    def submit(self, request: JobRequest) -> str:
        """Another user's job is submitted as that user (``condor_submit`` through
        ``runuser``, as root only); else refused: it would run as this process's."""
        checked_command(request)
        runs_as = checked_submitter(request.user)
        description = submit_description(request, self.submit_attributes)
        if runs_as is None:
            cluster = self._call("submit", lambda: self.pool.submit(description))
        else:
            name = runs_as.name
            cluster = self._call(
                f"submit as {name}", lambda: self.pool.submit_as(name, description)
            )
        return f"{cluster}.0"

    def set_priority(self, job_id: str, priority: int) -> None:
        job = self._find(job_id)
        self._call(
            f"edit of {job.id}", lambda: self.pool.edit([job.id], "JobPrio", str(int(priority)))
        )

    def move_to_front(self, job_id: str) -> None:
        """``JobPrio`` one above every other queued job's (running jobs: no-op)."""
        jobs = self._jobs()
        job = next((j for j in jobs if j.id == job_id), None)
        if job is None:
            raise UnknownJob(f"no idle or running job {job_id!r} in the HTCondor queue")
        if not job.state.waiting:
            return
        order = queue_order(j for j in jobs if j.state.waiting)
        if order[0].id == job.id:
            return
        top = order[0].priority + 1
        self._call(f"edit of {job.id}", lambda: self.pool.edit([job.id], "JobPrio", str(top)))

    def preempt(self, job_id: str) -> None:
        """Hold then release a running job: it leaves its slot and is idle again."""
        job = self._find(job_id)
        if job.state is JobState.RUNNING:
            self._vacate([job.id], "preempted by elasticsite")

    def _status(self, job_id: str) -> tuple[str, int] | None:
        """``(id, JobStatus)`` of one job in the schedd, or None."""
        cluster, _, proc = job_id.partition(".")
        if not cluster.isdigit() or not (proc or "0").isdigit():
            raise UnknownJob(f"no job {job_id!r} in the schedd")
        ads = self._call(
            "job query",
            lambda: self.pool.jobs(f"ClusterId == {cluster} && ProcId == {proc or 0}"),
        )
        for ad in ads:
            return f"{cluster}.{proc or 0}", int(ad.get("JobStatus", -1))
        return None

    def hold(self, job_id: str) -> None:
        """``Hold`` an idle job (held already: no-op); a job that started or ended raises
        UnknownJob."""
        found = self._status(job_id)
        if found is None or found[1] not in (IDLE, HELD):
            raise UnknownJob(f"hold: job {job_id} is not queued in the schedd")
        if found[1] == IDLE:
            self._call("hold", lambda: self.pool.act("Hold", [found[0]], "held by elasticsite"))

    def release(self, job_id: str) -> None:
        """``Release`` a held job (a job not held: no-op)."""
        found = self._status(job_id)
        if found is not None and found[1] == HELD:
            self._call(
                "release", lambda: self.pool.act("Release", [found[0]], "released by elasticsite")
            )

    def cancel(self, job_id: str) -> None:
        """``Remove`` an idle, held or running job (it ends removed: cancelled). Removed
        already: no-op; ended otherwise: BatchError; refused by the schedd: BatchError."""
        job = self.job(job_id)
        if job.state is JobState.CANCELLED:
            return
        if job.state.finished:
            raise BatchError(f"cancel: job {job_id} already ended ({state_text(job)})")
        result = self._call(
            "remove", lambda: self.pool.act("Remove", [job.id], "cancelled through elasticsite")
        )
        denied = int(result.get("TotalPermissionDenied", 0)) if result is not None else 0
        if denied:
            raise BatchError(
                f"cancel: job {job.id}: the schedd refused (permission denied: only its owner "
                "or a queue superuser may remove it)"
            )

    def job(self, job_id: str) -> JobDetail:
        """The job's ad in the queue, else in the schedd's history; UnknownJob if neither
        holds it."""
        cluster, _, proc = job_id.partition(".")
        if not cluster.isdigit() or not (proc or "0").isdigit():
            raise UnknownJob(f"no job {job_id!r} in the schedd (ids are CLUSTER.PROC)")
        constraint = f"ClusterId == {cluster} && ProcId == {proc or 0}"
        for ad in self._call("job query", lambda: self.pool.jobs(constraint)):
            return detail_from_ad(ad)
        for ad in self._call("history query", lambda: self.pool.history(constraint)):
            return detail_from_ad(ad, from_history=True)
        raise UnknownJob(f"no job {job_id!r} in the schedd's queue or history")

    def redirect(self, job_id: str, target: str) -> None:
        """HTCondor has no partitions: jobs reach cloud workers through their
        requirements (``VMType``), so there is nothing to redirect to."""
        raise BatchError(
            f"redirect {job_id} to {target!r}: HTCondor has no partitions; send jobs to "
            "cloud workers through their requirements (VMType) instead"
        )

    def _vacate(self, job_ids: list[str], reason: str) -> None:
        self._call("hold", lambda: self.pool.act("Hold", job_ids, reason))
        self._call("release", lambda: self.pool.act("Release", job_ids, reason))


def _create(options: CondorOptions, site: SiteInfo) -> CondorBatch:
    return CondorBatch.from_options(options)


plugin = BatchPlugin(CondorOptions, _create)
"""The ``htcondor`` entry point of ``elasticsite.batch``."""
