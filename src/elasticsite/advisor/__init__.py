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
from elasticsite.advisor.series import Series

__all__ = [
    "AdaptiveForecast",
    "Composite",
    "HistoryTooShort",
    "Overlap",
    "Phase",
    "Series",
    "bmbp_bound",
    "composite",
    "composite_many",
    "min_history",
    "order_index",
    "speculative",
    "transfer_bound",
    "z_for",
]
