"""OpenStack (Nova, and Glance for image names) as the ``openstack`` cloud driver.

How the contract maps onto Nova, through openstacksdk:

* **launch** creates one server per worker, named after it, with the site's and the
  worker's tags as server metadata and the worker's settings as cloud-config user
  data. Names whose server is live are returned as they are (looked up in the
  site's server list first), so a retried launch starts nothing twice.
* **describe** lists the project's servers (all pages) and keeps those whose
  metadata names this site.
* **terminate** deletes only servers carrying this site's metadata; unknown ids and
  other servers are ignored. Servers the last ``describe()`` showed (or this driver
  created) are known to be the site's and deleted at once; other ids are looked up
  in one server list. Nova deletes one server per call, so the manager runs a step's
  deletions concurrently on its pool (:attr:`OpenStackCloud.terminate_batch` is 1),
  and the session keeps a connection open for each of its threads.
* A server Nova could not place goes to ``ERROR`` with the fault "No valid host was
  found": that is Nova's way of saying it has no capacity. ``describe`` reports it as
  an error (the manager fails the worker and gives the server back), and the next
  launch of that flavour is refused with kind ``capacity``, so the manager closes
  that VM type for its cool-down instead of filling the project with failed servers.

Credentials come from openstacksdk's usual chain (``clouds.yaml`` through ``cloud``,
or the ``OS_*`` environment) or from ``credentials_file``, an openrc file
(``export OS_USERNAME=...``, or an application credential); they never pass
through elasticsite's configuration, logs or state. Errors are
:class:`~elasticsite.clouds.base.CloudError` with an :class:`~.errors.ErrorKind`.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, model_validator

from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, CloudError, Instance, InstanceState
from elasticsite.clouds.bootstrap import BootstrapConfig
from elasticsite.clouds.errors import ErrorKind, openstack_kind
from elasticsite.clouds.sdk import SdkCloud, Starter, guarded, sdk_module, size_pools
from elasticsite.model import VMType
from elasticsite.plugins import CloudPlugin, FilePath, PluginOptions, integer, number

if TYPE_CHECKING:
    from elasticsite.clouds.base import LaunchRequest
    from elasticsite.config import CloudConfig
    from elasticsite.plugins import SiteInfo

__all__ = ["OpenStackCloud", "OpenStackOptions", "plugin", "read_openrc"]


STATES = {
    "BUILD": InstanceState.PENDING,
    "ACTIVE": InstanceState.RUNNING,
    "REBOOT": InstanceState.RUNNING,
    "HARD_REBOOT": InstanceState.RUNNING,
    "PASSWORD": InstanceState.RUNNING,
    "REBUILD": InstanceState.RUNNING,
    "RESIZE": InstanceState.RUNNING,
    "VERIFY_RESIZE": InstanceState.RUNNING,
    "REVERT_RESIZE": InstanceState.RUNNING,
    "MIGRATING": InstanceState.RUNNING,
    "SHUTOFF": InstanceState.STOPPING,
    "PAUSED": InstanceState.STOPPING,
    "SUSPENDED": InstanceState.STOPPING,
    "SHELVED": InstanceState.STOPPING,
    "SHELVED_OFFLOADED": InstanceState.STOPPING,
    "DELETED": InstanceState.TERMINATED,
    "SOFT_DELETED": InstanceState.TERMINATED,
    "ERROR": InstanceState.ERROR,
}
"""Nova's server statuses and what they mean to the manager."""

NO_VALID_HOST = re.compile(r"no valid host", re.IGNORECASE)
_OPENRC = {
    "OS_AUTH_URL": "auth_url",
    "OS_USERNAME": "username",
    "OS_PASSWORD": "password",
    "OS_PROJECT_NAME": "project_name",
    "OS_PROJECT_ID": "project_id",
    "OS_USER_DOMAIN_NAME": "user_domain_name",
    "OS_PROJECT_DOMAIN_NAME": "project_domain_name",
    "OS_REGION_NAME": "region_name",
    "OS_APPLICATION_CREDENTIAL_ID": "application_credential_id",
    "OS_APPLICATION_CREDENTIAL_SECRET": "application_credential_secret",
}
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.:/ -]{0,254}$"


class OpenStackOptions(PluginOptions):
    """An OpenStack cloud's ``options``."""

    image: str = Field(pattern=_NAME)
    """Name or id of the image workers boot (a stock one plus user data, or pre-baked)."""
    images: dict[str, Annotated[str, Field(pattern=_NAME)]] = {}
    """Per VM type images, overriding ``image``."""
    flavors: dict[str, Annotated[str, Field(pattern=_NAME)]] = {}
    """VM type -> Nova flavour (name or id); a type not listed is the flavour of its name."""
    cloud: str | None = Field(None, pattern=_NAME)
    """An entry of ``clouds.yaml`` (openstacksdk's usual places)."""
    auth_url: str | None = Field(None, pattern=r"^https?://\S+$")
    project_name: str | None = None
    project_id: str | None = None
    user_domain_name: str = "Default"
    project_domain_name: str = "Default"
    region_name: str | None = None
    credentials_file: FilePath | None = None
    """An openrc file (``export OS_USERNAME=...``) with the user's password or an
    application credential; keep it ``0600``."""
    network: str | None = None
    """Network id the workers attach to; Nova's automatic choice if not set."""
    key_name: str | None = None
    security_groups: list[str] = []
    availability_zone: str | None = None
    timeout: Annotated[float, number("in [1, 600] s", 1.0, 600.0)] = 30.0
    """Timeout of each API call."""
    api_attempts: Annotated[int, integer(), Field(ge=1, le=20)] = 4
    """Tries per call on a connection failure or a 409/429/5xx answer (with backoff)."""

    @model_validator(mode="after")
    def _where(self) -> OpenStackOptions:
        if self.cloud is None and self.auth_url is None and self.credentials_file is None:
            raise ValueError(
                "name a clouds.yaml entry (cloud), or give auth_url or a credentials_file"
            )
        return self


def read_openrc(path: str | Path) -> dict[str, str]:
    """The ``OS_*`` settings of an openrc file, as openstacksdk arguments."""
    found: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CloudError(
            f"credentials file {path}: cannot read: {exc.strerror or exc}",
            kind=ErrorKind.CREDENTIALS,
        ) from None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line.removeprefix("export "))
        except ValueError:
            continue
        for word in words:
            key, sep, value = word.partition("=")
            if sep and key in _OPENRC:
                found[_OPENRC[key]] = value
    return found


class OpenStackCloud(SdkCloud):
    """One OpenStack project (and region) for one site."""

    terminate_batch = 1
    """Nova deletes one server per call: the manager runs them concurrently."""

    def __init__(
        self,
        name: str,
        site_id: str,
        conn: Any,
        options: OpenStackOptions,
        bootstrap: BootstrapConfig | None = None,
    ) -> None:
        super().__init__(name, site_id, bootstrap, 60.0)
        self.conn = conn
        self.options = options
        self._flavors: dict[str, str] = {}
        self._images: dict[str, str] = {}

    def __repr__(self) -> str:  # never the connection (it holds the credentials)
        return f"OpenStackCloud({self.name!r}, site={self.site_id!r})"

    @classmethod
    def connect(
        cls,
        name: str,
        site_id: str,
        options: OpenStackOptions,
        bootstrap: BootstrapConfig | None = None,
        pool_size: int = 10,
    ) -> OpenStackCloud:
        """A driver with its own openstacksdk connection (credentials as the options say),
        keeping up to ``pool_size`` connections open per endpoint."""
        connection = sdk_module("openstack.connection", name, "openstack", "openstacksdk")
        args: dict[str, Any] = {
            "api_timeout": options.timeout,
            "connect_retries": options.api_attempts - 1,
            "status_code_retries": options.api_attempts - 1,
            "app_name": "elasticsite",
        }
        if options.cloud:
            args["cloud"] = options.cloud
        else:
            auth = {
                "auth_url": options.auth_url,
                "project_name": options.project_name,
                "project_id": options.project_id,
                "user_domain_name": options.user_domain_name,
                "project_domain_name": options.project_domain_name,
            }
            if options.credentials_file:
                auth.update(read_openrc(options.credentials_file))
            region = auth.pop("region_name", None) or options.region_name
            if "application_credential_id" in auth:
                args["auth_type"] = "v3applicationcredential"
                for key in ("project_name", "project_id", "user_domain_name"):
                    auth.pop(key, None)
            args["auth"] = {k: v for k, v in auth.items() if v}
            if region:
                args["region_name"] = region
        try:
            conn = connection.Connection(**args)
            size_pools(getattr(conn.session, "session", None), pool_size)
        except Exception as exc:
            raise _error(name, "connect", exc) from None
        return cls(name, site_id, conn, options, bootstrap)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return guarded(self.name, what, _error, fn, *args, **kwargs)

    # -- lookups --------------------------------------------------------------------

    def _servers(self) -> list[Any]:
        def servers() -> list[Any]:
            return list(self.conn.compute.servers(details=True))

        found = self._call("list servers", servers)
        return [s for s in found if (s.metadata or {}).get(SITE_TAG) == self.site_id]

    def _flavor(self, vm_type: VMType) -> str:
        wanted = self.options.flavors.get(vm_type.name, vm_type.name)
        if wanted not in self._flavors:
            flavor = self._call(
                f"find flavor {wanted}", self.conn.compute.find_flavor, wanted,
                ignore_missing=False,
            )  # fmt: skip
            self._flavors[wanted] = flavor.id
        return self._flavors[wanted]

    def _image(self, vm_type: VMType) -> str:
        wanted = self.options.images.get(vm_type.name, self.options.image)
        if wanted not in self._images:
            image = self._call(
                f"find image {wanted}", self.conn.image.find_image, wanted, ignore_missing=False
            )
            self._images[wanted] = image.id
        return self._images[wanted]

    @staticmethod
    def _instance(server: Any) -> Instance:
        metadata = {str(k): str(v) for k, v in (server.metadata or {}).items()}
        created = 0.0
        if server.created_at:
            try:
                stamp = datetime.fromisoformat(str(server.created_at).replace("Z", "+00:00"))
                created = stamp.timestamp()
            except ValueError:
                created = 0.0
        return Instance(
            id=str(server.id),
            name=metadata.get(WORKER_TAG) or str(server.name or ""),
            state=STATES.get(str(server.status or "").upper(), InstanceState.UNKNOWN),
            tags=metadata,
            created_at=float(created),
            address=str(server.access_ipv4 or ""),
        )

    # -- the contract ---------------------------------------------------------------

    def _listing(self) -> list[Instance]:
        return [self._instance(s) for s in self._servers()]

    def _live(self, vm_type: VMType, wanted: list[str]) -> dict[str, Instance]:
        """The site's live servers by name, from a listing (always: it also shows whether
        Nova could place the last server of this flavour)."""
        servers = self._servers()
        flavor = self._flavor(vm_type)
        named = self.options.flavors.get(vm_type.name, vm_type.name)
        for s in servers:  # Nova could not place the last one of this flavour
            fault = (s.fault or {}).get("message", "") if isinstance(s.fault, dict) else ""
            if (
                str(s.status).upper() == "ERROR"
                and NO_VALID_HOST.search(str(fault))
                and _flavor_of(s) in (flavor, named, None)
            ):
                raise CloudError(
                    f"cloud {self.name}: launch ({vm_type.name}): {fault}",
                    kind=ErrorKind.CAPACITY,
                )
        return {
            i.name: i
            for i in map(self._instance, servers)
            if i.state in (InstanceState.PENDING, InstanceState.RUNNING)
        }

    def _starter(self, launch: LaunchRequest) -> Starter:
        image, flavor = self._image(launch.vm_type), self._flavor(launch.vm_type)
        return lambda names: [self._create(names[0], launch, image, flavor)]

    def _create(self, name: str, launch: LaunchRequest, image: str, flavor: str) -> Instance:
        vm_type = launch.vm_type
        metadata = self._metadata(name, launch.tags)
        document = self._document(launch.userdata, name)
        request: dict[str, Any] = {
            "name": name,
            "image_id": image,
            "flavor_id": flavor,
            "metadata": {k: str(v)[:255] for k, v in metadata.items()},
            "user_data": base64.b64encode(document.encode()).decode(),
            "networks": [{"uuid": self.options.network}] if self.options.network else "auto",
        }
        if self.options.key_name:
            request["key_name"] = self.options.key_name
        if self.options.security_groups:
            request["security_groups"] = [{"name": g} for g in self.options.security_groups]
        if self.options.availability_zone:
            request["availability_zone"] = self.options.availability_zone
        server = self._call(
            f"create server {name} ({vm_type.name})", self.conn.compute.create_server, **request
        )
        return self._created(self._instance(server), name, metadata)

    def terminate(self, instance_ids: Sequence[str]) -> None:
        ids = list(dict.fromkeys(i for i in instance_ids if i))
        known = self.known.ours(ids)
        unknown = set(ids) - set(known)
        if unknown:  # not seen as ours: only if the server list says so
            known += [
                str(s.id) for s in self._servers()
                if str(s.id) in unknown and str(s.status).upper() != "DELETED"
            ]  # fmt: skip
        for server_id in known:
            self._call(
                f"delete server {server_id}",
                self.conn.compute.delete_server, server_id, ignore_missing=True,
            )  # fmt: skip


def _flavor_of(server: Any) -> str | None:
    """A server's flavour id (before Nova 2.47) or name (since); None if not shown."""
    flavor = server.flavor
    if flavor is None:
        return None
    for key in ("id", "original_name", "name"):
        value = flavor.get(key) if isinstance(flavor, dict) else getattr(flavor, key, None)
        if value:
            return str(value)
    return None


def _error(cloud: str, what: str, exc: Exception) -> CloudError:
    """``exc`` (openstacksdk's or keystoneauth's) as a CloudError with its kind."""
    status = getattr(exc, "status_code", None) or getattr(exc, "http_status", None) or 0
    message = str(getattr(exc, "details", None) or exc)
    kind = openstack_kind(type(exc).__name__, int(status or 0), message)
    return CloudError(f"cloud {cloud}: {what}: {message}", kind=kind)


def _create(options: OpenStackOptions, cloud: CloudConfig, site: SiteInfo) -> OpenStackCloud:
    return OpenStackCloud.connect(
        cloud.name, site.site_id, options, site.config.bootstrap,
        pool_size=site.config.manager.launch_threads + 2,
    )  # fmt: skip


plugin = CloudPlugin(OpenStackOptions, _create)
"""The ``openstack`` entry point of ``elasticsite.clouds``."""
