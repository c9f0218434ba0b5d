"""What differs between the providers the ``libcloud`` driver reaches: how tags travel,
whether the node list can be narrowed to one site's tag, which ``create_node``
argument carries an idempotency token, and the provider's catalogue of sizes, images
and locations, kept for a while (:class:`Catalog`).

=================  ============  ============================  =======================
provider           tags          listing narrowed by           idempotency token
=================  ============  ============================  =======================
``ec2``            ``ec2``       ``tag:elasticsite-site``      ``ex_clienttoken``
``digitalocean``   ``labels``    ``tag_name`` (the site label) —
``gce``            ``metadata``  —                             —
``openstack``      ``metadata``  —                             —
``azure_arm``      ``tags``      —                             —
``outscale``,      ``name``      —                             ``ex_client_token``
``aliyun_ecs``
any other          ``name``      —                             —
=================  ============  ============================  =======================

Tag styles: ``metadata`` (``ex_metadata``, read from ``extra["metadata"]``), ``tags``
(``ex_tags``), ``labels`` (a list of ``key:value`` strings), ``ec2`` (EC2 resource
tags, set through ``ex_metadata`` and read from ``extra["tags"]``), and ``name`` for
a provider with none: the node's name carries the site (``<site>--<worker>``).
"""

from __future__ import annotations

import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, InstanceState

__all__ = ["PROVIDERS", "STATES", "Catalog", "TagStyle", "Ways", "label", "list_ours", "tags_of"]

TagStyle = Literal["metadata", "tags", "labels", "name", "ec2"]
SEP = "--"
"""Between the site and the worker in a node's name, for the ``name`` style."""
STATES = {
    "running": InstanceState.RUNNING,
    "pending": InstanceState.PENDING,
    "starting": InstanceState.PENDING,
    "rebooting": InstanceState.RUNNING,
    "reconfiguring": InstanceState.RUNNING,
    "migrating": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPING,
    "suspended": InstanceState.STOPPING,
    "paused": InstanceState.STOPPING,
    "terminated": InstanceState.TERMINATED,
    "error": InstanceState.ERROR,
    "unknown": InstanceState.UNKNOWN,
}
"""libcloud's ``NodeState`` values and what they mean to the manager."""


@dataclass(frozen=True, slots=True)
class Ways:
    """How one provider carries tags, narrows its listing and makes a launch idempotent."""

    style: TagStyle = "name"
    token: str = ""
    """The ``create_node`` keyword of an idempotency token (empty: the API has none)."""
    narrow: Literal["", "ec2", "tag_name"] = ""
    """How the node list is narrowed to the site's tag (empty: it cannot be)."""
    image_by_id: bool = False
    """Ask for the image by its id (``get_image``) rather than list every image the
    account may use (EC2 lists every public one)."""


PROVIDERS: dict[str, Ways] = {
    "ec2": Ways("ec2", token="ex_clienttoken", narrow="ec2", image_by_id=True),
    "digitalocean": Ways("labels", narrow="tag_name"),
    "gce": Ways("metadata"),
    "openstack": Ways("metadata"),
    "azure_arm": Ways("tags"),
    "outscale": Ways("name", token="ex_client_token"),
    "aliyun_ecs": Ways("name", token="ex_client_token"),
}
"""Each provider's ways; any other: tags in the node name, nothing narrowed, no token."""


def label(key: str, value: str) -> str:
    """A ``key:value`` label of the ``labels`` style (characters the providers refuse
    become ``_``)."""
    return re.sub(r"[^A-Za-z0-9:_-]", "_", f"{key}:{value}")


def tags_of(style: TagStyle, node: Any) -> dict[str, str]:
    """The tags a node carries, read the way its provider carries them."""
    extra = node.extra or {}
    if style == "labels":
        found = {}
        for item in extra.get("tags") or []:
            key, sep, value = str(item).partition(":")
            if sep:
                found[key] = value
        return found
    if style == "name":
        site, sep, worker = str(node.name).partition(SEP)
        return {SITE_TAG: site, WORKER_TAG: worker} if sep else {}
    raw = extra.get("metadata" if style == "metadata" else "tags") or {}
    if isinstance(raw, dict) and "items" in raw:  # GCE's metadata
        raw = {i.get("key"): i.get("value") for i in raw["items"]}
    return {str(k): str(v) for k, v in dict(raw).items()} if isinstance(raw, dict) else {}


def list_ours(ways: Ways, driver: Any, site_id: str) -> list[Any] | None:
    """The provider's nodes narrowed to the site's tag, or None where the provider's
    listing cannot be narrowed (the caller lists every node and keeps the site's)."""
    if ways.narrow == "ec2":
        return list(driver.list_nodes(ex_filters={f"tag:{SITE_TAG}": site_id}))
    if ways.narrow == "tag_name":
        page = getattr(driver, "_paginated_request", None)
        to_node = getattr(driver, "_to_node", None)
        if page is None or to_node is None:  # another libcloud version: list them all
            return None
        query = urllib.parse.quote(label(SITE_TAG, site_id), safe="")
        return [to_node(d) for d in page(f"/v2/droplets?tag_name={query}", "droplets")]
    return None


class Catalog:
    """One kind of the provider's catalogue (sizes, images or locations), listed once
    and kept for ``ttl`` seconds; a name not in a listing older than ``recheck``
    seconds lists again (a new image, a new size), once."""

    def __init__(
        self, ttl: float, recheck: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.recheck = recheck
        self.clock = clock
        self._items: list[Any] = []
        self._listed_at: float | None = None
        self._lock = threading.Lock()

    def find(self, wanted: str, listing: Callable[[], Any]) -> Any | None:
        """The item whose id, name or slug is ``wanted``, or None."""
        with self._lock:
            age = None if self._listed_at is None else self.clock() - self._listed_at
            if age is None or age >= self.ttl:
                self._list(listing)
                return _match(self._items, wanted)
            found = _match(self._items, wanted)
            if found is None and age >= self.recheck:
                self._list(listing)
                found = _match(self._items, wanted)
            return found

    def _list(self, listing: Callable[[], Any]) -> None:
        self._items = list(listing())
        self._listed_at = self.clock()


def _match(items: list[Any], wanted: str) -> Any | None:
    for item in items:  # by id, name, or the slug some providers name things by
        extra = getattr(item, "extra", None)
        slug = extra.get("slug") if isinstance(extra, Mapping) else None
        if wanted in (str(item.id), str(item.name), str(slug)):
            return item
    return None
