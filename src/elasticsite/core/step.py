"""One step, as every driver takes it: what was sensed in, a snapshot and a plan out.

:func:`step` is the whole of a step's decision, shared by the live manager and the
simulator: :func:`~.observe.observe` settles the finished commands and moves every
worker from what was sensed; a stopping site decides to wind down
(:func:`~.actuate.shutdown_decision`), any other asks the driver's ``decide`` (its
policy); the driver allocates ids for the workers the decision launches (``ids``), and
:func:`~.actuate.apply` carries the decision out; the departures the broker could not
take yet are sent again (:func:`~.departures.resend`). The driver senses before (its batch
system, its clouds, listed by worker tag with :func:`by_tag`) and carries the plan out
after (persist, then run the commands). :func:`core_config` builds the core's settings
from the policy's declared capabilities, as both drivers must.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elasticsite.batch.base import Node
from elasticsite.clouds.base import WORKER_TAG, Instance
from elasticsite.core import departures
from elasticsite.core.actuate import apply, launches, shutdown_decision
from elasticsite.core.observe import observe
from elasticsite.core.plan import CoreConfig, CoreState, Outcome, Plan
from elasticsite.model import CloudSpec, Decision, Job
from elasticsite.snapshot import SiteSnapshot

__all__ = ["Decide", "Ids", "Sensed", "by_tag", "core_config", "step"]

Decide = Callable[[SiteSnapshot], Decision]
"""The driver's policy: a decision on the snapshot (called unless the site is stopping)."""
Ids = Callable[[Mapping[str, int]], Mapping[str, Sequence[str]]]
"""Fresh worker ids: given how many workers launch on each cloud, that many per cloud."""


@dataclass(slots=True)
class Sensed:
    """What a driver gathered for one step, at ``now``: the outcomes of the commands
    that finished, the batch system's nodes (by name) and jobs, and each sensed cloud's
    instances by worker id (:func:`by_tag`; a cloud left out could not be asked).
    ``listed``: when a cloud's listing was asked for, if before ``now``."""

    now: float
    outcomes: Sequence[Outcome]
    nodes: Mapping[str, Node]
    instances: Mapping[str, Mapping[str, Instance]]
    queued: Sequence[Job] = ()
    running: Sequence[Job] = ()
    listed: Mapping[str, float] = field(default_factory=dict)


def by_tag(found: Iterable[Instance]) -> dict[str, Instance]:
    """A cloud's instances by the worker id they are tagged with (their name if none)."""
    return {i.tags.get(WORKER_TAG) or i.name: i for i in found}


def core_config(
    policy: object, *, site_id: str, clouds: Sequence[CloudSpec], **settings: Any
) -> CoreConfig:
    """The core's settings for a site run by ``policy``: what the policy declares it
    needs (``typed_nodes``: each node serves only its VM type) and the driver's
    ``settings`` (the other :class:`CoreConfig` fields)."""
    typed = bool(getattr(policy, "typed_nodes", False))
    return CoreConfig(site_id=site_id, clouds=tuple(clouds), typed_nodes=typed, **settings)


def step(
    state: CoreState,
    config: CoreConfig,
    sensed: Sensed,
    decide: Decide,
    ids: Ids,
    plan: Plan | None = None,
) -> tuple[SiteSnapshot, Plan]:
    """One step: observe what was ``sensed``, decide (wind down if the site is
    stopping, else ``decide``), allocate the launches' ids with ``ids``, apply the
    decision and send pending departures again. Returns the snapshot decided on and
    the plan (into ``plan`` if given, which may hold what the driver did earlier in the
    step); the decision is :attr:`Plan.decision`."""
    plan = Plan() if plan is None else plan
    now = sensed.now
    snapshot = observe(
        state,
        plan,
        config,
        now,
        sensed.outcomes,
        sensed.nodes,
        sensed.instances,
        sensed.queued,
        sensed.running,
        sensed.listed,
    )
    if state.shutting_down:
        decision = shutdown_decision(snapshot, immediate=state.shutdown_now)
    else:
        decision = decide(snapshot)
    wanted = launches(decision)
    apply(state, plan, config, now, decision, ids(wanted) if wanted else {})
    departures.resend(state, plan)
    plan.decision = decision
    return snapshot, plan
