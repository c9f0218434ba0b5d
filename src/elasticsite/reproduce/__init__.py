"""Reproducing the seed papers: their experiments run here, each published claim checked.

:func:`reproduce_paper000` (elastic site policies, Figures 7-12) and
:func:`reproduce_paper002` (cloud-bursting strategy sets, Figures 3-5 and Table 1) run
on the simulator and return a :class:`Reproduction`: every claim of the paper's text
beside what was measured, with a :class:`Verdict`. :func:`write_report` renders it as
Markdown with the plots. ``elasticsite reproduce`` is the command line.
"""

from __future__ import annotations

from elasticsite.reproduce.claims import Claim, Reproduction, Verdict, write_report
from elasticsite.reproduce.paper000 import PAPER000_CLAIMS, reproduce_paper000
from elasticsite.reproduce.paper002 import PAPER002_CLAIMS, reproduce_paper002

__all__ = [
    "PAPER000_CLAIMS",
    "PAPER002_CLAIMS",
    "Claim",
    "Reproduction",
    "Verdict",
    "reproduce_paper000",
    "reproduce_paper002",
    "write_report",
]
