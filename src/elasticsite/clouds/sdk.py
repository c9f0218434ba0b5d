"""What the drivers built on a provider's SDK share (``ec2``, ``openstack``, ``libcloud``):
the names a launch really asks for, the SDK import that names the extra to install,
and the one place an SDK's failure becomes a :class:`~elasticsite.clouds.base.CloudError`."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from elasticsite.clouds.base import SITE_TAG, CloudError
from elasticsite.clouds.errors import ErrorKind

__all__ = ["guarded", "sdk_module", "size_pools", "wanted_names"]

ErrorMapper = Callable[[str, str, Exception], CloudError]
"""``(cloud, what was being done, the SDK's exception) -> CloudError`` with its kind."""


def wanted_names(
    cloud: str, site_id: str, names: Sequence[str], tags: Mapping[str, str]
) -> list[str]:
    """``names`` without repeats, once the tags are seen to name this site (a launch for
    another site is a caller's bug, refused before anything starts)."""
    if tags.get(SITE_TAG, site_id) != site_id:
        raise CloudError(f"cloud {cloud}: launch: tags name another site")
    return list(dict.fromkeys(names))


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
