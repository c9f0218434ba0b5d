"""The embedded cloud as the ``local`` cloud driver: its options and its factory.

Apart from :mod:`elasticsite.clouds.local` so that worker processes, which import
that module, never load pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from elasticsite.clouds.capacity import Host
from elasticsite.clouds.capacity_policy import CloudPolicy
from elasticsite.clouds.local import LocalCloud
from elasticsite.clouds.local_capacity import HostCapacity
from elasticsite.clouds.local_registry import worker_log
from elasticsite.plugins import CloudPlugin, PluginOptions, integer, number

if TYPE_CHECKING:
    from elasticsite.config import CloudConfig
    from elasticsite.plugins import SiteInfo

__all__ = ["LocalCloudOptions", "plugin"]

_Seconds = Annotated[float, number("a number of seconds in [0, 86400]", 0.0, 86400.0)]
_Probability = Annotated[float, number("a probability in [0, 1]", 0.0, 1.0)]
_BOOTS = "an integer in [0, 10000] (0: no limit)"


class HostOptions(BaseModel):
    """One host of a finite local cloud."""

    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]
    cores: Annotated[int, Field(ge=1, le=4096)] = 8
    memory_mb: Annotated[int, Field(ge=1, le=1 << 24)] = 16384


class LocalCloudOptions(PluginOptions):
    """A local cloud's ``options``: :class:`~elasticsite.clouds.local.LocalCloud`'s
    arguments of the same names.

    ``boot_delay`` and ``shutdown_delay`` default to the cloud's ``boot_time`` and
    ``shutdown_time``: unless told otherwise, workers take what the policies expect.
    ``image_transfer`` (the part of a boot alone that moves its image over a link the
    cloud's boots share) and ``parallel_boots`` (boots in progress at once, the rest
    wait) give the cloud paper 000's contention (``docs/boot-model.md``).
    ``boot_slowdown``, the constant per boot in flight this replaced, is refused with
    a message naming them.
    """

    boot_delay: _Seconds = 60.0
    boot_jitter: _Seconds = 0.0
    shutdown_delay: _Seconds = 6.0
    poll_interval: Annotated[float, number("in [0.001, 3600] s", 0.001, 3600.0)] = 1.0
    seed: Annotated[int | None, integer()] = None
    fail_boot: _Probability = 0.0
    fail_launch: _Probability = 0.0
    api_delay: _Seconds = 0.0
    image_transfer: _Seconds = 0.0
    parallel_boots: Annotated[int, integer(_BOOTS)] = 0
    boot_slowdown: Any = None
    """Refused: see :meth:`_replaced`."""
    hosts: list[HostOptions] | None = None
    """A finite cloud: the hosts its instances take slots on (unlimited when absent)."""
    urgent_policies: dict[Literal["red", "orange", "yellow"], CloudPolicy] = {}
    """On a finite cloud: what an urgent launch of each urgency may do to make room."""

    @model_validator(mode="before")
    @classmethod
    def _cloud_estimates(cls, data: Any, info: ValidationInfo) -> Any:
        """Fill the delays not given from the cloud's estimates (the validation context)."""
        cloud = (info.context or {}).get("cloud", {})
        if isinstance(data, dict):
            for option, estimate in (
                ("boot_delay", "boot_time"),
                ("shutdown_delay", "shutdown_time"),
            ):
                if option not in data and estimate in cloud:
                    data = {**data, option: cloud[estimate]}
        return data

    @field_validator("boot_slowdown")
    @classmethod
    def _replaced(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError(
                "replaced by image_transfer (seconds a boot's image takes alone over the "
                "cloud's shared link) and parallel_boots (boots at once); see "
                "docs/boot-model.md"
            )
        return value

    @field_validator("parallel_boots")
    @classmethod
    def _boots(cls, value: int) -> int:
        if not 0 <= value <= 10000:
            raise ValueError(f"must be {_BOOTS}")
        return value

    @field_validator("image_transfer")
    @classmethod
    def _within_a_boot(cls, value: float, info: ValidationInfo) -> float:
        shortest = info.data.get("boot_delay", 0.0) - info.data.get("boot_jitter", 0.0)
        if "boot_delay" in info.data and value > shortest:
            raise ValueError(
                f"must not exceed the shortest boot alone, boot_delay - boot_jitter "
                f"({shortest:g} s), which includes it"
            )
        return value


def _create(options: LocalCloudOptions, cloud: CloudConfig, site: SiteInfo) -> LocalCloud:
    capacity = None
    if options.hosts:
        capacity = HostCapacity(
            [Host(h.name, h.cores, h.memory_mb) for h in options.hosts],
            {str(k): v for k, v in options.urgent_policies.items()},
        )
    return LocalCloud(
        name=cloud.name,
        state_dir=site.state_dir,
        site_id=site.site_id,
        batch_path=site.batch_path,
        capacity=capacity,
        **options.model_dump(exclude={"hosts", "urgent_policies", "boot_slowdown"}),
    )


plugin = CloudPlugin(LocalCloudOptions, _create, loopback=True, worker_log=worker_log)
"""The ``local`` entry point of ``elasticsite.clouds``."""
