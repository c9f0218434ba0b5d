"""Amazon EC2 (and any EC2-compatible endpoint) as the ``ec2`` cloud driver, through boto3.

How the contract maps onto EC2:

* **launch** names every instance after its worker (tag :data:`WORKER_TAG`, and
  ``Name``) and sends a ``ClientToken`` derived from the site and the names, so a
  call retried after a timeout or a crash returns the instances the first one
  started. Names already running are returned as they are, answered from what the
  last ``describe()`` and this driver's launches showed (:mod:`.known`); a name is
  looked up first (one filtered ``describe_instances``) only before the site's first
  listing, or after a launch of it failed, so a scale-out costs one API call per
  launch, not two, however slow the listings.
  Several names go in one ``run_instances`` call per ``batch_size``; the worker
  tags are then set on each instance (``create_tags``).
* **describe** lists the instances tagged with this site (:data:`SITE_TAG`), all
  pages; EC2 is eventually consistent and so is this.
* **terminate** gives back only instances carrying this site's tag: an id of another
  site's or another tool's instance is ignored, like an unknown one. Ids the last
  ``describe()`` showed (or this driver launched) are known to be the site's; others
  are looked up first (one filtered ``describe_instances`` per 200). Up to 1,000 ids
  go in one ``terminate_instances`` call, EC2's limit (:attr:`Ec2Cloud.terminate_batch`).
* **connections**: boto3 keeps ``pool_size`` connections open (the manager's
  ``launch_threads`` and two more, for the describe and a batch of terminations), so
  no thread opens and drops a connection of its own.

Credentials come from boto3's usual chain (environment, shared files, instance
role), or the profile and the credentials file the options name; they never pass
through elasticsite's configuration, logs or state. Errors are
:class:`~elasticsite.clouds.base.CloudError` with a :class:`~.errors.ErrorKind`.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, TypedDict, Unpack

from pydantic import Field

from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, CloudError, Instance, InstanceState
from elasticsite.clouds.bootstrap import BootstrapConfig, worker_userdata
from elasticsite.clouds.errors import ErrorKind, ec2_kind
from elasticsite.clouds.sdk import SdkCloud, Starter, sdk_module
from elasticsite.plugins import CloudPlugin, FilePath, PluginOptions, integer, number

if TYPE_CHECKING:
    from elasticsite.clouds.base import LaunchRequest
    from elasticsite.config import CloudConfig
    from elasticsite.plugins import SiteInfo

__all__ = ["Ec2Cloud", "Ec2Extras", "Ec2Options", "plugin", "worker_userdata"]


STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "shutting-down": InstanceState.STOPPING,
    "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPING,
    "terminated": InstanceState.TERMINATED,
}
"""EC2's instance states (``State.Name``) and what they mean to the manager."""

SPOT_TERMINATION = "Server.SpotInstanceTermination"
"""``StateReason.Code`` of a spot instance EC2 took back."""
_LOADERS: list[Any] = []
"""The botocore data loader of this process's first session, given to every later one."""
_LOADERS_LOCK = threading.Lock()


def _share_data_loader(core: Any) -> None:
    """Give botocore session ``core`` the data loader every EC2 driver of this process
    shares: a loader reads and keeps EC2's service model (megabytes of JSON, a third
    of a second of CPU), and a session of its own would read it again for each driver
    made, as a site of several EC2 clouds or a restart's adoption does. The loader holds
    data files only; credentials, profiles and settings stay each session's own."""
    with _LOADERS_LOCK:
        if _LOADERS:
            core.register_component("data_loader", _LOADERS[0])
        else:
            _LOADERS.append(core.get_component("data_loader"))


_MAX_USERDATA = 16 * 1024  # EC2's limit on user data, before base64
_MAX_TERMINATE = 1000  # instance ids one TerminateInstances call takes
_MAX_FILTER_VALUES = 200  # values of one filter EC2 accepts
_GONE_CODES = ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed")


class Ec2Options(PluginOptions):
    """An EC2 cloud's ``options``."""

    image_id: str = Field(pattern=r"^ami-[0-9a-zA-Z]{1,64}$")
    """The AMI workers boot (a stock image plus the user data, or a pre-baked one)."""
    images: dict[str, Annotated[str, Field(pattern=r"^ami-[0-9a-zA-Z]{1,64}$")]] = {}
    """Per VM type (instance type) images, overriding ``image_id``."""
    region: str = Field("us-east-1", pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    endpoint_url: str | None = Field(None, pattern=r"^https?://")
    """An EC2-compatible endpoint (another provider, a local test server)."""
    profile: str | None = None
    """A profile of the shared credentials file; boto3's usual chain if not set."""
    credentials_file: FilePath | None = None
    """A shared-credentials file to read instead of ``~/.aws/credentials``."""
    subnet_id: str | None = None
    security_group_ids: list[str] = []
    key_name: str | None = None
    instance_profile: str | None = None
    """An IAM instance profile name for the workers."""
    batch_size: Annotated[int, integer(), Field(ge=1, le=1000)] = 50
    """Names sent in one ``run_instances`` call."""
    timeout: Annotated[float, number("in [1, 600] s", 1.0, 600.0)] = 30.0
    """Connect and read timeout of each API call."""
    api_attempts: Annotated[int, integer(), Field(ge=1, le=20)] = 4
    """boto3's own tries per call (its standard retry mode, with jittered backoff)."""
    known_for: Annotated[float, number("in [0, 3600] s", 0.0, 3600.0)] = 60.0
    """Seconds a launch is remembered while listings may not show it yet (0: look every
    launch's names up first; the ``ClientToken`` guards either way)."""


class Ec2Extras(TypedDict, total=False):
    """What :meth:`Ec2Cloud.connect` passes on to the driver beyond its client and
    options (the driver's keywords, with its defaults)."""

    spot: bool
    spot_price_cap: float | None
    bootstrap: BootstrapConfig | None


class Ec2Cloud(SdkCloud):
    """One EC2 region (or compatible endpoint) for one site."""

    terminate_batch = _MAX_TERMINATE
    """Ids the manager gives one :meth:`terminate` call (one ``terminate_instances``)."""

    def __init__(
        self,
        name: str,
        site_id: str,
        client: Any,
        options: Ec2Options,
        *,
        spot: bool = False,
        spot_price_cap: float | None = None,
        bootstrap: BootstrapConfig | None = None,
    ) -> None:
        super().__init__(name, site_id, bootstrap, options.known_for)
        self.client = client
        self.options = options
        self.launch_batch = options.batch_size
        """Names sent in one ``run_instances`` call."""
        self.spot = spot
        """Launch spot instances (one-time requests, terminated on interruption)."""
        self.spot_price_cap = spot_price_cap

    @classmethod
    def connect(
        cls,
        name: str,
        site_id: str,
        options: Ec2Options,
        *,
        pool_size: int = 10,
        **extras: Unpack[Ec2Extras],
    ) -> Ec2Cloud:
        """A driver with its own boto3 session (credentials as the options say), keeping
        up to ``pool_size`` connections open (one per thread that calls it at once)."""
        boto3 = sdk_module("boto3", name, "ec2", "boto3")
        botocore_config = sdk_module("botocore.config", name, "ec2", "boto3")
        botocore_session = sdk_module("botocore.session", name, "ec2", "boto3")
        core = botocore_session.Session(profile=options.profile)
        if options.credentials_file:
            core.set_config_variable("credentials_file", options.credentials_file)
        config = botocore_config.Config(
            region_name=options.region,
            connect_timeout=options.timeout,
            read_timeout=options.timeout,
            retries={"mode": "standard", "total_max_attempts": options.api_attempts},
            max_pool_connections=max(1, pool_size),
        )
        session = boto3.Session(botocore_session=core)
        _share_data_loader(core)  # (after boto3 has added its own data to the first)
        client = session.client("ec2", endpoint_url=options.endpoint_url, config=config)
        return cls(name, site_id, client, options, **extras)

    # -- calls ----------------------------------------------------------------------

    def _call(self, what: str, method: str, **kwargs: Any) -> Any:
        """One API call; every failure becomes a CloudError with its kind, naming the
        EC2 action (``RunInstances``)."""
        try:
            return getattr(self.client, method)(**kwargs)
        except Exception as exc:
            error = self._error(what, exc)
            mapping = getattr(getattr(self.client, "meta", None), "method_to_api_mapping", {})
            error.call = str(mapping.get(method, method))
            raise error from exc

    def _error(self, what: str, exc: Exception) -> CloudError:
        response = getattr(exc, "response", None)
        if isinstance(response, dict):
            error = response.get("Error") or {}
            code = str(error.get("Code") or "")
            status = int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
            message = str(error.get("Message") or exc)
            kind = ec2_kind(code, status)
            return CloudError(f"cloud {self.name}: {what}: {code}: {message}", kind=kind)
        kind_name = type(exc).__name__
        if kind_name in ("NoCredentialsError", "PartialCredentialsError", "ProfileNotFound"):
            kind = ErrorKind.CREDENTIALS
        elif kind_name in (
            "EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
            "ConnectionClosedError",
        ):  # fmt: skip
            kind = ErrorKind.TRANSIENT
        else:
            kind = ErrorKind.UNKNOWN
        return CloudError(f"cloud {self.name}: {what}: {exc}", kind=kind)

    def _instances(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        token: str | None = None
        site = {"Name": f"tag:{SITE_TAG}", "Values": [self.site_id]}
        while True:
            kwargs: dict[str, Any] = {"Filters": [site, *filters], "MaxResults": 1000}
            if token:
                kwargs["NextToken"] = token
            page = self._call("describe_instances", "describe_instances", **kwargs)
            for reservation in page.get("Reservations", []):
                found.extend(reservation.get("Instances", []))
            token = page.get("NextToken")
            if not token:
                return found

    @staticmethod
    def _instance(raw: Mapping[str, Any]) -> Instance:
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", []) if "Key" in t}
        launched = raw.get("LaunchTime")
        created = launched.timestamp() if isinstance(launched, datetime) else 0.0
        state = STATES.get(str((raw.get("State") or {}).get("Name")), InstanceState.UNKNOWN)
        reason = str((raw.get("StateReason") or {}).get("Code") or "")
        return Instance(
            id=str(raw["InstanceId"]),
            name=tags.get(WORKER_TAG) or tags.get("Name", ""),
            state=state,
            tags=tags,
            created_at=created,
            address=str(raw.get("PrivateIpAddress") or ""),
            reclaimed=reason == SPOT_TERMINATION,
        )

    # -- the contract ---------------------------------------------------------------

    def _listing(self) -> list[Instance]:
        return [self._instance(raw) for raw in self._instances([])]

    def _look_up(self, wanted: list[str]) -> dict[str, Instance]:
        live = self._instances(
            [
                {"Name": f"tag:{WORKER_TAG}", "Values": wanted},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )
        return {i.name: i for i in map(self._instance, live)}

    def _starter(self, request: LaunchRequest) -> Starter:
        return lambda names: self._run(names, self.run_request(replace(request, names=names)))

    def _run(self, names: list[str], request: dict[str, Any]) -> list[Instance]:
        """Start ``names`` with the ``run_instances`` call ``request``; their instances."""
        what = f"run_instances ({len(names)} x {request['InstanceType']})"
        reply = self._call(what, "run_instances", **request)
        started = [self._instance(raw) for raw in reply.get("Instances", [])]
        if len(names) == 1:
            for instance in started:
                instance.name = names[0]
            return started
        for instance, name in zip(started, names, strict=False):
            worker = {WORKER_TAG: name, "Name": name}
            self._call(
                f"create_tags {instance.id}",
                "create_tags",
                Resources=[instance.id],
                Tags=[{"Key": k, "Value": v} for k, v in worker.items()],
            )
            instance.name = name
            instance.tags.update(worker)
        return started

    def run_request(self, launch: LaunchRequest) -> dict[str, Any]:
        """The ``run_instances`` arguments of ``launch`` (tags, user data, token)."""
        vm_type, names, tags = launch.vm_type, launch.names, launch.tags
        key = "\0".join([self.site_id, *names]).encode()
        token = hashlib.sha256(key).hexdigest()[:64]  # the same call, retried: the same token
        single = len(names) == 1
        if single:
            common = {**self._metadata(names[0], tags), "Name": names[0]}
        else:
            common = {**tags, SITE_TAG: self.site_id}
            common.pop(WORKER_TAG, None)
        document = self._document(launch.userdata, names[0] if single else None)
        if len(document.encode()) > _MAX_USERDATA:
            raise CloudError(f"cloud {self.name}: launch: user data over 16 KiB")
        request: dict[str, Any] = {
            "ImageId": self.options.images.get(vm_type.name, self.options.image_id),
            "InstanceType": vm_type.name,
            "MinCount": len(names),
            "MaxCount": len(names),
            "ClientToken": token,
            "UserData": document,
            "TagSpecifications": [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in sorted(common.items())],
                },
            ],
        }
        if self.options.subnet_id:
            request["SubnetId"] = self.options.subnet_id
        if self.options.security_group_ids:
            request["SecurityGroupIds"] = list(self.options.security_group_ids)
        if self.options.key_name:
            request["KeyName"] = self.options.key_name
        if self.options.instance_profile:
            request["IamInstanceProfile"] = {"Name": self.options.instance_profile}
        if self.spot:
            spot: dict[str, str] = {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            }
            if self.spot_price_cap is not None:
                spot["MaxPrice"] = f"{self.spot_price_cap:.6f}"
            request["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
        return request

    def terminate(self, instance_ids: Sequence[str]) -> None:
        ids = list(dict.fromkeys(i for i in instance_ids if i))
        if not ids:
            return
        known = self.known.ours(ids)
        seen = set(known)
        ours = known + self._existing([i for i in ids if i not in seen])
        for start in range(0, len(ours), _MAX_TERMINATE):
            chunk = ours[start : start + _MAX_TERMINATE]
            try:
                self._terminate(chunk)
            except CloudError as exc:
                if not any(code in str(exc) for code in _GONE_CODES):
                    raise
                # EC2 has forgotten one of them (terminated long ago): the others go
                self._terminate(self._existing(chunk))
        self.known.forget(ids)

    def _existing(self, ids: list[str]) -> list[str]:
        """Those of ``ids`` that are this site's instances and not terminated yet."""
        found: list[str] = []
        for start in range(0, len(ids), _MAX_FILTER_VALUES):
            chunk = ids[start : start + _MAX_FILTER_VALUES]
            found.extend(
                str(raw["InstanceId"])
                for raw in self._instances([{"Name": "instance-id", "Values": chunk}])
                if (raw.get("State") or {}).get("Name") != "terminated"
            )
        return found

    def _terminate(self, ids: list[str]) -> None:
        if ids:
            self._call(f"terminate_instances ({len(ids)})", "terminate_instances", InstanceIds=ids)


def _create(options: Ec2Options, cloud: CloudConfig, site: SiteInfo) -> Ec2Cloud:
    return Ec2Cloud.connect(
        cloud.name, site.site_id, options,
        spot=cloud.spot, spot_price_cap=cloud.spot_price_cap, bootstrap=site.config.bootstrap,
        pool_size=site.config.manager.launch_threads + 2,
    )  # fmt: skip


plugin = CloudPlugin(Ec2Options, _create)
"""The ``ec2`` entry point of ``elasticsite.clouds``."""
