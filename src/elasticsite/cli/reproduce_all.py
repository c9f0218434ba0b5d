"""``elasticsite reproduce all``: every paper in turn, one summary report.

Prints each paper's progress as it runs and its verdict counts as it ends, then the
summary table (the one the README quotes); writes ``report.md`` under ``--out`` with
that table and a section per paper, each paper's own report beside it. Exit status 2
when a paper could not run (the others still do), 0 otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text

from elasticsite.cli.common import console, fail, say
from elasticsite.cli.status import StatusLine

if TYPE_CHECKING:
    from elasticsite.reproduce.claims import Verdict

__all__ = ["reproduce_all", "verdict_line"]


def verdict_line(
    name: str, counts: Mapping[Verdict, int], seconds: float, report: Path | None, *, quick: bool
) -> str:
    """How one paper's reproduction ended: its verdict counts, run time and report."""
    return (
        f"{name}{' (quick)' if quick else ''}: "
        + ", ".join(f"{v.value}: {n}" for v, n in counts.items())
        + f", in {seconds:.1f} s; report: {report}"
    )


def reproduce_all(
    *, quick: bool, out: Path | None, workers: int | None, progress: bool | None
) -> None:
    """Run every registered paper under ``out`` (default ``reproduce-out/all[-quick]``)."""
    from elasticsite.reproduce.every import Outcome, papers, run_all, summary_table, write_summary

    target = out or Path("reproduce-out") / ("all-quick" if quick else "all")
    registry = papers()
    current = [""]
    console.print(
        Text(f"reproducing {len(registry)} papers: {', '.join(registry)}", style="dim"),
        highlight=False,
    )

    with StatusLine(progress) as line:
        line.ticking(lambda: f"{current[0]}: {line.elapsed:,.0f} s")

        def step(name: str, text: str) -> None:
            line.clear()
            say(Text(f"{name}: {text}", style="dim"))
            current[0] = f"{name}: {text.split(':')[0]}"

        def done(o: Outcome) -> None:
            line.clear()
            if o.repro is None:
                console.print(
                    Text(f"{o.name}: failed after {o.seconds:,.0f} s: {o.error}", style="red"),
                    highlight=False,
                )
                return
            say(verdict_line(o.name, o.counts(), o.seconds, o.report, quick=quick))

        outcomes = run_all(registry, target, quick=quick, workers=workers, progress=step, done=done)
    report = write_summary(outcomes, target, quick=quick)
    console.print("")
    say(summary_table(outcomes))
    console.print("")
    say(
        f"all{' (quick)' if quick else ''}: {len(outcomes)} papers in "
        f"{sum(o.seconds for o in outcomes):,.1f} s; report: {report}"
    )
    failed = [o.name for o in outcomes if o.repro is None]
    if failed:
        raise fail(f"{', '.join(failed)} could not run (see above); report: {report}")
