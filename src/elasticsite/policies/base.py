"""What a policy is, the settings it reads, and the registry that finds it by name.

A policy is a :class:`~elasticsite.plugins.PolicyPlugin`: a pure function
``decide(snapshot, settings) -> Decision`` (no clock reads, time is ``snapshot.now``;
no I/O, no randomness), the pydantic model of its own ``[policy]`` options, and the
capabilities it declares (``redirects``, ``typed_nodes``). The built-in ones are
registered with :func:`register` as their modules load; third-party ones are published
in the ``elasticsite.policies`` entry-point group, as a ``PolicyPlugin`` or as a bare
function (then without options of its own or capabilities)::

    [project.entry-points."elasticsite.policies"]
    my_policy = "my_package.my_module:plugin"
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol, TypeVar

from elasticsite.model import Decision
from elasticsite.plugins import POLICY_GROUP, PluginOptions, PolicyPlugin, Registry, UnknownPlugin
from elasticsite.snapshot import SiteSnapshot
from elasticsite.spend import Budget

__all__ = [
    "CLOUD_RULES",
    "ENTRY_POINT_GROUP",
    "SHARED_SETTINGS",
    "Decide",
    "Policy",
    "PolicySettings",
    "UnknownPolicy",
    "available",
    "get",
    "options_of",
    "register",
    "registry",
    "settings_for",
    "with_options",
]

ENTRY_POINT_GROUP = POLICY_GROUP

CloudRule = Literal["cheapest", "fastest", "ordered", "balanced", "spot_first"]
CLOUD_RULES: dict[str, str] = {
    "cheapest": "lowest price per hour first, then lowest waste time, then configuration order",
    "fastest": "lowest waste time (boot + shutdown) first, then lowest price, then order",
    "ordered": "fill clouds in configuration order (a private cloud before a public one)",
    "balanced": "the cloud with the most free capacity (max_instances - live), then price",
    "spot_first": "spot clouds first, then on-demand ones (each group cheapest first)",
}
"""How the cloud of each new worker is chosen; every rule skips full clouds."""


@dataclass(frozen=True, slots=True)
class PolicySettings:
    """What a policy decides with: the limits every policy obeys, which the shared
    planning and the engine read, and the policy's own options.

    ``options`` is the chosen policy's options as its model validated them; each
    policy reads its thresholds there, typed, with :func:`options_of` (the built-ins'
    defaults are paper 000's: steady stream at 5x / 3x the waste time, bursts at 2x, a
    dedicated pool of 10). ``params`` is the options' free ``params`` table, for a
    policy published as a bare function. The stall timeout defaults to paper 001's
    10 minutes. :func:`settings_for` builds them as a site file's ``[policy]`` would.
    """

    spend_cap_per_hour: float | None = None
    urgent_extra_instances: int = 0
    """Workers urgent jobs may add past the clouds' ``max_instances`` (0: none), up to
    each cloud's ``quota`` (:mod:`elasticsite.policies.urgent`)."""
    urgent_extra_spend_per_hour: float = 0.0
    """Spend per hour urgent jobs may add past ``spend_cap_per_hour``."""
    budget: Budget | None = None
    """Money per calendar period (UTC) no launch may push the forecast past
    (:mod:`elasticsite.policies.budget`); the snapshot brings what is spent so far."""
    cloud_rule: CloudRule = "cheapest"
    billing_margin: float = 120.0
    stall_timeout: float = 600.0
    params: Mapping[str, Any] = field(default_factory=dict)
    options: PluginOptions = field(default_factory=PluginOptions)


OptionsT = TypeVar("OptionsT", bound=PluginOptions)


def options_of(settings: PolicySettings, model: type[OptionsT]) -> OptionsT:
    """The options of ``model`` that ``settings`` carry: ``settings.options`` when it is
    one (a site's always is, for every built-in policy's model: see
    :func:`options_model`), else ``model``'s defaults."""
    given = settings.options
    return given if isinstance(given, model) else _defaults(model)


@functools.cache
def _defaults(model: type[OptionsT]) -> OptionsT:
    return model()


def settings_for(name: str, /, **values: Any) -> PolicySettings:
    """The settings policy ``name`` decides with, as a site file's ``[policy]`` would
    give them: the keys :class:`PolicySettings` names are the limits every policy obeys,
    the others (and ``params``) options validated by ``name``'s model
    (:func:`options_model`: its own joined with the built-ins'). Raises
    :class:`UnknownPolicy`, or pydantic's ``ValidationError`` naming a bad option."""
    shared = {k: values.pop(k) for k in SHARED_SETTINGS & values.keys()}
    options = options_model(name).model_validate(values, context={"policy": {"name": name}})
    return with_options(options, **shared)


def with_options(options: PluginOptions, /, **shared: Any) -> PolicySettings:
    """:class:`PolicySettings` of the limits ``shared`` and the validated ``options``,
    whose ``params`` table (if it has one) is also ``params``."""
    params = getattr(options, "params", None)
    return PolicySettings(**shared, params={} if params is None else params, options=options)


SHARED_SETTINGS = frozenset(f.name for f in fields(PolicySettings)) - {"params", "options"}
"""The names of the settings every policy obeys, beside its own options."""


def preboot_workers(policy: str, settings: PolicySettings) -> int:
    """Workers booted and joined before the first job is submitted, as policy ``policy``
    declares (the dedicated baseline's pool: paper 000 launched its 10 VMs and joined
    them first); 0 for a policy that declares none."""
    preboot = get(policy).preboot
    return 0 if preboot is None else preboot(settings)


_BOOTING = ("requested", "booting")
_JOINED = ("idle", "busy", "draining")


def preboot_done(workers: Mapping[str, int], target: int) -> bool:
    """Whether the workload may start, from a step's worker counts by state name (taken
    after the decision was carried out): ``target`` workers joined, or none booting any
    more (the pool is as large as the clouds allow)."""
    joined = sum(workers.get(s, 0) for s in _JOINED)
    return joined >= target or not any(workers.get(s, 0) for s in _BOOTING)


class Decide(Protocol):
    """A policy's decision function."""

    def __call__(self, snapshot: SiteSnapshot, settings: PolicySettings) -> Decision: ...


Policy = PolicyPlugin[Any]
"""A policy: its decision function, options model and capabilities."""


class UnknownPolicy(UnknownPlugin):
    """No policy registered or published under that name."""


def _load_builtins() -> None:
    # Imported for their register() side effect.
    from elasticsite.policies import (  # noqa: F401
        bursts,
        cloud_scheduler,
        core_demand,
        dedicated,
        on_demand,
        redirect,
        steady_stream,
    )


def _bare_function(loaded: Any) -> PolicyPlugin[Any] | None:
    """A policy published as a bare callable: no options of its own, no capabilities."""
    return PolicyPlugin(loaded) if callable(loaded) else None


registry: Registry[PolicyPlugin[Any]] = Registry(
    POLICY_GROUP,
    "policy",
    PolicyPlugin,
    builtins=_load_builtins,
    adapt=_bare_function,
    error=UnknownPolicy,
)
"""Policies, by the name ``[policy] name`` gives."""


def register(
    name: str,
    *,
    options: type[PluginOptions] = PluginOptions,
    redirects: bool = False,
    typed_nodes: bool = False,
    preboot: Callable[[PolicySettings], int] | None = None,
    owners: bool = False,
) -> Callable[[Decide], Decide]:
    """Decorator: make ``fn`` available as policy ``name``, with its options model and
    capabilities (see :class:`~elasticsite.plugins.PolicyPlugin`)."""

    def wrap(fn: Decide) -> Decide:
        registry.add(name, PolicyPlugin(fn, options, redirects, typed_nodes, preboot, owners))
        if options is not PluginOptions and options not in _BUILTIN_OPTIONS:
            _BUILTIN_OPTIONS.append(options)
        return fn

    return wrap


_BUILTIN_OPTIONS: list[type[PluginOptions]] = []
"""The options models of the policies registered in this process, in order."""


def options_model(name: str) -> type[PluginOptions]:
    """The model a site's ``[policy]`` options are validated by when it names policy
    ``name``: that policy's own model, joined with those of the built-in policies.

    A site file has always been able to set any built-in policy's thresholds whatever
    policy it names (a redirecting policy runs its ``provision`` policy with them), so
    each of those keys is still checked by the model of the policy it belongs to, and
    an instance of the result is an instance of the named policy's model.
    Raises :class:`UnknownPolicy`.
    """
    own = get(name).options
    others = sorted((m for m in _BUILTIN_OPTIONS if m is not own), key=_by_module)
    return _joined((own, *others))


def _by_module(model: type[PluginOptions]) -> tuple[str, str]:
    # The same order whichever module happened to register first: a joined model's
    # fields, and so the order its errors are told in, do not depend on imports.
    return model.__module__, model.__qualname__


@functools.cache
def _joined(models: tuple[type[PluginOptions], ...]) -> type[PluginOptions]:
    bases = tuple(m for m in models if m is not PluginOptions) or (PluginOptions,)
    if len(bases) == 1:
        return bases[0]
    return type(f"{bases[0].__name__}AndBuiltins", bases, {"__module__": __name__})


def available() -> list[str]:
    """Names of every built-in and installed policy."""
    return registry.names()


def get(name: str) -> PolicyPlugin[Any]:
    """The policy registered as ``name``, loading an installed plug-in on first use."""
    return registry.get(name)
