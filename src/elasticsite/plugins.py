"""Cloud drivers and batch systems found by name: the two plug-in registries.

A site's configuration names its cloud drivers (``[[clouds]] driver``) and its batch
system (``[batch] type``). Each name is an entry point, in the ``elasticsite.clouds``
or ``elasticsite.batch`` group, whose object is a :class:`CloudPlugin` or
:class:`BatchPlugin`: the plug-in's options model and the factory that builds it.
The built-in ones are declared in elasticsite's own ``pyproject.toml``; a third
party declares its own the same way::

    [project.entry-points."elasticsite.clouds"]
    mycloud = "my_package.cloud:plugin"

A plug-in's module is imported only when a configuration names it (as Libcloud's
provider registry does), so a site that uses Slurm never imports the HTCondor
bindings. Options are validated when the configuration is loaded: extra keys are
refused, numbers must be finite, and a bad value is one line naming its field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

if TYPE_CHECKING:
    from elasticsite.batch.base import BatchSystem
    from elasticsite.clouds.base import CloudDriver
    from elasticsite.config import CloudConfig, SiteConfig

__all__ = [
    "BATCH_GROUP",
    "CLOUD_GROUP",
    "DEFAULT_BATCH_SYSTEM",
    "DEFAULT_CLOUD_DRIVER",
    "BatchPlugin",
    "CloudPlugin",
    "PluginOptions",
    "Registry",
    "SiteInfo",
    "UnknownPlugin",
    "batch_systems",
    "clouds",
    "integer",
    "number",
    "validate_options",
]

CLOUD_GROUP = "elasticsite.clouds"
BATCH_GROUP = "elasticsite.batch"
DEFAULT_CLOUD_DRIVER = "local"
"""The driver of a ``[[clouds]]`` entry that names none: the embedded cloud."""
DEFAULT_BATCH_SYSTEM = "local"
"""The batch system of a site whose ``[batch]`` names none: the embedded one."""


class PluginOptions(BaseModel):
    """The base of every plug-in's options: unknown keys refused, numbers finite, frozen.

    An empty instance of this base stands for "no options given" until the plug-in's
    own model has validated them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    def image_of(self, vm_type: str) -> str | None:
        """The image a worker of ``vm_type`` boots, as a cloud driver's options say it:
        ``images[vm_type]``, else ``image`` or ``image_id``; None when they do not say.
        A driver whose options name images otherwise overrides this."""
        per_type = getattr(self, "images", None)
        if isinstance(per_type, Mapping) and isinstance(per_type.get(vm_type), str):
            return str(per_type[vm_type])
        for name in ("image", "image_id"):
            value = getattr(self, name, None)
            if isinstance(value, str) and value:
                return value
        return None


OptionsT = TypeVar("OptionsT", bound=PluginOptions)


@dataclass(frozen=True, slots=True)
class SiteInfo:
    """What the site tells every plug-in's factory about itself.

    ``batch_path`` is the embedded batch system's file, which the embedded batch
    system keeps and local cloud workers join; ``config`` is the whole validated
    configuration, for anything else a plug-in needs (the embedded batch system reads
    the manager's heartbeat timeout).
    """

    site_id: str
    state_dir: Path
    batch_path: Path
    config: SiteConfig


@dataclass(frozen=True, slots=True)
class CloudPlugin(Generic[OptionsT]):
    """A cloud driver: its options model and ``create(options, cloud, site)``.

    ``cloud`` is the cloud's own :class:`~elasticsite.config.CloudConfig` (its name,
    caps and time estimates). The options are validated with the validation context
    ``{"cloud": {...}}``, the cloud's other settings as validated so far, so a model
    may default an option to one of them (the local cloud's ``boot_delay`` is its
    ``boot_time``). ``create`` may raise ValueError or TypeError for what it refuses
    (reported as a configuration error) or :class:`~elasticsite.clouds.base.CloudError`.
    """

    options: type[OptionsT]
    create: Callable[[OptionsT, CloudConfig, SiteInfo], CloudDriver]


@dataclass(frozen=True, slots=True)
class BatchPlugin(Generic[OptionsT]):
    """A batch system: its options model and ``create(options, site)``.

    ``modes`` are the ``[batch] mode`` values it supports: ``external`` (the
    manager's policy decides) and, for a system that can ask for nodes itself,
    ``power_save``. ``owners`` says whether it can keep a node for one user's jobs
    (:meth:`~elasticsite.batch.base.BatchSystem.set_owner`), which the fair share of
    the ``cloud_scheduler`` policy needs. ``create`` may raise ValueError, TypeError or
    :class:`~elasticsite.batch.base.BatchError`, reported as a configuration error.
    """

    options: type[OptionsT]
    create: Callable[[OptionsT, SiteInfo], BatchSystem]
    modes: tuple[str, ...] = ("external",)
    owners: bool = True


class UnknownPlugin(LookupError):
    """No plug-in is published under that name, or it failed to load."""


P = TypeVar("P", CloudPlugin[Any], BatchPlugin[Any])


class Registry(Generic[P]):
    """The plug-ins of one entry-point group, each loaded on first use."""

    def __init__(self, group: str, kind: str, plugin_type: type[P]) -> None:
        self.group = group
        self.kind = kind
        """What a plug-in of this group is called in messages ("cloud driver")."""
        self.plugin_type: type[P] = plugin_type
        self._loaded: dict[str, P] = {}

    def _entry_points(self) -> dict[str, EntryPoint]:
        return {ep.name: ep for ep in entry_points(group=self.group)}

    def names(self) -> list[str]:
        """Every published name, without importing any plug-in."""
        return sorted(set(self._loaded) | set(self._entry_points()))

    def get(self, name: str) -> P:
        """The plug-in published as ``name``, imported on first use.

        Raises :class:`UnknownPlugin` naming the known ones, or saying why the plug-in
        could not be loaded.
        """
        if name in self._loaded:
            return self._loaded[name]
        ep = self._entry_points().get(name)
        if ep is None:
            known = ", ".join(self.names()) or (
                f"none (no package publishes the {self.group!r} entry points: "
                "is elasticsite installed?)"
            )
            raise UnknownPlugin(f"unknown {self.kind} {name!r}; available: {known}")
        try:
            plugin = ep.load()
        except Exception as exc:
            raise UnknownPlugin(
                f"{self.kind} {name!r} from {ep.value} failed to load: {exc}"
            ) from exc
        if not isinstance(plugin, self.plugin_type):
            raise UnknownPlugin(
                f"{self.kind} {name!r} ({ep.value}) is a {type(plugin).__name__}, "
                f"not a {self.plugin_type.__name__}"
            )
        self._loaded[name] = plugin
        return plugin


clouds: Registry[CloudPlugin[Any]] = Registry(CLOUD_GROUP, "cloud driver", CloudPlugin)
"""Cloud drivers, by the name ``[[clouds]] driver`` gives."""
batch_systems: Registry[BatchPlugin[Any]] = Registry(BATCH_GROUP, "batch system", BatchPlugin)
"""Batch systems, by the name ``[batch] type`` gives."""


# -- what options models share -------------------------------------------------------------


def number(what: str, low: float = -math.inf, high: float = math.inf, *, text: bool = False) -> Any:
    """A validator for ``Annotated[float, number(...)]``: a finite number in [low, high],
    else "must be ``what``". With ``text``, a numeric string is taken too (as the PBS and
    HTCondor options always were); a bool never is. None passes, for optional fields."""

    def check(value: Any) -> Any:
        if value is None:
            return value
        if text and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ValueError(f"must be {what}") from None
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not low <= value <= high:
            raise ValueError(f"must be {what}")
        return float(value)

    return BeforeValidator(check)


def integer(what: str = "an integer") -> Any:
    """A validator for ``Annotated[int, integer()]``: an int, never a bool, a float or
    a string. None passes, for optional fields."""

    def check(value: Any) -> Any:
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"must be {what}")
        return value

    return BeforeValidator(check)


def _problem(err: Any, label: str) -> str:
    field = ".".join(str(p) for p in err["loc"]) or "options"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if msg.startswith("Input should"):
        msg = msg.replace("Input should", "should", 1)
    value = err.get("input")
    if isinstance(value, dict) and err["type"] != "value_error":
        return f"{label} option {field} {msg}"
    shown = repr(value)
    if shown in msg:  # the message quotes the value already
        return f"{label} option {field}: {msg}"
    return f"{label} option {field} {msg}, got {shown}"


def validate_options(
    model: type[OptionsT],
    raw: Mapping[str, Any],
    label: str,
    error: type[Exception] = ValueError,
) -> OptionsT:
    """``raw`` validated into ``model``, for adapters built from a plain mapping.

    Every problem is told on one line, ``LABEL option FIELD must be ..., got VALUE``
    (several are joined by ``; ``), raised as ``error``.
    """
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        raise error("; ".join(_problem(e, label) for e in exc.errors())) from None
