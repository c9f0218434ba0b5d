"""The core that carries decisions out, shared by the live manager and the simulator.

A step is: the driver senses (a batch snapshot, each cloud's instances) and collects
the outcomes of its finished commands; :func:`step` takes it from there, for both
drivers alike: :func:`observe` settles those outcomes and moves every worker from
what was sensed, giving the snapshot a policy decides on; a stopping site winds down,
any other asks the driver's policy; the driver allocates ids for the workers the
decision launches; :func:`apply` carries the decision out; the nodes that left and
that the broker has not recorded yet are sent again (:mod:`.departures`). It leaves a
:class:`Plan`: the transitions, records and state to persist, then the commands to
run. Nothing here reads a clock, opens a socket or touches a file.
"""

from elasticsite.core import plan
from elasticsite.core.actuate import apply, launches, shutdown_decision
from elasticsite.core.observe import observe, settle
from elasticsite.core.plan import *  # noqa: F403 (the names of plan.__all__)
from elasticsite.core.step import Decide, Ids, Sensed, by_tag, core_config, step

__all__ = [
    "Decide",
    "Ids",
    "Sensed",
    "apply",
    "by_tag",
    "core_config",
    "launches",
    "observe",
    "settle",
    "shutdown_decision",
    "step",
]
__all__ += plan.__all__
