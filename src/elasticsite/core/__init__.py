"""The core that carries decisions out, shared by the live manager and the simulator.

A step is: the driver senses (a batch snapshot, each cloud's instances) and collects
the outcomes of its finished commands; :func:`observe` settles those outcomes and
moves every worker from what was sensed, giving the snapshot a policy decides on;
the driver allocates ids for the workers the decision launches; :func:`apply`
carries the decision out. Both leave a :class:`Plan`: the transitions and records
to persist, then the commands to run. Nothing here reads a clock, opens a socket
or touches a file.
"""

from elasticsite.core.actuate import apply, launches, shutdown_decision
from elasticsite.core.observe import observe, settle
from elasticsite.core.plan import (
    AddAndLaunch,
    Command,
    CoreConfig,
    CoreState,
    DrainNode,
    ForgetNode,
    HoldJob,
    Outcome,
    OwnNode,
    Plan,
    Problem,
    RedirectJob,
    ReleaseJob,
    RemoveNode,
    TerminateInstance,
    UndrainNode,
    WorkerRecord,
    command_key,
    worker_id,
    worker_number,
)

__all__ = [
    "AddAndLaunch",
    "Command",
    "CoreConfig",
    "CoreState",
    "DrainNode",
    "ForgetNode",
    "HoldJob",
    "Outcome",
    "OwnNode",
    "Plan",
    "Problem",
    "RedirectJob",
    "ReleaseJob",
    "RemoveNode",
    "TerminateInstance",
    "UndrainNode",
    "WorkerRecord",
    "apply",
    "command_key",
    "launches",
    "observe",
    "settle",
    "shutdown_decision",
    "worker_id",
    "worker_number",
]
