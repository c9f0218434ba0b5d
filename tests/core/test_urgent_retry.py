"""A launch made for an urgent job keeps its urgency when it is retried."""

from __future__ import annotations

from elasticsite import core
from elasticsite.core.plan import AddAndLaunch
from elasticsite.model import Cause, CloudSpec, Decision, Launch, VMType

CLOUD = CloudSpec("lab", max_instances=4, vm_types=(VMType("small"),))
CONFIG = core.CoreConfig("site", (CLOUD,))


def test_a_throttled_urgent_launch_is_retried_as_urgent() -> None:
    state = core.CoreState()
    plan = core.Plan()
    decision = Decision(launch=[Launch("lab", "small", 1, Cause.URGENT, (), "red")])
    core.apply(state, plan, CONFIG, 0.0, decision, {"lab": ["lab-1"]})
    (first,) = plan.commands
    assert isinstance(first, AddAndLaunch) and first.urgency == "red"
    core.settle(state, core.Plan(), CONFIG, 1.0,
                [core.Outcome(first, 1.0, error="slow down", error_kind="throttled")])  # fmt: skip
    later = core.Plan()
    core.observe(state, later, CONFIG, 1e6, [], {}, {"lab": {}}, [])
    retries = [c for c in later.commands if isinstance(c, AddAndLaunch)]
    assert [(c.worker_id, c.urgency) for c in retries] == [("lab-1", "red")]
