"""Reproducing the seed papers: their experiments run here, each published claim checked.

:func:`reproduce_paper000` (elastic site policies, Figures 7-12),
:func:`reproduce_paper001` (an elastic Torque site and its recontextualization broker,
Figures 3-6) and
:func:`reproduce_paper002` (cloud-bursting strategy sets, Figures 3-5 and Table 1) run
on the simulator (paper 001's Figure 4 on the real broker on 127.0.0.1);
:func:`reproduce_paper003` (Cloud Scheduler: VM types, fair shares, errors) on the
simulator and its restart on the live manager over the embedded site;
:func:`reproduce_paper004` (SPRUCE: the advisor's bounds, the batch and cloud
policies) on the advisor, the embedded batch system and the simulator. Each returns a
:class:`Reproduction`: every claim of the paper's text beside what was measured, with a
:class:`Verdict`. :func:`write_report` renders it as Markdown with the plots.
``elasticsite reproduce`` is the command line.
"""

from __future__ import annotations

from elasticsite.reproduce.claims import Claim, Reproduction, Verdict, write_report
from elasticsite.reproduce.paper000 import PAPER000_CLAIMS, reproduce_paper000
from elasticsite.reproduce.paper001 import PAPER001_CLAIMS, reproduce_paper001
from elasticsite.reproduce.paper002 import PAPER002_CLAIMS, reproduce_paper002
from elasticsite.reproduce.paper003 import PAPER003_CLAIMS, reproduce_paper003
from elasticsite.reproduce.paper004 import PAPER004_CLAIMS, reproduce_paper004

__all__ = [
    "PAPER000_CLAIMS",
    "PAPER001_CLAIMS",
    "PAPER002_CLAIMS",
    "PAPER003_CLAIMS",
    "PAPER004_CLAIMS",
    "Claim",
    "Reproduction",
    "Verdict",
    "reproduce_paper000",
    "reproduce_paper001",
    "reproduce_paper002",
    "reproduce_paper003",
    "reproduce_paper004",
    "write_report",
]
