"""``reproduce all``: the registry finds every paper, each runs and gets its own
report, one failing paper does not lose the others, and the summary counts what each
paper's claims came to. The plumbing runs on a registry of small stand-in papers (the
real ones are each tested on their own); the command line is run for a bad option."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.reproduce.quick import run_reproduce

from elasticsite.reproduce import Reproduction, Verdict
from elasticsite.reproduce.claims import check
from elasticsite.reproduce.every import Outcome, papers, run_all, summary_table, write_summary


def test_the_registry_holds_every_paper_module() -> None:
    found = papers()
    here = Path(__file__).parents[2] / "src" / "elasticsite" / "reproduce"
    modules = sorted(p.stem for p in here.glob("paper*.py") if re.fullmatch(r"paper\d{3}", p.stem))
    assert list(found) == modules
    assert {"paper000", "paper001", "paper002", "paper003", "paper004"} <= set(found)
    assert all(fn.__name__ == f"reproduce_{name}" for name, fn in found.items())


def fake(verdicts: list[bool | None], *, plot: bool = True) -> Callable[..., Reproduction]:
    """A paper whose claims come out as ``verdicts``, with one plot."""

    def run(out: Path, *, quick: bool = False, progress: Callable[[str], None] | None = None,
            workers: int | None = None) -> Reproduction:  # fmt: skip
        assert progress is not None
        progress("Figure 1: one run")
        repro = Reproduction(out.name, f"{out.name}: a stand-in", quick)
        repro.claims = [
            check(
                f"c{i}",
                "Figure 1",
                f"claim {i} of the paper",
                ok,
                f"measured {i}",
                "" if ok is not None else "no data",
            )
            for i, ok in enumerate(verdicts)
        ]
        if plot:
            out.mkdir(parents=True, exist_ok=True)
            (out / "fig1.png").write_bytes(b"\x89PNG")
            repro.plots = [out / "fig1.png"]
        repro.seconds = 0.1
        return repro

    return run


def broken(out: Path, *, quick: bool = False, progress: Callable[[str], None] | None = None
           ) -> Reproduction:  # fmt: skip
    raise OSError(f"{out}: disk full")


def test_every_paper_runs_and_the_summary_counts_its_verdicts(tmp_path: Path) -> None:
    registry = {"paperA": fake([True, True, False]), "paperB": broken,
                "paperC": fake([True, None])}  # fmt: skip
    said: list[tuple[str, str]] = []
    ended: list[str] = []
    outcomes = run_all(registry, tmp_path, quick=True, workers=1,
                       progress=lambda name, line: said.append((name, line)),
                       done=lambda o: ended.append(o.name))  # fmt: skip
    assert ended == ["paperA", "paperB", "paperC"]
    assert ("paperA", "Figure 1: one run") in said and ("paperC", "Figure 1: one run") in said
    a, b, _ = outcomes
    assert a.counts() == {Verdict.HOLDS: 2, Verdict.FAILS: 1, Verdict.UNCHECKED: 0}
    assert b.repro is None and "disk full" in b.error
    assert (tmp_path / "paperA" / "report.md").is_file()
    assert (tmp_path / "paperC" / "report.md").is_file()

    table = summary_table(outcomes).splitlines()
    assert table[0] == "| paper | claims | hold | do not hold | cannot be checked | run time |"
    assert table[2].startswith("| paperA | 3 | 2 | 1 | 0 | ")
    assert table[3].startswith("| paperB | failed: ") and "disk full" in table[3]
    assert table[4].startswith("| paperC | 2 | 1 | 0 | 1 | ")
    assert table[5].startswith("| **all** | 5 | 3 | 1 | 1 | ")

    report = write_summary(outcomes, tmp_path, quick=True).read_text()
    assert "[paperA](paperA/report.md)" in report
    assert "| `c2` | Figure 1 | claim 2 of the paper | measured 2 | **does not hold** |" in report
    assert '<img src="paperA/fig1.png" alt="paperA/fig1"' in report
    assert "## paperB" in report and "disk full" in report


def test_only_papers_that_take_workers_are_given_them(tmp_path: Path) -> None:
    seen: list[int | None] = []

    def run(out: Path, *, quick: bool = False, progress: Callable[[str], None] | None = None,
            workers: int | None = None) -> Reproduction:  # fmt: skip
        seen.append(workers)
        return Reproduction("p", "p", quick)

    def plain(out: Path, *, quick: bool = False, progress: Callable[[str], None] | None = None
              ) -> Reproduction:  # fmt: skip
        return Reproduction("q", "q", quick)

    outcomes = run_all({"p": run, "q": plain}, tmp_path, workers=3)
    assert seen == [3]
    assert all(isinstance(o, Outcome) and o.repro is not None for o in outcomes)


@pytest.mark.parametrize("option", [["--trace", "x.swf"], ["--period", "2"], ["--slurm"]])
def test_a_one_paper_option_with_all_is_one_line(tmp_path: Path, option: list[str]) -> None:
    done = run_reproduce(tmp_path, "all", "--quick", *option)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --trace, --period and --slurm apply to one paper, not to all"
    ]
    assert not (tmp_path / "reproduce-out").exists()
