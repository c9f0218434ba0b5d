"""Any compute provider Apache Libcloud supports (GCE, Azure, DigitalOcean, Linode,
Vultr ...) as the ``libcloud`` cloud driver.

How the contract maps onto a provider seen through libcloud:

* **Names.** Every node is named after its worker; a launch lists the nodes first
  and creates only the names that have no live node, one ``create_node`` each.
* **Tags.** The site's and the worker's tags travel the way the provider carries
  them (``tag_style``, chosen per provider by default): ``metadata``
  (``ex_metadata``: GCE, OpenStack), ``tags`` (``ex_tags``: Azure), ``labels`` (a
  list of ``key:value`` strings: DigitalOcean), or ``name`` for a provider with
  neither, where the node name carries the site (``<site>--<worker>``). A node is
  this site's when its tags, or its name, say so.
* **terminate** destroys only this site's nodes; unknown ids are ignored.

Secrets (the key and secret, and any secret constructor argument) come from
``credentials_file`` (TOML: ``key = "..."``, ``secret = "..."``, more ``name =
value`` pairs for the provider's constructor) or the ``ELASTICSITE_LIBCLOUD_KEY`` /
``_SECRET`` environment; the site file holds only ``driver_args`` that are not
secret. Errors are :class:`~elasticsite.clouds.base.CloudError` with an
:class:`~.errors.ErrorKind`.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator

from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, CloudError, Instance, InstanceState
from elasticsite.clouds.bootstrap import BootstrapConfig, userdata_for
from elasticsite.clouds.errors import ErrorKind, http_kind
from elasticsite.clouds.sdk import guarded, sdk_module, wanted_names
from elasticsite.model import VMType
from elasticsite.plugins import CloudPlugin, PluginOptions, number

if TYPE_CHECKING:
    from elasticsite.config import CloudConfig
    from elasticsite.plugins import SiteInfo

__all__ = ["LibcloudCloud", "LibcloudOptions", "plugin"]

TagStyle = Literal["metadata", "tags", "labels", "name"]
TAG_STYLES: dict[str, TagStyle] = {
    "gce": "metadata",
    "openstack": "metadata",
    "azure_arm": "tags",
    "digitalocean": "labels",
}
"""How each provider carries tags; any other provider: ``name``."""
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
_SEP = "--"
_SECRET_WORDS = ("key", "secret", "password", "token", "credential")


class LibcloudOptions(PluginOptions):
    """A libcloud cloud's ``options``."""

    provider: str = Field(pattern=r"^[a-z][a-z0-9_]{1,40}$")
    """A libcloud ``Provider`` value: ``gce``, ``azure_arm``, ``digitalocean``, ``linode`` ..."""
    image: str
    """The image's id or name."""
    images: dict[str, str] = {}
    """Per VM type images, overriding ``image``."""
    sizes: dict[str, str] = {}
    """VM type -> the provider's size id or name; a type not listed is the size of its name."""
    location: str | None = None
    """Region or zone, by id or name (the provider's default if not set)."""
    credentials_file: str | None = None
    """TOML with ``key``, ``secret`` and any other secret constructor argument."""
    driver_args: dict[str, str | int | float | bool] = {}
    """Constructor arguments that are not secret (``project``, ``region``, ``host`` ...)."""
    create_args: dict[str, str | int | float | bool | list[str]] = {}
    """Extra ``create_node`` arguments (``ex_*``) that are not secret."""
    tag_style: TagStyle | None = None
    """How tags travel (see the module docstring); the provider's own by default."""
    timeout: Annotated[float | None, number("in [1, 600] s", 1.0, 600.0)] = None
    """Seconds per API call (the provider driver's default if not set)."""

    @field_validator("provider")
    @classmethod
    def _known(cls, value: str) -> str:
        try:
            from libcloud.compute.types import Provider
        except ImportError:
            return value  # reported when the driver is created
        names = sorted(v for k, v in vars(Provider).items() if k.isupper() and isinstance(v, str))
        if value not in names:
            close = [n for n in names if n.startswith(value[:3])][:5] or names[:5]
            raise ValueError(f"not a libcloud provider; e.g. {', '.join(close)}")
        return value

    @field_validator("driver_args", "create_args")
    @classmethod
    def _not_secret(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if any(word in name.lower() for word in _SECRET_WORDS):
                raise ValueError(f"{name}: secrets go in credentials_file, not the site file")
        return value


def _read_secrets(path: str | None) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if path:
        try:
            found = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise CloudError(
                f"credentials file {path}: cannot read: {exc.strerror or exc}",
                kind=ErrorKind.CREDENTIALS,
            ) from None
        except tomllib.TOMLDecodeError:
            raise CloudError(
                f"credentials file {path}: not valid TOML",
                kind=ErrorKind.CREDENTIALS,
            ) from None
    for name in ("key", "secret"):
        env = os.environ.get(f"ELASTICSITE_LIBCLOUD_{name.upper()}")
        if env and name not in found:
            found[name] = env
    return found


class LibcloudCloud:
    """One provider account (and region) for one site, through libcloud."""

    def __init__(
        self,
        name: str,
        site_id: str,
        node_driver: Any,
        options: LibcloudOptions,
        bootstrap: BootstrapConfig | None = None,
    ) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.site_id = site_id
        self.node_driver = node_driver
        self.options = options
        self.style: TagStyle = options.tag_style or TAG_STYLES.get(options.provider, "name")
        self._sizes: dict[str, Any] = {}
        self._images: dict[str, Any] = {}
        self._location: Any = None

    def __repr__(self) -> str:  # never the driver (it holds the key)
        return f"LibcloudCloud({self.name!r}, {self.options.provider}, site={self.site_id!r})"

    @classmethod
    def connect(
        cls,
        name: str,
        site_id: str,
        options: LibcloudOptions,
        bootstrap: BootstrapConfig | None = None,
    ) -> LibcloudCloud:
        providers = sdk_module("libcloud.compute.providers", name, "libcloud", "apache-libcloud")
        secrets = _read_secrets(options.credentials_file)
        if "key" not in secrets:
            raise CloudError(
                f'cloud {name}: no key: give a credentials_file with key = "..." or set '
                "ELASTICSITE_LIBCLOUD_KEY",
                kind=ErrorKind.CREDENTIALS,
            )
        args: dict[str, Any] = {**options.driver_args, **secrets}
        if options.timeout is not None:
            args["timeout"] = options.timeout
        # The endpoint is set on the connection: some providers' constructors (the
        # DigitalOcean one) refuse host/port/secure as keyword arguments.
        endpoint = {k: args.pop(k) for k in ("host", "port", "secure") if k in args}
        try:
            driver_class = providers.get_driver(options.provider)
            node_driver = driver_class(args.pop("key"), **args)
            if endpoint:
                for attr, value in endpoint.items():
                    setattr(node_driver.connection, attr, value)
                node_driver.connection.connect()  # again, to the endpoint given
        except Exception as exc:
            raise _error(name, "connect", exc) from None
        return cls(name, site_id, node_driver, options, bootstrap)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return guarded(self.name, what, _error, fn, *args, **kwargs)

    # -- tags and names -------------------------------------------------------------

    def _label(self, key: str, value: str) -> str:
        return re.sub(r"[^A-Za-z0-9:_-]", "_", f"{key}:{value}")

    def _tags_of(self, node: Any) -> dict[str, str]:
        extra = node.extra or {}
        if self.style == "labels":
            found = {}
            for label in extra.get("tags") or []:
                key, sep, value = str(label).partition(":")
                if sep:
                    found[key] = value
            return found
        if self.style == "name":
            site, sep, worker = str(node.name).partition(_SEP)
            return {SITE_TAG: site, WORKER_TAG: worker} if sep else {}
        raw = extra.get("metadata" if self.style == "metadata" else "tags") or {}
        if isinstance(raw, dict) and "items" in raw:  # GCE's metadata
            raw = {i.get("key"): i.get("value") for i in raw["items"]}
        return {str(k): str(v) for k, v in dict(raw).items()} if isinstance(raw, dict) else {}

    def _ours(self, node: Any) -> bool:
        site = self._tags_of(node).get(SITE_TAG)
        wanted = self.site_id if self.style != "labels" else self._label("s", self.site_id)[2:]
        return site == wanted

    def _instance(self, node: Any) -> Instance:
        tags = self._tags_of(node)
        created = 0.0
        stamp = (node.extra or {}).get("created_at") or getattr(node, "created_at", None)
        if isinstance(stamp, datetime):
            created = stamp.timestamp()
        elif isinstance(stamp, str):
            try:
                created = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            except ValueError:
                created = 0.0
        name = tags.get(WORKER_TAG) or str(node.name).rpartition(_SEP)[2]
        addresses = list(node.private_ips or []) + list(node.public_ips or [])
        return Instance(
            id=str(node.id),
            name=name,
            state=STATES.get(str(node.state).lower(), InstanceState.UNKNOWN),
            tags=tags,
            created_at=created,
            address=str(addresses[0]) if addresses else "",
        )

    # -- lookups --------------------------------------------------------------------

    def _nodes(self) -> list[Any]:
        return [n for n in self._call("list nodes", self.node_driver.list_nodes) if self._ours(n)]

    def _pick(self, what: str, wanted: str, listing: Any) -> Any:
        found = self._call(f"list {what}s", listing)
        for item in found:  # by id, name, or the slug some providers name things by
            extra = getattr(item, "extra", None)
            slug = extra.get("slug") if isinstance(extra, dict) else None
            if wanted in (str(item.id), str(item.name), str(slug)):
                return item
        raise CloudError(
            f"cloud {self.name}: no {what} {wanted!r} at {self.options.provider}",
            kind=ErrorKind.NOT_FOUND,
        )

    def _size(self, vm_type: VMType) -> Any:
        wanted = self.options.sizes.get(vm_type.name, vm_type.name)
        if wanted not in self._sizes:
            self._sizes[wanted] = self._pick("size", wanted, self.node_driver.list_sizes)
        return self._sizes[wanted]

    def _image(self, vm_type: VMType) -> Any:
        wanted = self.options.images.get(vm_type.name, self.options.image)
        if wanted not in self._images:
            self._images[wanted] = self._pick("image", wanted, self.node_driver.list_images)
        return self._images[wanted]

    def _where(self) -> Any:
        if self.options.location and self._location is None:
            self._location = self._pick(
                "location", self.options.location, self.node_driver.list_locations
            )
        return self._location

    # -- the contract ---------------------------------------------------------------

    def describe(self) -> list[Instance]:
        return [self._instance(n) for n in self._nodes()]

    def launch(
        self,
        vm_type: VMType,
        names: Sequence[str],
        userdata: Mapping[str, str],
        tags: Mapping[str, str],
    ) -> list[Instance]:
        wanted = wanted_names(self.name, self.site_id, names, tags)
        if not wanted:
            return []
        live = (InstanceState.PENDING, InstanceState.RUNNING)
        have = {i.name: i for i in map(self._instance, self._nodes()) if i.state in live}
        missing = [n for n in wanted if n not in have]
        if missing:
            size, image, location = self._size(vm_type), self._image(vm_type), self._where()
            for name in missing:
                have[name] = self._create(name, size, image, location, userdata, tags)
        return [have[n] for n in wanted]

    def _create(
        self,
        name: str,
        size: Any,
        image: Any,
        location: Any,
        userdata: Mapping[str, str],
        tags: Mapping[str, str],
    ) -> Instance:
        metadata = {**tags, SITE_TAG: self.site_id, WORKER_TAG: name}
        values = {**userdata, "worker_id": userdata.get("worker_id", name)}
        document = userdata_for(self.bootstrap, values)
        args: dict[str, Any] = dict(self.options.create_args)
        node_name = name
        if self.style == "metadata":
            args["ex_metadata"] = {**metadata, "user-data": document}
        elif self.style == "tags":
            args["ex_tags"] = metadata
            args["ex_customdata"] = document
        elif self.style == "labels":
            args["ex_create_attr"] = {
                **dict(args.get("ex_create_attr") or {}),
                "tags": [self._label(k, v) for k, v in sorted(metadata.items())],
            }
            args["ex_user_data"] = document
        else:
            node_name = f"{self.site_id}{_SEP}{name}"
        node = self._call(
            f"create node {name}",
            self.node_driver.create_node,
            name=node_name, size=size, image=image, location=location, **args,
        )  # fmt: skip
        found = self._instance(node)
        found.name = name
        found.tags = {**metadata, **found.tags}
        if found.state is InstanceState.UNKNOWN:
            found.state = InstanceState.PENDING
        return found

    def terminate(self, instance_ids: Sequence[str]) -> None:
        ids = {i for i in instance_ids if i}
        if not ids:
            return
        for node in self._nodes():
            if str(node.id) in ids:
                self._call(f"destroy node {node.id}", self.node_driver.destroy_node, node)


def _error(cloud: str, what: str, exc: Exception) -> CloudError:
    """A libcloud exception as a CloudError with its kind (by class name and code)."""
    name = type(exc).__name__
    message = str(getattr(exc, "message", None) or getattr(exc, "value", None) or exc)
    status = getattr(exc, "code", None) or getattr(exc, "http_code", None) or 0
    if name == "InvalidCredsError":
        kind = ErrorKind.CREDENTIALS
    elif name == "RateLimitReachedError":
        kind = ErrorKind.THROTTLED
    elif isinstance(exc, OSError | TimeoutError) or name in ("ConnectionError", "Timeout"):
        kind = ErrorKind.TRANSIENT
    else:
        kind = http_kind(int(status) if str(status).isdigit() else 0, message)
    return CloudError(f"cloud {cloud}: {what}: {message}", kind=kind)


def _create(options: LibcloudOptions, cloud: CloudConfig, site: SiteInfo) -> LibcloudCloud:
    return LibcloudCloud.connect(cloud.name, site.site_id, options, site.config.bootstrap)


plugin = CloudPlugin(LibcloudOptions, _create)
"""The ``libcloud`` entry point of ``elasticsite.clouds``."""
