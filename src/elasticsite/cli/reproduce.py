"""``elasticsite reproduce paper000|paper001|paper002|paper003|paper004``: run a paper's
experiments, check its claims.

Writes ``report.md`` (each published claim beside the measured result, marked *holds*,
*does not hold* or *cannot be checked*, with the tables and plots) under ``--out`` and
prints one verdict line per claim. Exit status 0 whatever the verdicts (they are the
result), 2 for an error. ``all`` runs every paper and writes one summary report
(:mod:`elasticsite.cli.reproduce_all`).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from elasticsite.cli.common import PositiveFloat, PositiveInt, console, fail
from elasticsite.cli.reproduce_all import reproduce_all, verdict_line
from elasticsite.cli.status import ProgressOpt, StatusLine

__all__ = ["reproduce"]


class Paper(StrEnum):
    paper000 = "paper000"
    paper001 = "paper001"
    paper002 = "paper002"
    paper003 = "paper003"
    paper004 = "paper004"
    all = "all"


_STYLE = {"holds": "green", "does not hold": "red", "cannot be checked": "yellow"}


def reproduce(
    paper: Annotated[
        Paper,
        typer.Argument(
            help="paper000 (Figures 7-12), paper001 (Figures 3-6), paper002, paper003 or paper004."
        ),
    ],
    quick: Annotated[
        bool, typer.Option("--quick", help="Fewer rounds and shorter workloads: under a minute.")
    ] = False,
    trace: Annotated[
        Path | None,
        typer.Option(
            help="paper002: replay this SWF trace (e.g. SDSC-BLUE-2000-4.2-cln.swf.gz) for "
            "Figures 4, 5 and Table 1, in two-month rounds; paper004: take the queue waits "
            "from it (default: the shipped RICC excerpt).",
            show_default=False,
        ),
    ] = None,
    procs_per_unit: Annotated[
        PositiveInt, typer.Option(help="paper002 --trace: CPUs per node (Blue Horizon: 8).")
    ] = 8,
    period: Annotated[
        PositiveFloat | None,
        typer.Option(
            help="paper001: Figure 4's polling period in seconds, 0.1-120. Default: the "
            "paper's 120 (2 with --quick).",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Output directory. Default: reproduce-out/PAPER.")
    ] = None,
    workers: Annotated[
        PositiveInt | None, typer.Option(help="Worker processes. Default: CPU count.")
    ] = None,
    slurm: Annotated[
        bool,
        typer.Option(
            "--slurm",
            help="paper004: also measure Table 3.8's order on the Slurm running here (submits "
            "and cancels its own short jobs).",
        ),
    ] = False,
    progress: ProgressOpt = None,
) -> None:
    """Run a paper's experiments on the simulator (paper001's Figure 4 on a real broker
    on 127.0.0.1) and check each published claim."""
    if paper is Paper.all:
        if trace is not None or period is not None or slurm:
            raise fail("--trace, --period and --slurm apply to one paper, not to all")
        return reproduce_all(quick=quick, out=out, workers=workers, progress=progress)
    misplaced = _misplaced(paper, trace, period)
    if misplaced:  # said before the papers' modules (scipy among them) load
        raise fail(misplaced)
    from elasticsite.reproduce import (
        reproduce_paper000,
        reproduce_paper001,
        reproduce_paper002,
        reproduce_paper003,
        reproduce_paper004,
        write_report,
    )
    from elasticsite.sim.elastic import RunStatus, SimulationExploded
    from elasticsite.sim.specs import SpecError

    target = out or Path("reproduce-out") / (paper.value + ("-quick" if quick else ""))
    part = [""]

    def say(text: str) -> None:
        line.clear()
        console.print(Text(text, style="dim"))
        part[0] = text.split(":")[0]

    def status(s: RunStatus) -> None:
        line.update(f"{part[0]}: {s.line()}")

    with StatusLine(progress) as line:
        try:
            if paper is Paper.paper000:
                repro = reproduce_paper000(target, quick=quick, progress=say, status=status)
            elif paper is Paper.paper001:
                if workers != 1:  # runs in worker processes send no status: the time
                    line.ticking(lambda: f"{part[0]}: {line.elapsed:,.0f} s")
                repro = reproduce_paper001(
                    target, quick=quick, period=period, workers=workers, progress=say,
                    status=status,
                )  # fmt: skip
            elif paper is Paper.paper003:
                repro = reproduce_paper003(target, quick=quick, progress=say)
            elif paper is Paper.paper004:
                line.ticking(lambda: f"{part[0]}: {line.elapsed:,.0f} s")
                repro = reproduce_paper004(
                    target, quick=quick, trace=trace, slurm=slurm, workers=workers,
                    progress=say,
                )  # fmt: skip
            else:
                line.ticking(lambda: f"{part[0]}: {line.elapsed:,.0f} s")
                repro = reproduce_paper002(
                    target, quick=quick, trace=trace, procs_per_unit=procs_per_unit,
                    workers=workers, progress=say,
                )  # fmt: skip
        except (SpecError, ValueError, OSError, SimulationExploded) as exc:
            line.clear()
            hint = ""
            if trace is not None and "cannot run" in str(exc):
                hint = " (a job wider than the 144-node site: check --procs-per-unit)"
            raise fail(f"{exc}{hint}") from None
    report = write_report(repro, target)
    for claim in repro.claims:
        style = _STYLE.get(claim.verdict.value, "")
        console.print(
            Text.assemble((f"{claim.verdict.value:>17}", style), f"  {claim.key}: ")
            + claim.measured,
            highlight=False,
        )
    console.print(
        verdict_line(paper.value, repro.verdicts(), repro.seconds, report, quick=quick),
        highlight=False,
    )


def _misplaced(paper: Paper, trace: Path | None, period: float | None) -> str | None:
    """What is wrong with the options given for ``paper``, if anything."""
    if period is not None and paper is not Paper.paper001:
        return "--period applies to paper001 only"
    if trace is not None and paper in (Paper.paper000, Paper.paper001):
        return "--trace applies to paper002 only"
    if trace is not None and paper is Paper.paper003:
        return "--trace applies to paper002 and paper004 only"
    if trace is not None and not trace.is_file():
        return f"{trace}: no such trace file"
    return None
