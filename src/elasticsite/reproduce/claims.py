"""Published claims set beside measured results, and the report that lists them.

A :class:`Claim` is one sentence a paper's text asserts, what elasticsite measured
for it, and a :class:`Verdict`: it *holds*, it *does not hold*, or it *cannot be
checked* (with why). A :class:`Reproduction` is one paper's claims, the plots and
tables they came from, and how long the runs took; :func:`write_report` renders it
as Markdown next to its plots.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Claim", "Reproduction", "Verdict", "check", "markdown_table", "write_report"]


class Verdict(enum.StrEnum):
    """What became of a claim."""

    HOLDS = "holds"
    FAILS = "does not hold"
    UNCHECKED = "cannot be checked"


@dataclass(frozen=True, slots=True)
class Claim:
    """One published claim: where it is, what it says, what was measured, the verdict.

    ``key`` is stable (tests and scripts refer to it); ``note`` explains a verdict
    that needs it (why a claim does not hold here, or cannot be checked).
    """

    key: str
    source: str
    text: str
    verdict: Verdict
    measured: str
    note: str = ""

    def line(self) -> str:
        """One line for a terminal: verdict, key, what was measured."""
        return f"{self.verdict.value:>17}  {self.key}: {self.measured}"


def check(
    key: str, source: str, text: str, ok: bool | None, measured: str, note: str = ""
) -> Claim:
    """A claim whose verdict is ``ok`` (None: it cannot be checked; say why in ``note``)."""
    if ok is None and not note:
        raise ValueError(f"{key}: a claim that cannot be checked needs a note saying why")
    verdict = Verdict.UNCHECKED if ok is None else Verdict.HOLDS if ok else Verdict.FAILS
    return Claim(key, source, text, verdict, measured, note)


@dataclass(slots=True)
class Reproduction:
    """One paper's reproduction: its claims, plots, tables and set-up, and its run time."""

    paper: str
    title: str
    quick: bool
    setup: list[str] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def verdicts(self) -> dict[Verdict, int]:
        """How many claims got each verdict."""
        return {v: sum(c.verdict is v for c in self.claims) for v in Verdict}

    def claim(self, key: str) -> Claim:
        """The claim called ``key`` (KeyError if none is)."""
        for c in self.claims:
            if c.key == key:
                return c
        raise KeyError(key)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_report(repro: Reproduction, out: Path) -> Path:
    """Write ``out/report.md``: the verdicts, each claim beside its measurement, the
    set-up, the tables and the plots (linked relative to the report)."""
    counts = repro.verdicts()
    lines = [
        f"# Reproducing {repro.title}",
        "",
        f"{'Quick variant (fewer rounds, shorter workloads). ' if repro.quick else ''}"
        f"{len(repro.claims)} claims: {counts[Verdict.HOLDS]} hold, "
        f"{counts[Verdict.FAILS]} do not hold, {counts[Verdict.UNCHECKED]} cannot be "
        f"checked. Runs took {repro.seconds:.1f} s.",
        "",
        "| claim | source | published | measured | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in repro.claims:
        lines.append(
            f"| `{c.key}` | {_cell(c.source)} | {_cell(c.text)} | {_cell(c.measured)} "
            f"| **{c.verdict.value}** |"
        )
    notes = [c for c in repro.claims if c.note]
    if notes:
        lines += ["", "## Notes on the verdicts", ""]
        lines += [f"- `{c.key}` ({c.verdict.value}): {c.note}" for c in notes]
    if repro.setup:
        lines += ["", "## Set-up", ""]
        lines += [f"- {s}" for s in repro.setup]
    for table in repro.tables:
        lines += ["", table]
    if repro.plots:
        lines += ["", "## Plots", ""]
        for p in repro.plots:
            rel = p.relative_to(out) if p.is_relative_to(out) else p
            lines += [f"![{p.stem}]({rel.as_posix()})", ""]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.md"
    path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return path


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], title: str) -> str:
    """A titled Markdown table."""
    out = [f"## {title}", "", "| " + " | ".join(header) + " |"]
    out.append("|" + " --- |" * len(header))
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)
