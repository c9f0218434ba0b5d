"""The deadline advisor: how likely each configuration is to meet a deadline, and which to pick.

Pure parts (no clock, no files, no sockets): BMBP quantile bounds from history
(:mod:`.bmbp`), histories with change-point trimming (:mod:`.series`), job size classes
(:mod:`.sizes`), bandwidth forecasting for staging (:mod:`.forecast`), composite bounds
over the phases of a run (:mod:`.composite`) and ranking configurations (:mod:`.rank`).

History and its uses: the store of observations
(:mod:`elasticsite.history.observations`), readers of CSV, ``sacct --json`` and SWF
files (:mod:`.sources`), staging probes (:mod:`.probe`, not imported here: it needs an
HTTP client) and the evaluation harness (:mod:`.evaluate`).

The service: deadlines as people write them (:mod:`.deadline`), the site's configurations
ranked from its history and settings (:mod:`.service`), the manager's recorder of queue
waits and VM allocation delays (:mod:`elasticsite.history.recorder`) and the REST endpoint
(:mod:`.routes`, not imported here: it needs FastAPI).
"""

from __future__ import annotations

from elasticsite.advisor.bmbp import HistoryTooShort, bmbp_bound, min_history, order_index
from elasticsite.advisor.composite import (
    Composite,
    Overlap,
    Phase,
    composite,
    composite_many,
    speculative,
)
from elasticsite.advisor.deadline import DeadlineError, parse_deadline
from elasticsite.advisor.evaluate import Evaluation, evaluate
from elasticsite.advisor.forecast import AdaptiveForecast, transfer_bound, z_for
from elasticsite.advisor.rank import (
    LEAST_DISRUPTIVE,
    Configuration,
    Ranked,
    Speculation,
    independent,
    rank,
    speculative_choice,
    suggest,
)
from elasticsite.advisor.series import Series
from elasticsite.advisor.service import Advice, Advisor, NothingToRank
from elasticsite.advisor.sizes import SizeClasses
from elasticsite.advisor.sources import SourceError, read_history
from elasticsite.history.observations import HistoryStore, Observation, ProbeFailure

__all__ = [
    "LEAST_DISRUPTIVE",
    "AdaptiveForecast",
    "Advice",
    "Advisor",
    "Composite",
    "Configuration",
    "DeadlineError",
    "Evaluation",
    "HistoryStore",
    "HistoryTooShort",
    "NothingToRank",
    "Observation",
    "Overlap",
    "Phase",
    "ProbeFailure",
    "Ranked",
    "Series",
    "SizeClasses",
    "SourceError",
    "Speculation",
    "bmbp_bound",
    "composite",
    "composite_many",
    "evaluate",
    "independent",
    "min_history",
    "order_index",
    "parse_deadline",
    "rank",
    "read_history",
    "speculative",
    "speculative_choice",
    "suggest",
    "transfer_bound",
    "z_for",
]
