"""The figures quoted in the docs come from scripts/docs-figures.py, and the cheap ones
still agree with a fresh run.

Figures that do not depend on the machine (simulated time, counts) are recomputed and
compared within the run's stated tolerance; wall-clock figures cannot be, so each must
have been written by the script, which records its date and machine in
docs/figures.json.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_figures", ROOT / "scripts" / "docs-figures.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


FIGURES = _script()
CHEAP = [r for r in FIGURES.RUNS if r.cheap]


def test_every_marked_figure_is_one_the_script_writes() -> None:
    produced = {key for run in FIGURES.RUNS for key in run.figures} | {
        run.wall for run in FIGURES.RUNS if run.wall
    }
    produced.add(FIGURES.MEASURED_ON)
    written = FIGURES.documented()
    assert written, "no <!-- fig:KEY --> markers in the docs"
    unknown = sorted(set(written) - produced)
    assert not unknown, (
        f"figures in the docs that scripts/docs-figures.py does not write: {unknown}"
    )


def test_every_figure_says_when_and_where_it_was_measured() -> None:
    record = json.loads(FIGURES.RECORD.read_text())
    documented = FIGURES.documented()
    assert FIGURES.MEASURED_ON in documented, "the docs no longer say where figures were measured"
    for key in documented:
        if key == FIGURES.MEASURED_ON:
            continue
        run = next(r for r in FIGURES.RUNS if key in r.figures or key == r.wall)
        assert run.name in record, f"{key}: docs/figures.json has no run {run.name!r}"
        entry = record[run.name]
        assert re.match(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$", entry["date"]), entry
        assert entry["machine"] and "cores" in entry["machine"], entry
        # What the docs say is what that run wrote.
        for value in FIGURES.documented()[key]:
            assert value == entry["figures"][key], f"{key}: docs {value!r}, run {entry}"


def test_the_benchmarks_table_says_when_and_where() -> None:
    text = FIGURES.BENCHMARKS_MD.read_text()
    table = FIGURES.TABLE.search(text)
    assert table is not None, "docs/benchmarks.md lost its generated table's markers"
    body = table[2]
    if "Not yet run" not in body:
        assert re.search(r"^Measured on .+cores", body, re.M), body
        rows = [line for line in body.splitlines() if line.startswith("| `")]
        assert len(rows) == len(FIGURES.BENCHMARKS), body
        for row in rows:
            assert re.search(r"\| (\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC|-) \|$", row), row


@pytest.mark.parametrize("run", CHEAP, ids=[r.name for r in CHEAP])
def test_cheap_figures_agree_with_a_fresh_run(run: object, tmp_path: Path) -> None:
    fresh, _ = FIGURES.measure(run, tmp_path, timeout=300.0)
    problems = FIGURES.compare(run, fresh, FIGURES.documented())
    assert not problems, "; ".join(problems)
