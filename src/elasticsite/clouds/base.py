"""The contract every cloud driver fulfils.

What a manager may assume of a driver:

* ``describe()`` is eventually consistent: an instance just launched may be missing
  for a while, one just terminated may still show.
* ``launch()`` is idempotent by instance name: launching a name that already exists
  returns the existing instance instead of starting a second one. The manager names
  each instance after its worker id, so a retry after a crash never doubles a worker.
  What one call asks for is a :class:`LaunchRequest`, checked once when it is made: a
  field added to it later leaves every driver's signature as it is.
* Every instance carries the tags it was launched with; :data:`SITE_TAG` names the
  site, so a restarted manager finds exactly the instances it owns.
* Failures raise :class:`CloudError` (or a subclass) and nothing else.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from elasticsite.clouds.errors import CloudError
from elasticsite.model import VMType

__all__ = [
    "SITE_TAG",
    "TERMINATE_BATCH",
    "WORKER_TAG",
    "CloudDriver",
    "CloudError",
    "Instance",
    "InstanceState",
    "LaunchRequest",
]

SITE_TAG = "elasticsite-site"
"""Tag whose value is the id of the site that owns the instance."""
WORKER_TAG = "elasticsite-worker"
"""Tag whose value is the id of the worker the instance backs."""
URGENCY_TAG = "elasticsite:urgency"
"""``red``, ``orange`` or ``yellow`` on an instance launched for an urgent job."""
VOLUNTEER_TAG = "elasticsite:volunteer"
"""``yes``: the owner offers this instance as a target of a cloud's urgent policies."""
TERMINATE_BATCH = 1000
"""Ids per ``terminate()`` call for a driver that sets no ``terminate_batch``."""


class InstanceState(enum.StrEnum):
    """An instance's state, translated from the driver's own."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    TERMINATED = "terminated"
    ERROR = "error"
    UNKNOWN = "unknown"


@dataclass(slots=True)
class Instance:
    """One cloud instance as the cloud reports it."""

    id: str
    name: str
    state: InstanceState
    tags: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    address: str = ""
    ended_at: float | None = None
    """When the instance stopped, for a terminated one, if the cloud says."""
    reclaim_at: float | None = None
    """When the cloud will take this spot instance back, once it has given notice."""
    reclaimed: bool = False
    """The cloud took it back (a spot interruption), rather than anyone terminating it."""


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """One launch: an instance of ``vm_type`` for each of ``names``, each given the
    same ``userdata`` and ``tags`` (a driver adds the worker's own name to both).

    ``names`` keeps its order without repeats, each a non-empty string; a malformed
    request raises ``ValueError`` here, before any driver sees it."""

    vm_type: VMType
    names: Sequence[str]
    userdata: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.names, str):
            raise ValueError(f"launch: names must be a list of names, not {self.names!r}")
        names = tuple(dict.fromkeys(self.names))
        bad = [n for n in names if not isinstance(n, str) or not n]
        if bad:
            raise ValueError(f"launch: instance names must be non-empty strings, not {bad!r}")
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "userdata", dict(self.userdata))
        object.__setattr__(self, "tags", dict(self.tags))

    def site_tags(self, cloud: str, site_id: str) -> dict[str, str]:
        """The tags with the site's own: tags naming another site are a caller's bug,
        refused with a CloudError before anything starts."""
        if self.tags.get(SITE_TAG, site_id) != site_id:
            raise CloudError(f"cloud {cloud}: launch: tags name another site")
        return {**self.tags, SITE_TAG: site_id}


@runtime_checkable
class CloudDriver(Protocol):
    """A cloud the manager launches workers on."""

    name: str

    def launch(self, request: LaunchRequest) -> list[Instance]:
        """Start one instance per name of ``request`` (idempotent by name)."""
        ...

    def describe(self) -> list[Instance]:
        """Every instance of this cloud that carries this site's tag, in any state."""
        ...

    def terminate(self, instance_ids: Sequence[str]) -> None:
        """Stop and release these instances; unknown or gone ids are ignored.

        A driver may say how many ids one call should carry in ``terminate_batch``
        (an optional attribute, :data:`TERMINATE_BATCH` when absent): the manager
        gives it the terminations of a step in calls of that many, and runs calls of
        a driver whose API takes one id at a time concurrently."""
        ...
