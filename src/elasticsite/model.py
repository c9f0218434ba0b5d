"""The data every part of elasticsite shares: jobs, workers, clouds, decisions.

Nothing here reads the clock, opens a socket or touches a file: time always comes in
as an argument, so the live manager and the simulator drive the same objects.

One name to import them all from; each lives in the module of its concern:
:mod:`elasticsite.jobs` (a batch job and its states), :mod:`elasticsite.worker` (a
cloud worker and its state machine), :mod:`elasticsite.cloudspec` (what a cloud
offers and bills) and :mod:`elasticsite.decision` (what a policy asks to be done).
"""

from __future__ import annotations

from elasticsite.cloudspec import CloudSpec, VMType, WasteEstimate, billed_cost
from elasticsite.decision import (
    Assign,
    Decision,
    Drain,
    Launch,
    Redirect,
    Refusal,
    Terminate,
    Undrain,
)
from elasticsite.jobs import Job, JobState, outcome, signal_name, state_text
from elasticsite.worker import ALLOWED_TRANSITIONS as ALLOWED_TRANSITIONS
from elasticsite.worker import (
    Cause,
    InvalidTransition,
    Transition,
    Worker,
    WorkerState,
)
from elasticsite.worker import count_by_cloud as count_by_cloud

__all__ = [
    "Assign",
    "Cause",
    "CloudSpec",
    "Decision",
    "Drain",
    "InvalidTransition",
    "Job",
    "JobState",
    "Launch",
    "Redirect",
    "Refusal",
    "Terminate",
    "Transition",
    "Undrain",
    "VMType",
    "WasteEstimate",
    "Worker",
    "WorkerState",
    "billed_cost",
    "outcome",
    "signal_name",
    "state_text",
]
