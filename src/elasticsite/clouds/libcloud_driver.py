"""Any compute provider Apache Libcloud supports (GCE, Azure, DigitalOcean, Linode,
Vultr ...) as the ``libcloud`` cloud driver.

How the contract maps onto a provider seen through libcloud (what differs between
providers is in :mod:`~elasticsite.clouds.libcloud_providers`):

* **Names.** Every node is named after its worker; a launch creates only the names
  that have no live node, one ``create_node`` each, with an idempotency token where
  the provider's API has one (EC2's ``ClientToken``). Which names are live comes
  from the last ``describe()`` and this driver's own launches since (:mod:`.known`);
  a listing comes first only before the site's first one, or after a failed launch.
* **Tags.** The site's and the worker's tags travel the way the provider carries
  them (``tag_style``, chosen per provider by default). A node is this site's when
  its tags, or its name, say so; where the provider can, the listing itself is
  narrowed to the site's tag (EC2's filters, DigitalOcean's ``tag_name``).
* **Catalogue.** Sizes, images and locations are listed once and kept for
  ``catalog_ttl`` seconds; a name missing from a listing more than a minute old
  lists again, once.
* **terminate** destroys only this site's nodes (those the last ``describe()``
  showed, others only if a listing shows them ours); unknown ids are ignored.
  ``destroy_node`` takes one node, so the manager runs a step's terminations
  concurrently (:attr:`LibcloudCloud.terminate_batch` is 1).
* **Threads.** A libcloud driver keeps its last response on its connection, so two
  threads sharing one would read each other's answers: each thread of the manager's
  pool gets a driver of its own.

Secrets (the key and secret, and any secret constructor argument) come from
``credentials_file`` (TOML: ``key = "..."``, ``secret = "..."``, more ``name =
value`` pairs for the provider's constructor) or the ``ELASTICSITE_LIBCLOUD_KEY`` /
``_SECRET`` environment; the site file holds only ``driver_args`` that are not
secret. Errors are :class:`~elasticsite.clouds.base.CloudError` with an
:class:`~.errors.ErrorKind`.
"""

from __future__ import annotations

import hashlib
import os
import threading
import tomllib
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, field_validator

from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, CloudError, Instance, InstanceState
from elasticsite.clouds.bootstrap import BootstrapConfig
from elasticsite.clouds.errors import ErrorKind, http_kind
from elasticsite.clouds.libcloud_providers import (
    PROVIDERS,
    SEP,
    STATES,
    Catalog,
    TagStyle,
    Ways,
    label,
    list_ours,
    tags_of,
)
from elasticsite.clouds.sdk import SdkCloud, Starter, guarded, sdk_module
from elasticsite.plugins import CloudPlugin, FilePath, PluginOptions, number

if TYPE_CHECKING:
    from elasticsite.clouds.base import LaunchRequest
    from elasticsite.config import CloudConfig
    from elasticsite.plugins import SiteInfo

__all__ = ["LibcloudCloud", "LibcloudOptions", "plugin"]

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
    credentials_file: FilePath | None = None
    """TOML with ``key``, ``secret`` and any other secret constructor argument."""
    driver_args: dict[str, str | int | float | bool] = {}
    """Constructor arguments that are not secret (``project``, ``region``, ``host`` ...)."""
    create_args: dict[str, str | int | float | bool | list[str]] = {}
    """Extra ``create_node`` arguments (``ex_*``) that are not secret."""
    tag_style: TagStyle | None = None
    """How tags travel (see the module docstring); the provider's own by default."""
    timeout: Annotated[float | None, number("in [1, 600] s", 1.0, 600.0)] = None
    """Seconds per API call (the provider driver's default if not set)."""
    known_for: Annotated[float, number("in [0, 3600] s", 0.0, 3600.0)] = 60.0
    """Seconds a launch is remembered while listings may not show it yet (0: list the
    nodes before every launch)."""
    catalog_ttl: Annotated[float, number("in [0, 86400] s", 0.0, 86400.0)] = 3600.0
    """Seconds the provider's sizes, images and locations are kept before listing again."""

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


class LibcloudCloud(SdkCloud):
    """One provider account (and region) for one site, through libcloud."""

    terminate_batch = 1
    """``destroy_node`` takes one node: the manager runs them concurrently."""

    def __init__(
        self,
        name: str,
        site_id: str,
        make_driver: Callable[[], Any],
        options: LibcloudOptions,
        bootstrap: BootstrapConfig | None = None,
    ) -> None:
        super().__init__(name, site_id, bootstrap, options.known_for)
        self.options = options
        self.ways: Ways = PROVIDERS.get(options.provider, Ways())
        self.style: TagStyle = options.tag_style or self.ways.style
        self.catalog: dict[str, Catalog] = {}
        self._make_driver = make_driver
        self._local = threading.local()
        self._seen: dict[str, Any] = {}
        """This site's nodes by id as of the last describe, and those created since."""
        self._lock = threading.Lock()
        self.node_driver = self._driver()

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
        key = args.pop("key")

        def make_driver() -> Any:
            try:
                node_driver = providers.get_driver(options.provider)(key, **args)
                if endpoint:
                    for attr, value in endpoint.items():
                        setattr(node_driver.connection, attr, value)
                    node_driver.connection.connect()  # again, to the endpoint given
            except Exception as exc:
                raise _error(name, "connect", exc) from None
            return node_driver

        return cls(name, site_id, make_driver, options, bootstrap)

    def _driver(self) -> Any:
        """This thread's libcloud driver (libcloud's connections are not thread-safe)."""
        found = getattr(self._local, "driver", None)
        if found is None:
            found = self._local.driver = self._make_driver()
        return found

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(self._driver(), method)
        return guarded(self.name, what, _error, fn, *args, **kwargs)

    # -- tags and names -------------------------------------------------------------

    def _ours(self, node: Any) -> bool:
        site = tags_of(self.style, node).get(SITE_TAG)
        wanted = self.site_id if self.style != "labels" else label("s", self.site_id)[2:]
        return site == wanted

    def _instance(self, node: Any) -> Instance:
        tags = tags_of(self.style, node)
        created = 0.0
        extra = node.extra or {}
        stamp = extra.get("created_at") or extra.get("launch_time")
        stamp = stamp or getattr(node, "created_at", None)
        if isinstance(stamp, datetime):
            created = stamp.timestamp()
        elif isinstance(stamp, str):
            try:
                created = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            except ValueError:
                created = 0.0
        name = tags.get(WORKER_TAG) or str(node.name).rpartition(SEP)[2]
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
        """This site's nodes: a listing narrowed to its tag where the provider can (and
        the tags travel the provider's own way)."""
        narrowed = None
        if self.style == self.ways.style:
            narrowed = guarded(self.name, "list nodes", _error, list_ours, self.ways,
                               self._driver(), self.site_id)  # fmt: skip
        if narrowed is None:
            narrowed = self._call("list nodes", "list_nodes")
        return [n for n in narrowed if self._ours(n)]

    def _pick(self, what: str, wanted: str) -> Any:
        """The size, image or location ``wanted`` names, from the provider's catalogue."""
        by_id = what == "image" and self.ways.image_by_id
        key = f"image {wanted}" if by_id else what
        catalog = self.catalog.setdefault(key, Catalog(self.options.catalog_ttl))

        def listing() -> list[Any]:
            if not by_id:
                return list(self._call(f"list {what}s", f"list_{what}s"))
            try:
                return [self._call(f"get image {wanted}", "get_image", wanted)]
            except CloudError as exc:  # none by that id
                if isinstance(exc.__cause__, IndexError) or "NotFound" in str(exc):
                    return []
                raise

        found = catalog.find(wanted, listing)
        if found is None:
            raise CloudError(
                f"cloud {self.name}: no {what} {wanted!r} at {self.options.provider}",
                kind=ErrorKind.NOT_FOUND, call="get_image" if by_id else f"list_{what}s",
            )  # fmt: skip
        return found

    # -- the contract ---------------------------------------------------------------

    def _listing(self) -> list[Instance]:
        nodes = self._nodes()
        with self._lock:
            self._seen = {str(n.id): n for n in nodes}
        return [self._instance(n) for n in nodes]

    def _look_up(self, wanted: list[str]) -> dict[str, Instance]:
        live = (InstanceState.PENDING, InstanceState.RUNNING)
        return {i.name: i for i in map(self._instance, self._nodes()) if i.state in live}

    def _starter(self, launch: LaunchRequest) -> Starter:
        vm = launch.vm_type.name
        size = self._pick("size", self.options.sizes.get(vm, vm))
        image = self._pick("image", self.options.images.get(vm, self.options.image))
        location = self._pick("location", self.options.location) if self.options.location else None
        return lambda names: [self._create(names[0], launch, size, image, location)]

    def _create(
        self, name: str, launch: LaunchRequest, size: Any, image: Any, location: Any
    ) -> Instance:
        metadata = self._metadata(name, launch.tags)
        document = self._document(launch.userdata, name)
        args: dict[str, Any] = dict(self.options.create_args)
        node_name = name
        if self.style == "metadata":
            args["ex_metadata"] = {**metadata, "user-data": document}
        elif self.style == "ec2":
            args["ex_metadata"] = metadata
            args["ex_userdata"] = document
        elif self.style == "tags":
            args["ex_tags"] = metadata
            args["ex_customdata"] = document
        elif self.style == "labels":
            args["ex_create_attr"] = {
                **dict(args.get("ex_create_attr") or {}),
                "tags": [label(k, v) for k, v in sorted(metadata.items())],
            }
            args["ex_user_data"] = document
        else:
            node_name = f"{self.site_id}{SEP}{name}"
        if self.ways.token:  # the same launch, retried: the same token
            key = "\0".join([self.site_id, name]).encode()
            args[self.ways.token] = hashlib.sha256(key).hexdigest()[:64]
        node = self._call(
            f"create node {name}", "create_node",
            name=node_name, size=size, image=image, location=location, **args,
        )  # fmt: skip
        with self._lock:
            self._seen[str(node.id)] = node
        return self._created(self._instance(node), name, metadata)

    def terminate(self, instance_ids: Sequence[str]) -> None:
        ids = list(dict.fromkeys(i for i in instance_ids if i))
        if not ids:
            return
        with self._lock:
            nodes = {i: self._seen[i] for i in ids if i in self._seen}
        if len(nodes) < len(ids):  # not all seen as ours: only if a listing says so
            listed = {str(n.id): n for n in self._nodes()}
            nodes.update({i: listed[i] for i in ids if i in listed and i not in nodes})
        for node_id, node in nodes.items():
            self._call(f"destroy node {node_id}", "destroy_node", node)
        self.known.forget(ids)
        with self._lock:
            for node_id in ids:
                self._seen.pop(node_id, None)


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
