"""Every paper at once: the registry of reproductions, one run of each, one report.

:func:`papers` finds the reproductions this package holds: each module ``paperNNN``
whose ``reproduce_paperNNN`` function runs that paper, so a paper added as such a
module is part of every later run without another edit. :func:`run_all` runs each
in turn (a paper that fails is recorded, and the others still run), writes each
paper's own report under its name and :func:`write_summary` one report over all of
them: a summary table (claims, how many hold, do not hold or cannot be checked, the
run time) and a section per paper with its claims beside the paper's words and its
plots side by side.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from elasticsite.reproduce.claims import Reproduction, Verdict, write_report

__all__ = ["Outcome", "Runner", "papers", "run_all", "summary_table", "write_summary"]

Runner = Callable[..., Reproduction]
"""``run(out, *, quick=..., progress=..., [workers=...])``: one paper's reproduction."""

_MODULE = re.compile(r"paper\d{3}")


def papers() -> dict[str, Runner]:
    """Every paper reproduced here, by name (``paper000``, ...), in order."""
    package = importlib.import_module("elasticsite.reproduce")
    found: dict[str, Runner] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if not _MODULE.fullmatch(info.name):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        run = getattr(module, f"reproduce_{info.name}", None)
        if callable(run):
            found[info.name] = run
    return dict(sorted(found.items()))


@dataclass(frozen=True, slots=True)
class Outcome:
    """One paper's run under :func:`run_all`: its reproduction, or the error that
    stopped it; its wall-clock time and its report."""

    name: str
    seconds: float
    repro: Reproduction | None = None
    report: Path | None = None
    error: str = ""

    def counts(self) -> dict[Verdict, int]:
        """How many of its claims got each verdict (none when it failed)."""
        return self.repro.verdicts() if self.repro else dict.fromkeys(Verdict, 0)


def _call(run: Runner, out: Path, quick: bool, workers: int | None,
          say: Callable[[str], None]) -> Reproduction:  # fmt: skip
    kwargs: dict[str, object] = {"quick": quick, "progress": say}
    if workers is not None and "workers" in inspect.signature(run).parameters:
        kwargs["workers"] = workers
    return run(out, **kwargs)


def run_all(
    registry: Mapping[str, Runner],
    out: Path,
    *,
    quick: bool = False,
    workers: int | None = None,
    progress: Callable[[str, str], None] | None = None,
    done: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Run every paper of ``registry`` in turn, each under ``out/NAME``, and write its
    report there; ``progress(name, line)`` as each says what it runs, ``done(outcome)``
    as each ends. A paper that raises is recorded with its error and the rest run."""
    outcomes = []
    for name, run in registry.items():
        target = out / name
        started = time.perf_counter()

        def say(line: str, name: str = name) -> None:
            if progress is not None:
                progress(name, line)

        try:
            repro = _call(run, target, quick, workers, say)
            report = write_report(repro, target)
            outcome = Outcome(name, time.perf_counter() - started, repro, report)
        except Exception as exc:  # one paper's failure must not lose the others' runs
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            outcome = Outcome(name, time.perf_counter() - started, error=message)
        outcomes.append(outcome)
        if done is not None:
            done(outcome)
    return outcomes


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary_table(outcomes: list[Outcome], *, links: bool = False) -> str:
    """The summary as a Markdown table: per paper its claims, how many hold, do not
    hold, cannot be checked, and its run time; ``links`` to each paper's report."""
    lines = [
        "| paper | claims | hold | do not hold | cannot be checked | run time |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    total = dict.fromkeys(Verdict, 0)
    for o in outcomes:
        name = f"[{o.name}]({o.name}/report.md)" if links and o.report else o.name
        if o.repro is None:
            lines.append(f"| {name} | failed: {_cell(o.error)} | - | - | - | {o.seconds:,.0f} s |")
            continue
        counts = o.counts()
        for v in Verdict:
            total[v] += counts[v]
        lines.append(
            f"| {name} | {len(o.repro.claims)} | {counts[Verdict.HOLDS]} "
            f"| {counts[Verdict.FAILS]} | {counts[Verdict.UNCHECKED]} | {o.seconds:,.0f} s |"
        )
    lines.append(
        f"| **all** | {sum(total.values())} | {total[Verdict.HOLDS]} | {total[Verdict.FAILS]} "
        f"| {total[Verdict.UNCHECKED]} | {sum(o.seconds for o in outcomes):,.0f} s |"
    )
    return "\n".join(lines)


def _section(o: Outcome, out: Path) -> list[str]:
    if o.repro is None:
        return [f"## {o.name}", "", f"Failed after {o.seconds:,.0f} s: {o.error}"]
    repro = o.repro
    counts = o.counts()
    lines = [
        f"## {repro.title}",
        "",
        f"{len(repro.claims)} claims: {counts[Verdict.HOLDS]} hold, {counts[Verdict.FAILS]} "
        f"do not hold, {counts[Verdict.UNCHECKED]} cannot be checked, in {o.seconds:,.0f} s. "
        f"Its report, with the notes on each verdict and its tables: "
        f"[{o.name}/report.md]({o.name}/report.md).",
        "",
        "| claim | source | the paper | measured here | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| `{c.key}` | {_cell(c.source)} | {_cell(c.text)} | {_cell(c.measured)} "
        f"| **{c.verdict.value}** |"
        for c in repro.claims
    ]
    shown = [p for p in repro.plots if p.exists()]
    if shown:
        cells = []
        for p in shown:
            rel = p.relative_to(out) if p.is_relative_to(out) else p
            alt = rel.with_suffix("").as_posix()
            cells.append(f'<img src="{rel.as_posix()}" alt="{alt}" width="320">')
        lines += ["", " ".join(cells)]
    return lines


def write_summary(outcomes: list[Outcome], out: Path, *, quick: bool) -> Path:
    """Write ``out/report.md``: the summary table, then one section per paper."""
    lines = [
        "# Reproducing the seed papers",
        "",
        f"{'Quick variant (fewer rounds, shorter workloads). ' if quick else ''}"
        f"{len(outcomes)} papers, run one after the other in "
        f"{sum(o.seconds for o in outcomes):,.0f} s.",
        "",
        summary_table(outcomes, links=True),
    ]
    for o in outcomes:
        lines += ["", *_section(o, out)]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.md"
    path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return path
