"""What differs between the PBS families: one small class each, set by attributes.

=================  =====================================  =====================================
                   :class:`OpenPbs` (also PBS Pro)        :class:`Torque`
=================  =====================================  =====================================
jobs               ``qstat -f -F json``                   ``qstat -f -x``
one job            ``qstat -f -F json -x ID`` (history)   ``qstat -f -x ID`` (keep_completed)
nodes              ``pbsnodes -a -F json``                ``pbsnodes -x``
add_node           ``qmgr -c "create node X               ``qmgr -c "create node X np=N"``
                   resources_available.ncpus=N"``
drain              ``pbsnodes -o -C reason X``            ``pbsnodes -o -N reason X``
undrain            ``pbsnodes -r X``                      ``pbsnodes -c X``
submit             ``qsub -l select=1:ncpus=C ...``       ``qsub -l nodes=1:ppn=C ...``
=================  =====================================  =====================================

Everything else (``qalter``, ``qorder``, ``qrerun``, ``qdel``, ``qmgr -c "delete node X"``)
is the same on both and built by the plain functions below. A site names its family with the
``flavour`` option (:data:`FLAVOURS`); :func:`pbs_flavour` turns the name into its class.
The ``*_command(flavour, ...)`` functions are the same builders reached by that name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from elasticsite.batch.base import BatchError, JobDetail, Node
from elasticsite.batch.command import CommandError, Runner
from elasticsite.batch.pbs_jobs import detail_from_json, detail_from_xml
from elasticsite.batch.pbs_output import (
    PbsJob,
    parse_pbsnodes_json,
    parse_pbsnodes_xml,
    parse_qstat_json,
    parse_qstat_xml,
)

__all__ = [
    "FLAVOURS",
    "OpenPbs",
    "PbsFlavour",
    "Torque",
    "delete_node_command",
    "detect_flavour",
    "format_walltime",
    "parse_jobs",
    "parse_nodes",
    "pbs_flavour",
    "qalter_priority_command",
    "qdel_command",
    "qorder_command",
    "qrerun_command",
]


def format_walltime(seconds: float) -> str:
    """Whole seconds, rounded up and at least one, as ``H:MM:SS``."""
    total = max(int(-(-seconds // 1)), 1)
    return f"{total // 3600}:{total % 3600 // 60:02d}:{total % 60:02d}"


class PbsFlavour(ABC):
    """One PBS family's commands and output format; the adapter holds one and asks it.

    A family is described by its class attributes, its output format too: each
    ``parse_*`` is one parser of :mod:`~elasticsite.batch.pbs_output`,
    :mod:`~elasticsite.batch.pbs_nodes` or :mod:`~elasticsite.batch.pbs_jobs`.
    """

    name: ClassVar[str]
    """The ``flavour`` a site configures."""
    jobs_argv: ClassVar[tuple[str, ...]]
    """Lists every job with all its attributes."""
    job_argv: ClassVar[tuple[str, ...]]
    """Lists one job (its id follows), finished ones included while the server keeps them."""
    nodes_argv: ClassVar[tuple[str, ...]]
    """Lists every node with all its attributes."""
    node_cores: ClassVar[str]
    node_pool: ClassVar[str]
    """How a node is labelled with its VM type (``{pool}``)."""
    """The ``qmgr create node`` setting giving a node ``{cores}`` cores."""
    job_shape: ClassVar[str]
    """The ``qsub -l`` resource asking for one node with ``{cores}`` cores."""
    offline_note_flag: ClassVar[str]
    """The ``pbsnodes -o`` flag attaching the reason to an offlined node."""
    online_flag: ClassVar[str]
    """The ``pbsnodes`` flag clearing OFFLINE."""

    def jobs_command(self) -> list[str]:
        return list(self.jobs_argv)

    def job_command(self, job_id: str) -> list[str]:
        """Lists one job with all its attributes, finished ones included while kept."""
        return [*self.job_argv, job_id]

    def nodes_command(self) -> list[str]:
        return list(self.nodes_argv)

    def create_node_command(self, name: str, cores: int) -> list[str]:
        return ["qmgr", "-c", f"create node {name} {self.node_cores.format(cores=cores)}"]

    def pool_command(self, name: str, pool: str) -> list[str]:
        """Label the node with the VM type it serves, for jobs that ask for it."""
        return ["qmgr", "-c", f"set node {name} {self.node_pool.format(pool=pool)}"]

    def offline_command(self, name: str, reason: str) -> list[str]:
        return ["pbsnodes", "-o", self.offline_note_flag, reason, name]

    def online_command(self, name: str) -> list[str]:
        """Clear OFFLINE: ``-r`` on OpenPBS (hosts), ``-c`` on Torque (``-r`` there resets)."""
        return ["pbsnodes", self.online_flag, name]

    def qsub_command(
        self,
        script: str,
        cores: int,
        walltime: float,
        priority: int = 0,
        queue: str = "",
        name: str = "elasticsite",
    ) -> list[str]:
        shape = self.job_shape.format(cores=cores)
        argv = ["qsub", "-N", name, "-l", shape, "-l", f"walltime={format_walltime(walltime)}"]
        argv += ["-p", str(priority)]
        if queue:
            argv += ["-q", queue]
        return [*argv, script]

    @abstractmethod
    def parse_jobs(self, text: str, *, timezone: str, default_walltime: float) -> list[PbsJob]:
        """Queued and running jobs from the output of :meth:`jobs_command`."""

    @abstractmethod
    def parse_nodes(self, text: str) -> list[Node]:
        """Every node from the output of :meth:`nodes_command`."""

    @abstractmethod
    def parse_job(self, text: str, job_id: str, *, timezone: str) -> JobDetail:
        """Job ``job_id`` from the output of :meth:`job_command`."""


class OpenPbs(PbsFlavour):
    """OpenPBS and PBS Professional: JSON output, resources named as in ``select``."""

    name = "openpbs"
    jobs_argv = ("qstat", "-f", "-F", "json")
    job_argv = ("qstat", "-f", "-F", "json", "-x")
    nodes_argv = ("pbsnodes", "-a", "-F", "json")
    node_cores = "resources_available.ncpus={cores}"
    node_pool = "resources_available.vm_type = {pool}"  # a site-defined host resource
    job_shape = "select=1:ncpus={cores}"
    offline_note_flag = "-C"
    online_flag = "-r"  # clears OFFLINE on the hosts named

    parse_jobs = staticmethod(parse_qstat_json)
    parse_nodes = staticmethod(parse_pbsnodes_json)
    parse_job = staticmethod(detail_from_json)


class Torque(PbsFlavour):
    """Torque: XML output, cores as ``np``/``ppn``."""

    name = "torque"
    jobs_argv = ("qstat", "-f", "-x")
    job_argv = ("qstat", "-f", "-x")  # -x is XML here; completed jobs show while kept
    nodes_argv = ("pbsnodes", "-x")
    node_cores = "np={cores}"
    node_pool = "properties += {pool}"  # jobs ask with -l nodes=1:ppn=N:POOL
    job_shape = "nodes=1:ppn={cores}"
    offline_note_flag = "-N"
    online_flag = "-c"  # Torque's -r resets the node instead

    parse_jobs = staticmethod(parse_qstat_xml)
    parse_nodes = staticmethod(parse_pbsnodes_xml)
    parse_job = staticmethod(detail_from_xml)


_BY_NAME: dict[str, type[PbsFlavour]] = {cls.name: cls for cls in (OpenPbs, Torque)}

FLAVOURS = tuple(_BY_NAME)
"""``openpbs`` covers OpenPBS and PBS Professional (they share the ``-F json`` output)."""


def pbs_flavour(name: str) -> PbsFlavour:
    """The family a site's ``flavour`` names; an unknown name is one :class:`BatchError`."""
    if name not in FLAVOURS:  # a tuple test: an unhashable value from TOML is refused too
        raise BatchError(f"unknown PBS flavour {name!r}; valid: {', '.join(FLAVOURS)}")
    return _BY_NAME[name]()


def detect_flavour(runner: Runner) -> PbsFlavour:
    """OpenPBS if ``qstat --version`` names PBS (OpenPBS/PBS Pro print ``pbs_version``)."""
    try:
        result = runner(["qstat", "--version"])
    except CommandError as exc:
        raise BatchError(f"cannot tell the PBS flavour: {exc}; set flavour explicitly") from exc
    text = (result.stdout + result.stderr).lower()
    return OpenPbs() if "pbs_version" in text else Torque()


# -- the same on every family ------------------------------------------------------------


def delete_node_command(name: str) -> list[str]:
    return ["qmgr", "-c", f"delete node {name}"]


def qalter_priority_command(job_id: str, priority: int) -> list[str]:
    return ["qalter", "-p", str(priority), job_id]


def qorder_command(first: str, second: str) -> list[str]:
    return ["qorder", first, second]


def qrerun_command(job_id: str) -> list[str]:
    return ["qrerun", job_id]


def qdel_command(job_id: str) -> list[str]:
    return ["qdel", job_id]


# -- the family's builders and readers, by its name --------------------------------------


def parse_jobs(
    text: str,
    flavour: str,
    *,
    timezone: str = "UTC",
    default_walltime: float = 3600.0,
) -> list[PbsJob]:
    """Queued and running jobs of ``qstat -f -F json`` / ``qstat -f -x``, in listed order.

    Finished, held and waiting jobs are left out. Malformed output raises one
    :class:`BatchError` saying what was wrong.
    """
    return pbs_flavour(flavour).parse_jobs(
        text, timezone=timezone, default_walltime=default_walltime
    )


def parse_nodes(text: str, flavour: str) -> list[Node]:
    """Every node of ``pbsnodes -a -F json`` / ``pbsnodes -x``, states through the table."""
    return pbs_flavour(flavour).parse_nodes(text)
