"""The deadline advisor: how likely each configuration is to meet a deadline, and which to pick.

Pure parts (no clock, no files, no sockets): BMBP quantile bounds from history
(:mod:`.bmbp`), histories with change-point trimming (:mod:`.series`), job size classes
(:mod:`.sizes`), bandwidth forecasting for staging (:mod:`.forecast`), composite bounds
over the phases of a run (:mod:`.composite`) and ranking configurations (:mod:`.rank`).
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
from elasticsite.advisor.sizes import SizeClasses

__all__ = [
    "LEAST_DISRUPTIVE",
    "AdaptiveForecast",
    "Composite",
    "Configuration",
    "HistoryTooShort",
    "Overlap",
    "Phase",
    "Ranked",
    "Series",
    "SizeClasses",
    "Speculation",
    "bmbp_bound",
    "composite",
    "composite_many",
    "independent",
    "min_history",
    "order_index",
    "rank",
    "speculative",
    "speculative_choice",
    "suggest",
    "transfer_bound",
    "z_for",
]
