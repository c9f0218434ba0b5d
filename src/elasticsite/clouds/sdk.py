"""What the drivers built on a provider's SDK share (``ec2``, ``openstack``, ``libcloud``):
the SDK import that names the extra to install,
the one place an SDK's failure becomes a :class:`~elasticsite.clouds.base.CloudError`,
and :class:`SdkCloud`, the contract's ``launch`` and ``describe`` over what the driver
remembers of its site (:mod:`.known`)."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, CloudError, Instance, InstanceState
from elasticsite.clouds.bootstrap import BootstrapConfig, userdata_for
from elasticsite.clouds.errors import ErrorKind
from elasticsite.clouds.known import Known
from elasticsite.model import VMType

if TYPE_CHECKING:
    from elasticsite.clouds.base import LaunchRequest

__all__ = ["SdkCloud", "Starter", "guarded", "sdk_module", "size_pools"]

ErrorMapper = Callable[[str, str, Exception], CloudError]
"""``(cloud, what was being done, the SDK's exception) -> CloudError`` with its kind."""
Starter = Callable[[list[str]], list[Instance]]
"""Starts instances for a batch of names (one launch's VM type, user data and tags)."""


def sdk_module(module: str, cloud: str, driver: str, package: str) -> ModuleType:
    """``module`` imported, or a CloudError saying which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise CloudError(
            f"cloud {cloud}: the {driver} driver needs {package}: "
            f"pip install 'elasticsite[{driver}]'",
            kind=ErrorKind.NOT_FOUND,
        ) from None


def guarded(cloud: str, what: str, error: ErrorMapper, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; any failure but a CloudError becomes one, by ``error``,
    naming ``fn`` as the API call that failed."""
    try:
        return fn(*args, **kwargs)
    except CloudError:
        raise
    except Exception as exc:
        failed = error(cloud, what, exc)
        if not failed.call:
            failed.call = str(getattr(fn, "__name__", "")).strip("<>")
        raise failed from exc


def size_pools(session: Any, size: int) -> None:
    """Let a ``requests`` session keep ``size`` connections per host open, one for each
    thread that may call at once (requests keeps 10): with fewer, each extra thread
    opens a connection of its own and drops it ("Connection pool is full"). The
    adapters the SDK mounted keep their own settings (keep-alive, TLS)."""
    for adapter in set(getattr(session, "adapters", {}).values()):
        current = getattr(adapter, "_pool_maxsize", None)
        if isinstance(current, int) and current < size and hasattr(adapter, "init_poolmanager"):
            adapter._pool_maxsize = size
            adapter.init_poolmanager(
                getattr(adapter, "_pool_connections", 10), size,
                block=getattr(adapter, "_pool_block", False),
            )  # fmt: skip


class SdkCloud(ABC):
    """The contract's ``launch`` and ``describe`` as the SDK drivers share them.

    A launch starts only the names with no live instance, ``launch_batch`` names to a
    call, and tells ``known`` what it started, or that a call failed (its answer may have
    been lost, so those names are looked up before the next launch takes them for
    absent). A driver says how to list its site's instances (:meth:`_listing`), how to
    look names up (:meth:`_look_up`, or all of :meth:`_live`) and how to start a batch
    (:meth:`_starter`)."""

    launch_batch = 1
    """Names one call of the provider's API starts."""

    def __init__(
        self, name: str, site_id: str, bootstrap: BootstrapConfig | None, known_for: float
    ) -> None:
        self.name = name
        self.site_id = site_id
        self.bootstrap = bootstrap
        self.known = Known(known_for)
        """The site's instances as of the last describe, and those launched since."""

    def describe(self) -> list[Instance]:
        asked = self.known.now()
        found = self._listing()
        self.known.described(found, asked)
        return found

    def launch(self, request: LaunchRequest) -> list[Instance]:
        request.site_tags(self.name, self.site_id)  # another site's launch: refused here
        wanted = list(request.names)
        if not wanted:
            return []
        have = self._live(request.vm_type, wanted)
        missing = [n for n in wanted if n not in have]
        if missing:
            start = self._starter(request)
            size = self.launch_batch
            for at in range(0, len(missing), size):
                chunk = missing[at : at + size]
                try:
                    started = start(chunk)
                except CloudError:
                    self.known.failed(chunk)
                    raise
                for instance in started:
                    have[instance.name] = instance
                    self.known.launched(instance)
        return [have[n] for n in wanted if n in have]

    @abstractmethod
    def _listing(self) -> list[Instance]:
        """Every instance of the site, in any state."""

    def _live(self, vm_type: VMType, wanted: list[str]) -> dict[str, Instance]:
        """The pending or running instances named ``wanted``: remembered when ``known``
        can tell, else looked up."""
        remembered = self.known.live(wanted)
        return self._look_up(wanted) if remembered is None else remembered

    def _look_up(self, wanted: list[str]) -> dict[str, Instance]:
        """The pending or running instances named ``wanted``, as the cloud lists them
        (a driver that can ask for those names alone does so instead)."""
        names = set(wanted)
        up = (InstanceState.PENDING, InstanceState.RUNNING)
        return {i.name: i for i in self._listing() if i.name in names and i.state in up}

    @abstractmethod
    def _starter(self, request: LaunchRequest) -> Starter:
        """What starts this launch's missing names, a batch at a time (what the batches
        share, an image or a flavour, found once)."""

    # -- what a started instance carries ---------------------------------------------

    def _metadata(self, name: str, tags: Mapping[str, str]) -> dict[str, str]:
        """The tags of the instance of worker ``name``: the launch's, the site's, its own."""
        return {**tags, SITE_TAG: self.site_id, WORKER_TAG: name}

    def _document(self, userdata: Mapping[str, str], name: str | None = None) -> str:
        """The user data of an instance (of worker ``name``, unless the settings name one)."""
        values = dict(userdata)
        if name is not None:
            values.setdefault("worker_id", name)
        return userdata_for(self.bootstrap, values)

    @staticmethod
    def _created(found: Instance, name: str, metadata: Mapping[str, str]) -> Instance:
        """``found``, the provider's answer to creating worker ``name``, as the worker's
        instance: named after it, with its tags, pending until the provider says more."""
        found.name = name
        found.tags = {**metadata, **found.tags}
        if found.state is InstanceState.UNKNOWN:
            found.state = InstanceState.PENDING  # answered before it has a status
        return found
