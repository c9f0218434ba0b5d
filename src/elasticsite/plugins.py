"""Cloud drivers, batch systems and policies found by name: the plug-in registries.

A site's configuration names its cloud drivers (``[[clouds]] driver``), its batch
system (``[batch] type``) and its policy (``[policy] name``). Each name is an entry
point, in the ``elasticsite.clouds``, ``elasticsite.batch`` or ``elasticsite.policies``
group, whose object is a :class:`CloudPlugin`, :class:`BatchPlugin` or
:class:`PolicyPlugin`: the plug-in's options model and what it builds or decides with.
The built-in drivers are declared in elasticsite's own ``pyproject.toml``, the built-in
policies registered as their modules are imported; a third party declares its own
with entry points::

    [project.entry-points."elasticsite.clouds"]
    mycloud = "my_package.cloud:plugin"

A plug-in's module is imported only when a configuration names it (as Libcloud's
provider registry does), so a site that uses Slurm never imports the HTCondor
bindings. Options are validated when the configuration is loaded: extra keys are
refused, numbers must be finite, and a bad value is one line naming its field. A file
or directory an option names (:data:`FilePath`) is taken relative to the directory of
the configuration file that names it, wherever the command runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Generic, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    ValidationInfo,
)

if TYPE_CHECKING:
    from elasticsite.batch.base import BatchSystem
    from elasticsite.clouds.base import CloudDriver
    from elasticsite.config import CloudConfig, SiteConfig
    from elasticsite.model import Decision, Job
    from elasticsite.policies.base import PolicySettings
    from elasticsite.snapshot import SiteSnapshot

__all__ = [
    "BASE_DIR",
    "BATCH_GROUP",
    "CLOUD_GROUP",
    "DEFAULT_BATCH_SYSTEM",
    "DEFAULT_CLOUD_DRIVER",
    "POLICY_GROUP",
    "BatchPlugin",
    "CloudPlugin",
    "FilePath",
    "PluginOptions",
    "PolicyPlugin",
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
POLICY_GROUP = "elasticsite.policies"
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
    loopback: bool = False
    """Its instances publish addresses in 127.0.0.0/8 (the embedded cloud's), which a
    broker then accepts from its workers."""
    worker_log: Callable[[Path, str], Path] | None = None
    """``(state_dir, worker id) -> path`` of a worker's log on this host, for a driver
    that keeps one; None: the batch system's word on where a job's log is, alone."""


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
    userdata: Callable[[OptionsT, str], Mapping[str, str]] | None = None
    """``(options, mode) -> what every worker is told about joining it``, besides
    ``batch`` (its type); None: nothing more."""
    ledger: Callable[[BatchSystem, bool], tuple[list[Job], dict[str, int]]] | None = None
    """``(system, finished) -> (jobs, count per state)`` for a system that keeps every
    job it ran, finished ones included (the embedded one); None: the manager lists
    what one snapshot shows."""
    cloud_partition: Callable[[OptionsT], str | None] | None = None
    """``options -> the partition its cloud workers' nodes are in`` (None: the options
    do not fix one), so a redirecting policy's target is checked against it when the
    configuration is loaded; None: the system does not say."""
    owners: bool = True
    """It can keep a node for one user's jobs (a policy that ``owners`` needs it)."""


@dataclass(frozen=True, slots=True)
class PolicyPlugin(Generic[OptionsT]):
    """A provisioning policy: its pure ``decide(snapshot, settings) -> Decision``, the
    model of its own ``[policy]`` options, and what it asks of the site.

    ``redirects``: it moves queued jobs to the partition the cloud workers serve
    (``redirect_to``), so jobs elsewhere are not cloud demand. ``typed_nodes``: it
    launches a worker for one VM type's jobs, so each cloud node is declared for its
    type. ``preboot``: it keeps a pool the workload waits for. ``owners``: each VM serves
    one user. Calling the plug-in
    calls ``decide``.
    """

    decide: Callable[[SiteSnapshot, PolicySettings], Decision]
    options: type[OptionsT] = PluginOptions  # type: ignore[assignment]
    redirects: bool = False
    typed_nodes: bool = False
    preboot: Callable[[PolicySettings], int] | None = None
    """``settings -> workers booted and joined before the first job is submitted`` (a
    fixed pool's size); None: none."""
    owners: bool = False
    """Its launches name the user each VM serves, whose jobs alone run there: the batch
    system must keep a node for one user (:attr:`BatchPlugin.owners`)."""

    def __call__(self, snapshot: SiteSnapshot, settings: PolicySettings) -> Decision:
        return self.decide(snapshot, settings)


class UnknownPlugin(LookupError):
    """No plug-in is published under that name, or it failed to load."""


P = TypeVar("P", CloudPlugin[Any], BatchPlugin[Any], PolicyPlugin[Any])


class Registry(Generic[P]):
    """The plug-ins of one entry-point group, each loaded on first use.

    ``builtins``, when given, imports the modules that :meth:`add` their plug-ins as
    they load (the built-in policies), before the first lookup. ``adapt`` turns a
    loaded object of another type into a plug-in (a policy published as a bare
    function), or returns None to refuse it. ``error`` is the exception raised for an
    unknown name (a subclass of :class:`UnknownPlugin`).
    """

    def __init__(
        self,
        group: str,
        kind: str,
        plugin_type: type[P],
        *,
        builtins: Callable[[], None] | None = None,
        adapt: Callable[[Any], P | None] | None = None,
        error: type[UnknownPlugin] | None = None,
    ) -> None:
        self.group = group
        self.kind = kind
        """What a plug-in of this group is called in messages ("cloud driver")."""
        self.plugin_type: type[P] = plugin_type
        self._loaded: dict[str, P] = {}
        self._builtins = builtins
        self._adapt: Callable[[Any], P | None] | None = adapt
        self._error = error or UnknownPlugin

    def _entry_points(self) -> dict[str, EntryPoint]:
        return {ep.name: ep for ep in entry_points(group=self.group)}

    def _load_builtins(self) -> None:
        if self._builtins is not None:
            load, self._builtins = self._builtins, None
            load()

    def add(self, name: str, plugin: P) -> P:
        """Publish ``plugin`` as ``name`` in this process (a built-in, or a test's);
        ValueError when another plug-in has that name already."""
        old = self._loaded.get(name)
        if old is not None and old != plugin:
            raise ValueError(f"a {self.kind} named {name!r} is already registered")
        self._loaded[name] = plugin
        return plugin

    def names(self) -> list[str]:
        """Every published name, without importing any third-party plug-in."""
        self._load_builtins()
        return sorted(set(self._loaded) | set(self._entry_points()))

    def get(self, name: str) -> P:
        """The plug-in published as ``name``, imported on first use.

        Raises :class:`UnknownPlugin` naming the known ones, or saying why the plug-in
        could not be loaded.
        """
        self._load_builtins()
        if name in self._loaded:
            return self._loaded[name]
        ep = self._entry_points().get(name)
        if ep is None:
            known = ", ".join(self.names()) or (
                f"none (no package publishes the {self.group!r} entry points: "
                "is elasticsite installed?)"
            )
            raise self._error(f"unknown {self.kind} {name!r}; available: {known}")
        try:
            loaded = ep.load()
        except Exception as exc:
            raise self._error(
                f"{self.kind} {name!r} from {ep.value} failed to load: {exc}"
            ) from exc
        plugin = loaded if isinstance(loaded, self.plugin_type) else None
        if plugin is None and self._adapt is not None:
            plugin = self._adapt(loaded)
        if plugin is None:
            raise self._error(
                f"{self.kind} {name!r} ({ep.value}) is a {type(loaded).__name__}, "
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


BASE_DIR = "base_dir"
"""The validation context's key for the directory relative paths are taken from: the
configuration file's (:func:`elasticsite.config.load_config` sets it)."""


def _from_base(value: str, info: ValidationInfo) -> str:
    path = Path(value).expanduser()
    base = (info.context or {}).get(BASE_DIR)
    if path.is_absolute() or base is None:
        return str(path)
    return str(Path(base) / path)


FilePath = Annotated[str, AfterValidator(_from_base)]
"""A file or directory a configuration names: ``~`` expanded, and a relative path taken
from the configuration file's directory (not from wherever a command runs), so every
command, service and hook finds the same file."""


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

    Keys the model does not know are told first, ``unknown LABEL option(s) A, B; valid:
    ...``; else every problem is told on one line, ``LABEL option FIELD must be ...,
    got VALUE`` (several are joined by ``; ``), raised as ``error``.
    """
    unknown = sorted(set(raw) - set(model.model_fields))
    if unknown:
        raise error(
            f"unknown {label} option(s) {', '.join(map(str, unknown))}; "
            f"valid: {', '.join(model.model_fields)}"
        )
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        raise error("; ".join(_problem(e, label) for e in exc.errors())) from None
