#!/usr/bin/env python3
"""Run the documented commands and benchmarks, and write their figures into the docs.

A figure in README.md or docs/*.md is marked where it stands::

    takes <!-- fig:sim-w1-elapsed -->186.9 s<!-- /fig --> simulated

and this script rewrites the text between the markers with what a fresh run gives;
the plots the docs show are copied from the same runs. ``docs/benchmarks.md`` gets the
benchmarks' table between ``<!-- benchmarks:begin -->`` and ``<!-- benchmarks:end -->``,
and every run's date and machine go into ``docs/figures.json``.

    .venv/bin/python scripts/docs-figures.py                 # every run but the benchmarks
    .venv/bin/python scripts/docs-figures.py sim-w1 paper000  # only these runs
    .venv/bin/python scripts/docs-figures.py --benchmarks     # the benchmarks too (long)
    .venv/bin/python scripts/docs-figures.py --benchmarks --benchmark advisor  # one of them
    .venv/bin/python scripts/docs-figures.py --check sim-w1   # compare, write nothing

``--check`` exits 1 when a figure of a *cheap* run (one whose result does not depend
on the machine: simulated time, counts) is off by more than its tolerance;
tests/docs/test_figures.py runs it so. Wall-clock figures are not checked, only shown
with the date and machine they were measured on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RECORD = ROOT / "docs" / "figures.json"
BENCHMARKS_MD = ROOT / "docs" / "benchmarks.md"
MEASURED_ON = "measured-on"  # the figure that says when and where the last runs were
FIGURE = re.compile(r"<!-- fig:([a-z0-9-]+) -->(.*?)<!-- /fig -->", re.S)
TABLE = re.compile(r"(<!-- benchmarks:begin -->\n)(.*?)(<!-- benchmarks:end -->)", re.S)


def _number(pattern: str) -> Callable[[str], float]:
    def get(out: str) -> float:
        m = re.search(pattern, out)
        if m is None:
            raise ValueError(f"no match for {pattern!r}")
        return float(m[1].replace(",", ""))

    return get


def _holds(out: str) -> str:
    m = re.search(r"holds: (\d+), does not hold: (\d+), cannot be checked: (\d+)", out)
    if m is None:
        raise ValueError("no verdict line")
    return f"{m[1]} of {int(m[1]) + int(m[2]) + int(m[3])}"


@dataclass(frozen=True)
class Run:
    """One command, the figures read from its output, and the plots it makes."""

    name: str
    argv: list[str]
    figures: dict[str, Callable[[str], str]]
    cheap: bool = False  # its figures do not depend on the machine: CI checks them
    tolerance: float = 0.02  # relative, for the numeric figures of a cheap run
    wall: str | None = None  # the figure that is its wall-clock time
    images: dict[str, str] = field(default_factory=dict)  # glob in its dir -> docs/ name


def _summary(out: str) -> str:
    """The summary table ``reproduce all`` prints, set apart by blank lines."""
    m = re.search(r"^\| paper \| claims .*?^\| \*\*all\*\* .*?$", out, re.S | re.M)
    if m is None:
        raise ValueError("no summary table")
    return "\n\n" + m[0] + "\n\n"


def _s(get: Callable[[str], float], digits: int = 0) -> Callable[[str], str]:
    return lambda out: f"{get(out):,.{digits}f} s"


def _n(get: Callable[[str], float]) -> Callable[[str], str]:
    return lambda out: f"{get(out):,.0f}"


RUNS = [
    Run(
        "sim-w1",
        ["simulate", "--workload", "workload1", "--policy", "bursts", "--boot", "50:70"],
        {"sim-w1-elapsed": _s(_number(r"elapsed workload time\s*│\s*([\d,.]+)"), 1)},
        cheap=True,
    ),
    Run(
        "sim-scal",
        [
            "simulate",
            "--workload",
            "scalability",
            "--cloud-limit",
            "1000",
            "--boot",
            "74:205",
            "--shutdown",
            "4",
        ],
        {},
        wall="sim-scal-wall",
    ),
    Run(
        "sim-lublin",
        ["simulate", "--workload", "lublin", "--jobs", "5000", "--cores-per-vm", "128"],
        {},
        wall="sim-lublin-wall",
    ),
    Run(
        "fig3-umed",
        ["experiment", "experiments/fig3-umed.toml", "--out", "out/fig3-umed"],
        {},
        images={
            "out/fig3-umed/*utilisation*.png": "fig3-umed-utilisation.png",
            "out/fig3-umed/*performance*cost*.png": "fig3-umed-performance-cost.png",
        },
    ),
    Run(
        "demo",
        ["demo"],
        {
            "demo-elapsed": _s(_number(r"elapsed workload time\s*│\s*([\d,.]+)")),
            "demo-workers": _n(_number(r"peak workers\s*│\s*([\d,]+)")),
        },
        wall="demo-wall",
        images={"demo-out/workload1-bursts.png": "workload1-bursts.png"},
    ),
    Run(
        "paper000",
        ["reproduce", "paper000"],
        {
            "paper000-holds": _holds,
            "paper000-ec2-peak": _n(_number(r"peak (\d+) VMs up")),
        },
        wall="paper000-wall",
        images={"reproduce-out/paper000/reactivity3-bursts.png": "reproduce-fig11-bursts.png"},
    ),
    Run(
        "paper002-quick",
        ["reproduce", "paper002", "--quick"],
        {"paper002-quick-holds": _holds},
        wall="paper002-quick-wall",
    ),
    Run(
        "all-quick",
        ["reproduce", "all", "--quick"],
        {"all-quick-table": _summary},
        wall="all-quick-wall",
    ),
    Run(
        "paper002",
        ["reproduce", "paper002"],
        {"paper002-holds": _holds},
        wall="paper002-wall",
        images={
            "reproduce-out/paper002/fig4-deadlines/money-sf1.3.png": (
                "reproduce-fig4-money-sf1.3.png"
            ),
            "reproduce-out/paper002/fig5-rejections/rejected-sf0.9.png": (
                "reproduce-fig5-rejected-sf0.9.png"
            ),
        },
    ),
]

BENCHMARKS = [
    ("decision_loop.py", "one manager iteration, up to 100,000 jobs / 10,000 workers"),
    ("sim_speed.py", "the simulator against AccaSim on one trace"),
    ("swf_parse.py", "SWF parsing, bulk and streaming"),
    ("backfill_speed.py", "conservative and selective backfilling"),
    ("recontext.py", "recontextualization time, 256 to 10,000 agents"),
    ("slurm_sense.py", "one snapshot of a real Slurm holding 10,000 jobs (root)"),
    ("scale_out.py", "0 -> 1,000 workers on EC2 (moto on 127.0.0.1)"),
    ("advisor.py", "rank 1,000 configurations over 10,000-sample histories"),
    ("observability.py", "metrics on the step; the dashboard's page"),
]


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo") if Path("/proc/cpuinfo").exists() else open(os.devnull) as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def execute(
    argv: list[str], cwd: Path, timeout: float, stdout_only: bool = False
) -> tuple[str, float]:
    """Run ``argv`` in ``cwd``; its output (``stdout_only``: without its log on stderr)
    and wall time. Raises on a non-zero status."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTICSITE_")}
    env["MPLBACKEND"] = "Agg"
    env["COLUMNS"] = "200"
    start = time.monotonic()
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    wall = time.monotonic() - start
    out = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit status {done.returncode}\n{out[-2000:]}")
    return (done.stdout if stdout_only else out), wall


def measure(
    run: Run, work: Path, timeout: float = 1800.0
) -> tuple[dict[str, str], dict[str, Path]]:
    """Run it in ``work``, an empty directory; its figures, and the plots it made there."""
    for name in ("examples", "experiments"):
        (work / name).symlink_to(ROOT / name)
    elasticsite = str(Path(sys.executable).with_name("elasticsite"))
    out, wall = execute([elasticsite, *run.argv], work, timeout)
    figures = {key: get(out) for key, get in run.figures.items()}
    if run.wall is not None:
        figures[run.wall] = f"{wall:,.0f} s"
    images: dict[str, Path] = {}
    for pattern, target in run.images.items():
        found = sorted(work.glob(pattern))
        if found:
            images[target] = found[0]
    return figures, images


def documented() -> dict[str, list[str]]:
    """Every marked figure in the docs: key -> the values written (one per place)."""
    seen: dict[str, list[str]] = {}
    for path in DOCS:
        for m in FIGURE.finditer(path.read_text()):
            seen.setdefault(m[1], []).append(m[2])
    return seen


def rewrite(figures: dict[str, str]) -> list[str]:
    """Write the figures into every marked place; the files changed."""
    changed = []
    for path in DOCS:
        text = path.read_text()
        new = FIGURE.sub(
            lambda m: f"<!-- fig:{m[1]} -->{figures.get(m[1], m[2])}<!-- /fig -->", text
        )
        if new != text:
            path.write_text(new)
            changed.append(str(path.relative_to(ROOT)))
    return changed


def _value(text: str) -> float | None:
    m = re.search(r"-?[\d,]*\.?\d+", text)
    return float(m[0].replace(",", "")) if m else None


def compare(run: Run, fresh: dict[str, str], written: dict[str, list[str]]) -> list[str]:
    """The figures of ``run`` whose written value is off from ``fresh`` by more than its
    tolerance (text figures must be equal)."""
    problems = []
    for key, value in fresh.items():
        if key == run.wall:
            continue
        for old in written.get(key, []):
            a, b = _value(old), _value(value)
            if a is None or b is None or "of" in value:
                ok = old == value
            else:
                ok = abs(a - b) <= run.tolerance * max(abs(b), 1e-9)
            if not ok:
                problems.append(
                    f"{key}: the docs say {old!r}, a fresh run gives {value!r} "
                    f"(tolerance {run.tolerance:.0%})"
                )
    return problems


_ROW = re.compile(r"^\| `([\w.]+)` \|")


def benchmarks(timeout: float, only: list[str], date: str, old_table: str) -> str:
    """Run the benchmarks (``only`` these, if given); the Markdown table of their last
    lines, times and dates, keeping the rows of those not run this time."""
    kept = {m[1]: line for line in old_table.splitlines() if (m := _ROW.match(line))}
    rows = [
        "| benchmark | what | last line (its ratio or target) | took | measured |",
        "| --- | --- | --- | --- | --- |",
    ]
    for script, what in BENCHMARKS:
        if only and script.removesuffix(".py") not in only and script not in only:
            rows.append(kept.get(script, f"| `{script}` | {what} | not run yet | - | - |"))
            continue
        say(f"benchmarks/{script}")
        try:
            # a benchmark prints its ratio last on stdout; its log goes to stderr
            out, wall = execute(
                [sys.executable, f"benchmarks/{script}"], ROOT, timeout, stdout_only=True
            )
            lines = [ln.strip() for ln in out.strip().splitlines() if ln.strip()]
            last = lines[-1] if lines else ""
            took = f"{wall:,.0f} s"
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            last, took = f"failed: {lines[-1] if lines else exc!r}", "-"
        say(f"  {last}")
        rows.append(f"| `{script}` | {what} | {last.replace('|', '/')} | {took} | {date} |")
    return "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", help=f"runs to do: {', '.join(r.name for r in RUNS)}")
    parser.add_argument("--benchmarks", action="store_true", help="run the benchmarks too")
    parser.add_argument(
        "--benchmark",
        action="append",
        default=[],
        metavar="NAME",
        help="with --benchmarks: only this one (repeatable), e.g. decision_loop",
    )
    parser.add_argument("--check", action="store_true", help="compare only; write nothing")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per command")
    args = parser.parse_args()
    known = {r.name: r for r in RUNS}
    unknown = [n for n in args.runs if n not in known]
    if unknown:
        parser.error(f"unknown runs {unknown}; choose from {', '.join(known)}")
    chosen = [known[n] for n in args.runs] if args.runs else ([] if args.benchmarks else RUNS)
    written = documented()
    record = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    stamp = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine()}
    problems: list[str] = []
    for run in chosen:
        say(f"{run.name}: elasticsite {' '.join(run.argv)}")
        with tempfile.TemporaryDirectory(prefix=f"docs-figures-{run.name}-") as tmp:
            figures, images = measure(run, Path(tmp), args.timeout)
            for key, value in figures.items():
                say(f"  {key} = {value}  (docs: {', '.join(written.get(key, ['not quoted']))})")
            if args.check:
                problems += compare(run, figures, written)
                continue
            rewrite(figures)
            for target, source in images.items():
                shutil.copyfile(source, ROOT / "docs" / target)
                say(f"  docs/{target} <- {source.name}")
        record[run.name] = {**stamp, "command": ["elasticsite", *run.argv], "figures": figures}
    if chosen and not args.check:
        rewrite({MEASURED_ON: f"{stamp['date']} on {stamp['machine']}"})
    if args.benchmarks and not args.check:
        text = BENCHMARKS_MD.read_text()
        old = TABLE.search(text)
        table = benchmarks(args.timeout, args.benchmark, stamp["date"], old[2] if old else "")
        head = f"Measured on {stamp['machine']}:\n\n"
        BENCHMARKS_MD.write_text(TABLE.sub(lambda m: m[1] + head + table + m[3], text))
        record["benchmarks"] = stamp
    if not args.check:
        RECORD.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    for problem in problems:
        sys.stderr.write(problem + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
