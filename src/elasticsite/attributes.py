"""Job attributes: what a batch system knows about a job beyond its size and times.

Every adapter fills :attr:`elasticsite.model.Job.attributes` with the keys below
(string values; absent when the batch system does not say), so policies can count
demand per partition, per QOS or per requested VM type without knowing which batch
system runs the site. Adapters may add their own keys; those carry the adapter's
name as a prefix (``slurm.reason``, ``pbs.comment``).

Several values of one key (a job submitted to two partitions) are separated by
commas; :func:`values` splits them.

This module is pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

__all__ = [
    "ACCOUNT",
    "EMPTY",
    "EVERY_JOB",
    "FEATURES",
    "HELD",
    "KNOWN",
    "NAME",
    "NODES",
    "NODE_COUNT",
    "PARTITION",
    "QOS",
    "REASON",
    "VM_ARCH",
    "VM_CORES",
    "VM_IMAGE",
    "VM_LOCATION",
    "VM_MEMORY",
    "VM_NETWORK",
    "VM_STORAGE",
    "VM_TYPE",
    "InvalidAttribute",
    "Selector",
    "check",
    "parse_pairs",
    "values",
]

PARTITION = "partition"
"""Slurm partition, PBS queue, the embedded site's partition (several: comma-separated)."""
QOS = "qos"
ACCOUNT = "account"
FEATURES = "features"
"""Node features the job asks for (Slurm ``--constraint``, PBS node properties)."""
NAME = "name"
"""The job's name."""
NODES = "nodes"
"""The nodes a running (or configuring) job holds, comma-separated."""
NODE_COUNT = "node_count"
REASON = "reason"
"""Why a queued job waits, in the batch system's words (``Priority``, ``Resources``)."""
HELD = "held"
"""``"true"`` for a job held in the queue (no added node would start it)."""

VM_TYPE = "vm_type"
"""Requested instance type (HTCondor/Cloud Scheduler ``VMType``)."""
VM_IMAGE = "vm_image"
"""Requested image (``VMAMI``)."""
VM_CORES = "vm_cores"
"""Requested cores per VM (``VMCPUCores``), a decimal integer."""
VM_MEMORY = "vm_memory"
"""Requested memory per VM in MiB (``VMMem``), a decimal integer."""
VM_LOCATION = "vm_location"
"""Where the image comes from (``VMLoc``)."""
VM_ARCH = "vm_arch"
"""Requested CPU architecture (``VMCPUArch``)."""
VM_STORAGE = "vm_storage"
"""Requested scratch storage in GiB (``VMStorage``), a decimal integer."""
VM_NETWORK = "vm_network"
"""Requested network (``VMNetwork``)."""

KNOWN = frozenset({
    PARTITION, QOS, ACCOUNT, FEATURES, NAME, NODES, NODE_COUNT, REASON, HELD,
    VM_TYPE, VM_IMAGE, VM_CORES, VM_MEMORY, VM_LOCATION, VM_ARCH, VM_STORAGE, VM_NETWORK,
})  # fmt: skip
"""The keys this module defines; adapter-specific keys carry a ``name.`` prefix."""


class _NoAttributes(Mapping[str, str]):
    """The empty, read-only attributes every job without any shares: one object, so
    100,000 plain jobs cost no mapping each. Hashable (a dataclass default) and
    pickled as the same singleton."""

    __slots__ = ()

    def __getitem__(self, key: str) -> str:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and not other

    def __repr__(self) -> str:
        return "{}"

    def __reduce__(self) -> str:
        return "EMPTY"  # pickle and copy find the module's singleton


EMPTY: Mapping[str, str] = _NoAttributes()
"""The attributes of a job nobody said anything about (shared, read-only)."""

_KEY = re.compile(r"[a-z][a-z0-9_]{0,31}(\.[a-z][a-z0-9_]{0,31})?")
_MAX_VALUE = 1024


class InvalidAttribute(ValueError):
    """A key or value that cannot be a job attribute."""


def partition_of(attrs: Mapping[str, str]) -> str:
    """The partition a job runs in on the embedded and simulated batch systems: its
    ``partition``, else the VM type it asks for (workers of a type form its partition)."""
    return attrs.get(PARTITION) or attrs.get(VM_TYPE) or ""


def check(key: str, value: str) -> None:
    """Raise :class:`InvalidAttribute` unless ``key=value`` is a valid attribute.

    Keys are lower-case words (``partition``, ``vm_type``, ``slurm.reason``); values
    are at most 1,024 printable characters (no control characters: they reach logs,
    scripts' environments and batch commands).
    """
    if not _KEY.fullmatch(key):
        raise InvalidAttribute(
            f"attribute name {key!r}: use lower-case letters, digits and '_' "
            "(optionally one 'prefix.' part), starting with a letter"
        )
    if len(value) > _MAX_VALUE:
        raise InvalidAttribute(f"attribute {key}: value longer than {_MAX_VALUE} characters")
    if not value.isprintable():
        raise InvalidAttribute(f"attribute {key}: value has control characters")


def parse_pairs(pairs: Iterable[str]) -> dict[str, str]:
    """``["partition=cloud", "vm_type=m1.small"]`` -> a checked attributes dict."""
    found: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise InvalidAttribute(f"attribute {pair!r}: expected KEY=VALUE")
        key = key.strip()
        check(key, value)
        if key in found:
            raise InvalidAttribute(f"attribute {key} given twice")
        found[key] = value
    return found


def values(attributes: Mapping[str, str], key: str) -> tuple[str, ...]:
    """The comma-separated values of ``key`` (empty when absent)."""
    raw = attributes.get(key)
    if not raw:
        return ()
    return tuple(v for v in (part.strip() for part in raw.split(",")) if v)


@dataclass(frozen=True, slots=True)
class Selector:
    """Which jobs something (a cloud, a redirect target) can serve.

    A job matches when, for every term, one of its values of that key is among the
    term's allowed values. No terms: every job matches. A job without the key does
    not match a term naming it.
    """

    terms: tuple[tuple[str, frozenset[str]], ...] = ()

    @classmethod
    def of(cls, terms: Mapping[str, Iterable[str]]) -> Selector:
        checked: list[tuple[str, frozenset[str]]] = []
        for key, allowed in sorted(terms.items()):
            wanted = frozenset(allowed)
            if not wanted:
                raise InvalidAttribute(f"selector {key}: give at least one value")
            for value in wanted:
                check(key, value)
            checked.append((key, wanted))
        return cls(tuple(checked))

    def __bool__(self) -> bool:
        return bool(self.terms)

    def matches(self, attributes: Mapping[str, str]) -> bool:
        for key, allowed in self.terms:
            raw = attributes.get(key)
            if raw is None:
                return False
            if raw in allowed:
                continue
            if "," not in raw or allowed.isdisjoint(values(attributes, key)):
                return False
        return True

    def describe(self) -> str:
        return (
            " and ".join(
                f"{key} in {{{', '.join(sorted(allowed))}}}" for key, allowed in self.terms
            )
            or "every job"
        )


EVERY_JOB = Selector()
"""The selector that matches every job."""
