"""Deadline experiments (paper 002, Figures 4 and 5): the spec, the rows, eq. 5's readings."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from elasticsite.sim.experiment import run_experiment
from elasticsite.sim.specs import DeadlineSpec, SpecError, parse_spec


def spec(**change: Any) -> dict[str, Any]:
    return {
        "kind": "deadline",
        "name": "dl",
        "rounds": 1,
        "seed": 3,
        "site_procs": 32,
        "strategies": ["naive", "deadline_aggressive"],
        "fractions": [0.5],
        "stringency": [0.9, 1.3],
        "workload": {"duration_days": 4, "machine_size": 32},
        "cloud": {"vm_limit": 32},
        **change,
    }


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"fractions": [0.0]}, "fractions: every fraction must be in (0, 1]"),
        ({"fractions": [0.5, 0.5]}, "fractions: fractions must be distinct"),
        ({"stringency": [-1]}, "stringency: every stringency factor must be in"),
        ({"eq5": "middle"}, "eq5: Input should be 'later' or 'printed'"),
        ({"sweep": {"parameter": "umed", "values": [2.0]}}, "a deadline experiment sweeps"),
        ({"kind": "deadlines"}, "kind: 'deadlines' is not one of replay, deadline, elastic"),
    ],
)
def test_bad_specs_name_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=r"^spec\.toml: ") as err:
        parse_spec(spec(**change), "spec.toml")
    assert message in str(err.value)


def test_deadline_strategies_reject_only_when_asked() -> None:
    plain = parse_spec(spec(), "s")
    rejecting = parse_spec(spec(reject=True), "s")
    assert isinstance(plain, DeadlineSpec) and isinstance(rejecting, DeadlineSpec)
    assert not plain.base().reject and not plain.strategy("deadline_aggressive").reject
    assert rejecting.base().reject and rejecting.strategy("deadline_conservative").reject
    assert rejecting.base().edf


def test_a_run_reports_violations_rejections_and_eq4(tmp_path: Path) -> None:
    s = parse_spec(spec(), "s")
    result = run_experiment(s, tmp_path / "out", workers=1)
    got = rows(result.results)
    assert [(r["stringency"], r["strategy"]) for r in got] == [
        (sf, st) for sf in ("0.9", "1.3") for st in ("base", "naive", "deadline_aggressive")
    ]
    by = {(r["stringency"], r["strategy"]): r for r in got}
    for sf in ("0.9", "1.3"):
        base, aggressive = by[sf, "base"], by[sf, "deadline_aggressive"]
        assert int(base["deadline_jobs"]) > 0
        assert base["money_spent"] == "0.0" and base["non_violation_cost"] == ""
        assert int(base["violations"]) > int(aggressive["violations"])
        avoided = int(base["violations"]) - int(aggressive["violations"])
        assert int(aggressive["violations_avoided"]) == avoided
        # eq. 4: money per violation avoided
        assert float(aggressive["non_violation_cost"]) == pytest.approx(
            float(aggressive["money_spent"]) / avoided
        )
        assert aggressive["rejected"] == "0"
    # the later reading of eq. 5: a looser factor gives later deadlines, fewer violations
    assert int(by["1.3", "base"]["violations"]) <= int(by["0.9", "base"]["violations"])
    assert {p.name for p in result.plots} >= {"money-sf0.9.png", "non_violation_cost-sf1.3.png"}
    again = run_experiment(s, tmp_path / "out", workers=1)
    assert (again.computed, again.kept) == (0, 6)


def test_with_rejection_the_site_alone_rejects_and_the_cloud_takes_them(tmp_path: Path) -> None:
    s = parse_spec(spec(reject=True, strategies=["deadline_aggressive"]), "s")
    got = {(r["stringency"], r["strategy"]): r for r in rows(
        run_experiment(s, tmp_path, workers=1).summary)}  # fmt: skip
    base, cloud = got["0.9", "base"], got["0.9", "deadline_aggressive"]
    assert float(base["rejected"]) > 0 and float(base["rejected_share"]) > 0
    assert float(cloud["rejected"]) < float(base["rejected"])
    assert float(cloud["money_spent"]) > 0


def test_eq5_as_printed_makes_every_factor_above_one_the_same(tmp_path: Path) -> None:
    s = parse_spec(spec(eq5="printed", stringency=[1.3, 1.7]), "s")
    got = rows(run_experiment(s, tmp_path, workers=1).results)
    keep = [k for k in got[0] if k != "stringency"]
    low = [{k: r[k] for k in keep} for r in got if r["stringency"] == "1.3"]
    high = [{k: r[k] for k in keep} for r in got if r["stringency"] == "1.7"]
    assert low == high
