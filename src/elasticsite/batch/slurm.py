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

How nodes are changed is in :mod:`.slurm_node_control`, how jobs are submitted and
changed in :mod:`.slurm_job_control`; every command goes through :mod:`.slurm_commands`.

Errors: every failure is a :class:`BatchError`; a job or node Slurm does not know
is :class:`UnknownJob` / :class:`UnknownNode`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator

from elasticsite import attributes
from elasticsite.attributes import PARTITION
from elasticsite.batch.base import BatchError, BatchView
from elasticsite.batch.command import CommandResult, Runner, run
from elasticsite.batch.slurm_job_control import SlurmJobControl
from elasticsite.batch.slurm_jobs import JobReader
from elasticsite.batch.slurm_node_control import RESERVATION_PREFIX, SlurmNodeControl
from elasticsite.batch.slurm_output import jobs_per_node, load_json, nodes_from
from elasticsite.model import Job
from elasticsite.plugins import BatchPlugin, PluginOptions, number, validate_options

if TYPE_CHECKING:
    from elasticsite.plugins import SiteInfo

__all__ = ["RESERVATION_PREFIX", "SlurmBatch", "SlurmOptions"]


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


class SlurmBatch(SlurmNodeControl, SlurmJobControl):
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

    Its node methods are :class:`~.slurm_node_control.SlurmNodeControl`'s, its job
    methods :class:`~.slurm_job_control.SlurmJobControl`'s.
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

    # -- sensing ---------------------------------------------------------------------

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
