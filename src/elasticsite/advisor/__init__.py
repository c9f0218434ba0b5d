"""The deadline advisor: how likely each configuration is to meet a deadline, and which to pick.

Pure parts (no clock, no files, no sockets): BMBP quantile bounds from history
(:mod:`.bmbp`), histories with change-point trimming (:mod:`.series`), job size classes
(:mod:`.sizes`), bandwidth forecasting for staging (:mod:`.forecast`), composite bounds
over the phases of a run (:mod:`.composite`) and ranking configurations (:mod:`.rank`).
"""

from __future__ import annotations

from elasticsite.advisor.bmbp import HistoryTooShort, bmbp_bound, min_history, order_index
from elasticsite.advisor.series import Series

__all__ = [
    "HistoryTooShort",
    "Series",
    "bmbp_bound",
    "min_history",
    "order_index",
]
