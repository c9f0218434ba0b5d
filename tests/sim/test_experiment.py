"""Experiment specs and the sweep runner: validation, rows, means, plots, resuming, CLI."""

from __future__ import annotations

import csv
import math
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.cli import run_cli

from elasticsite.sim.experiment import (
    RESULTS,
    SUMMARY,
    ElasticSpec,
    ReplaySpec,
    SpecError,
    load_spec,
    parse_spec,
    round_seed,
    run_experiment,
)
from elasticsite.sim.runner import write_files

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.xdist_group("experiment")  # one worker: `swept` computed once


def tiny(**changes: Any) -> dict[str, Any]:
    """A sweep small enough for a test: 2 values x 2 rounds x 2 strategies, 3 days."""
    data: dict[str, Any] = {
        "name": "tiny",
        "rounds": 2,
        "seed": 7,
        "site_procs": 32,
        "strategies": ["naive", "selective"],
        "workload": {"source": "lublin", "duration_days": 3, "machine_size": 32},
        "sweep": {"parameter": "umed", "values": [1.5, 2.5]},
        "cloud": {"vm_limit": 32, "price_per_hour": 0.1, "billing_increment": 3600},
    }
    data.update(changes)
    return data


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def num(cell: str) -> float:
    return math.nan if cell == "" else float(cell)


# -- validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"rounds": 0}, "rounds", "greater than or equal to 1"),
        ({"strategies": ["naive", "nope"]}, "strategies", "unknown strategy 'nope'"),
        ({"strategies": []}, "strategies", "at least 1"),
        ({"sweep": {"parameter": "bogus", "values": [1]}}, "sweep.parameter", "Lublin"),
        ({"sweep": {"parameter": "umed", "values": [1, 1]}}, "sweep.values", "distinct"),
        ({"cloud": {"vm_limit": -3}}, "cloud.vm_limit", "(got -3)"),
        ({"cloud": {"boot": "soon"}}, "cloud.boot", "bad duration"),
        ({"workload": {"duration_days": 0}}, "workload.duration_days", "greater than 0"),
        ({"workload": {"source": "lublin", "params": {"zzz": 1}}}, "workload.params", "zzz"),
        ({"workload": {"source": "carrier-pigeon"}}, "workload", "lublin"),
        ({"colour": "red"}, "colour", "unknown setting"),
    ],
)
def test_a_bad_field_is_named(change: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(tiny(**change), "spec.toml")
    message = str(info.value)
    assert message.startswith(f"spec.toml: {field}"), message
    assert words in message


@pytest.mark.parametrize(
    ("change", "start"),
    [
        ({"sweep": {"parameter": "umed", "values": [2, 9]}}, "sweep.values (9): LublinParams"),
        ({"site_procs": 16}, "workload.machine_size: 32 exceeds site_procs 16"),
        (
            {"workload": {"source": "swf", "path": "x.swf"}},
            "sweep: only a Lublin workload can sweep",
        ),
    ],
)
def test_whole_spec_checks_name_the_field(change: dict[str, Any], start: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(tiny(**change), "spec.toml")
    assert str(info.value).startswith(f"spec.toml: {start}"), str(info.value)


def test_elastic_names_are_checked() -> None:
    base = {"kind": "elastic", "workloads": ["workload1"], "policies": ["bursts"]}
    assert isinstance(parse_spec(base), ElasticSpec)
    with pytest.raises(SpecError, match="unknown policy 'nope'"):
        parse_spec({**base, "policies": ["nope"]})
    with pytest.raises(SpecError, match="nothing to run"):
        parse_spec({"kind": "elastic"})
    with pytest.raises(SpecError, match="policy_settings: unknown setting"):
        parse_spec({**base, "policy_settings": {"warp": 9}})
    # a policy's thresholds are checked by its options model when the spec is read
    with pytest.raises(SpecError, match=r"<spec>: policy_settings: bursts_factor: .*than 0"):
        parse_spec({**base, "policy_settings": {"bursts_factor": 0}})
    spec = parse_spec({**base, "policy_settings": {"bursts_factor": 3, "billing_margin": 60}})
    assert isinstance(spec, ElasticSpec)
    settings = spec.settings("bursts")
    assert settings.billing_margin == 60 and settings.options.bursts_factor == 3  # type: ignore[attr-defined]


def test_load_spec_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("rounds = [\n")
    with pytest.raises(SpecError, match=r"bad\.toml: not valid TOML"):
        load_spec(bad)
    swf = tmp_path / "swf.toml"
    swf.write_text('strategies = ["naive"]\n[workload]\nsource = "swf"\npath = "gone.swf"\n')
    with pytest.raises(SpecError, match=r"swf\.toml: workload\.path: no such file"):
        load_spec(swf)


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.toml")), ids=str)
def test_shipped_specs_validate(path: Path) -> None:
    spec = load_spec(path)
    assert spec.name == path.stem
    if isinstance(spec, ReplaySpec):
        assert spec.site_procs == 144 and spec.cloud.vm_limit == 144
        assert spec.cloud.price_per_hour == 0.10 and spec.cloud.billing_increment == 3600
        assert spec.rounds == 5 and spec.workload.duration_days == 60  # type: ignore[union-attr]


def test_shipped_specs_cover_the_papers_ranges() -> None:
    for param, low, high in (("umed", 1.5, 3.5), ("barr", 0.45, 0.55), ("pb", 0.5, 1.0)):
        spec = load_spec(ROOT / "experiments" / f"fig3-{param}.toml")
        assert isinstance(spec, ReplaySpec) and spec.sweep is not None
        assert spec.sweep.parameter == param
        assert (min(spec.sweep.values), max(spec.sweep.values)) == (low, high)
        assert spec.strategies == ["naive", "shortest_queue", "weighted_queue", "selective"]


# -- the sweep ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("swept")
    result = run_experiment(parse_spec(tiny()), out, workers=2)
    assert result.computed == 2 * 2 * 3 and result.kept == 0
    return out


def test_a_sweep_writes_one_row_per_value_round_and_strategy(swept: Path) -> None:
    got = rows(swept / RESULTS)
    keys = [(r["parameter"], r["value"], r["round"], r["strategy"]) for r in got]
    assert keys == [
        ("umed", v, r, s)
        for v in ("1.5", "2.5")
        for r in ("0", "1")
        for s in ("base", "naive", "selective")
    ]
    for r in got:
        assert int(r["jobs"]) > 50
        if r["strategy"] == "base":
            assert r["money_spent"] == "0.0" and r["performance_cost"] == ""
            assert 0 < num(r["site_utilisation"]) <= 1
        else:
            assert num(r["money_spent"]) > 0 and int(r["jobs_on_cloud"]) > 0
            # eq. 3 against the same round's base
            base = next(
                b for b in got if b["strategy"] == "base" and (b["value"], b["round"]) ==
                (r["value"], r["round"])
            )  # fmt: skip
            gain = num(base["awrt"]) - num(r["awrt"])
            assert num(r["awrt_improvement"]) == pytest.approx(gain)
            assert num(r["performance_cost"]) == pytest.approx(
                num(r["money_spent"]) / gain * num(r["awrt"])
            )
    # a round draws the same arrivals for every value of umed (common random numbers),
    # and rounds differ
    count = {(r["value"], r["round"]): r["jobs"] for r in got}
    assert count["1.5", "0"] == count["2.5", "0"] != count["1.5", "1"] == count["2.5", "1"]
    assert round_seed(7, 0) != round_seed(7, 1)


def test_summary_holds_the_means_of_the_rows(swept: Path) -> None:
    got = rows(swept / RESULTS)
    summary = rows(swept / SUMMARY)
    assert [(s["value"], s["strategy"]) for s in summary] == [
        (v, s) for v in ("1.5", "2.5") for s in ("base", "naive", "selective")
    ]
    for s in summary:
        members = [r for r in got if (r["value"], r["strategy"]) == (s["value"], s["strategy"])]
        assert s["rounds"] == "2" and len(members) == 2
        for column in ("awrt", "money_spent", "site_utilisation", "vm_hours_billed"):
            assert num(s[column]) == pytest.approx(np.mean([num(r[column]) for r in members]))


def test_a_sweep_draws_figure_3(swept: Path) -> None:
    for name in ("utilisation.png", "performance_cost.png"):
        assert (swept / name).read_bytes()[:8] == PNG


def test_a_rerun_recomputes_nothing_and_a_gap_only_itself(tmp_path: Path) -> None:
    spec = parse_spec(tiny(rounds=1, sweep={"parameter": "umed", "values": [2.0]}))
    first = run_experiment(spec, tmp_path, workers=1)
    assert first.computed == 3
    results = tmp_path / RESULTS
    before, stamp = results.read_bytes(), results.stat().st_mtime_ns
    again = run_experiment(spec, tmp_path, workers=2)
    assert (again.computed, again.kept) == (0, 3)
    assert results.stat().st_mtime_ns == stamp and results.read_bytes() == before

    # drop the last strategy's row, as if interrupted: only it is recomputed, and
    # against the base row already there
    lines = before.decode().splitlines(keepends=True)
    results.write_text("".join(lines[:-1]))
    seen: list[tuple[int, int]] = []
    third = run_experiment(spec, tmp_path, workers=1, progress=lambda d, t: seen.append((d, t)))
    assert third.computed == 1 and seen[-1] == (1, 1)
    assert results.read_bytes() == before

    # a row cut short by a kill is dropped and recomputed
    results.write_bytes(before[: len(before) - 20])
    assert run_experiment(spec, tmp_path, workers=1).computed == 1
    assert results.read_bytes() == before

    # a new strategy adds its rows, a new round its base and strategies
    wider = parse_spec(tiny(rounds=2, strategies=["naive", "selective", "weighted_queue"],
                            sweep={"parameter": "umed", "values": [2.0]}))  # fmt: skip
    assert run_experiment(wider, tmp_path, workers=2).computed == 1 + 4


def test_a_directory_of_another_experiment_is_refused(tmp_path: Path) -> None:
    run_experiment(parse_spec(tiny(rounds=1, sweep=None, strategies=["naive"])), tmp_path)
    other = parse_spec(tiny(rounds=1, sweep=None, strategies=["naive"], site_procs=64))
    with pytest.raises(SpecError, match="other settings"):
        run_experiment(other, tmp_path)


def test_the_same_spec_gives_the_same_bytes(tmp_path: Path, swept: Path) -> None:
    run_experiment(parse_spec(tiny()), tmp_path, workers=1)  # another order of completion
    for name in (RESULTS, SUMMARY):
        assert (tmp_path / name).read_bytes() == (swept / name).read_bytes()


def test_an_unswept_spec_gives_table_1(tmp_path: Path) -> None:
    spec = parse_spec(tiny(sweep=None, strategies=["naive", "weighted_queue"]))
    result = run_experiment(spec, tmp_path, workers=2)
    assert result.table_csv is not None
    table = rows(result.table_csv)
    assert [t["metric"] for t in table][:4] == [
        "Amount spent with VM instances ($)",
        "Number of VM instances/Hours",
        "Average weighted response time (improvement)",
        "Overall job slowdown (improvement)",
    ]
    got = rows(tmp_path / RESULTS)
    for s in ("naive", "weighted_queue"):
        spent = np.mean([num(r["money_spent"]) for r in got if r["strategy"] == s])
        assert num(table[0][s]) == pytest.approx(spent) == result.table[table[0]["metric"]][s]
        # whole VM-hours at US$0.10 each
        assert num(table[1][s]) == pytest.approx(10 * num(table[0][s]))


def _swf(path: Path) -> None:
    """Three days of jobs in CPUs (8 per node), one every two hours."""
    lines = []
    for i in range(36):
        cpus = 8 * (1 + i % 4)
        lines.append(f"{i + 1} {i * 7200} 0 3000 {cpus} -1 -1 {cpus} 3600 -1 1 1 1 -1 1 1 -1 -1")
    path.write_text("\n".join(lines) + "\n")


def test_an_swf_trace_is_split_into_intervals(tmp_path: Path) -> None:
    _swf(tmp_path / "t.swf")
    spec_path = tmp_path / "s.toml"
    spec_path.write_text(
        'rounds = 3\nsite_procs = 4\nstrategies = ["naive"]\n'
        '[workload]\nsource = "swf"\npath = "t.swf"\ninterval_days = 1\nprocs_per_unit = 8\n'
        "[cloud]\nvm_limit = 4\n"
    )
    result = run_experiment(load_spec(spec_path), tmp_path / "out", workers=1)
    got = rows(result.results)
    assert [r["jobs"] for r in got] == ["12"] * 6
    with pytest.raises(SpecError, match="rounds: 4 rounds need 4 intervals"):
        run_experiment(load_spec(spec_path), tmp_path / "out", rounds=4)


def test_an_elastic_spec_draws_bars_and_timelines(tmp_path: Path) -> None:
    spec = parse_spec(
        {
            "kind": "elastic",
            "workloads": ["workload1"],
            "policies": ["on_demand", "bursts"],
            "runs": [{"workload": "workload2", "policy": "dedicated",
                      "cloud": {"vm_limit": 3, "boot": "10"}}],
            "timelines": True,
            "policy_settings": {"dedicated_workers": 3},
        }
    )  # fmt: skip
    result = run_experiment(spec, tmp_path, workers=2)
    got = rows(result.results)
    assert [(r["workload"], r["policy"]) for r in got] == [
        ("workload1", "on_demand"),
        ("workload1", "bursts"),
        ("workload2", "dedicated"),
    ]
    assert all(r["jobs_done"] == "20" for r in got)
    assert got[2]["peak_workers"] == "3"
    names = sorted(p.name for p in result.plots)
    assert names == [
        "elapsed.png", "overhead.png", "workload1-bursts-r0.png",
        "workload1-on_demand-r0.png", "workload2-dedicated-r0.png",
    ]  # fmt: skip
    assert all(p.read_bytes()[:8] == PNG for p in result.plots)
    assert run_experiment(spec, tmp_path, workers=2).computed == 0
    assert sorted(p.name for p in (tmp_path / "timelines").iterdir()) == [
        f"{w}-{p}-r0.{ext}" for w, p in (("workload1", "bursts"), ("workload1", "on_demand"),
                                         ("workload2", "dedicated")) for ext in ("csv", "png")
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["../escaped.png", "/tmp/escaped.png", "a/../../escaped.png",
                                  "", "timelines\\..\\..\\escaped.png"])  # fmt: skip
def test_a_file_a_run_returns_outside_the_output_directory_is_refused(
    tmp_path: Path, name: str
) -> None:
    """A run's files may come from a Dask worker: none of them is written outside --out."""
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(RuntimeError, match="outside"):
        write_files(out, {"timelines/fine.csv": b"x", name: b"evil"})
    assert list(tmp_path.rglob("*escaped*")) == [] and list(out.iterdir()) == []


# -- the command line -------------------------------------------------------------------


def cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, check=check, columns=150)


def _toml(data: dict[str, Any]) -> str:
    out = []
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    for k, v in data.items():
        if not isinstance(v, dict):
            out.append(f"{k} = {v!r}".replace("'", '"'))
    for name, table in tables.items():
        out.append(f"[{name}]")
        out += [f"{k} = {v!r}".replace("'", '"') for k, v in table.items()]
    return "\n".join(out) + "\n"


def test_cli_experiment_end_to_end(tmp_path: Path) -> None:
    data = tiny(rounds=1)
    del data["sweep"]
    text = _toml(data)
    assert tomllib.loads(text) == data
    (tmp_path / "t.toml").write_text(text)
    first = cli("experiment", "t.toml", "--out", "o", "--workers", "2", cwd=tmp_path)
    assert "3 runs computed, 0 kept" in first.stdout
    assert "Amount spent with VM instances ($)" in first.stdout
    assert "Selective" not in first.stdout and "selective" in first.stdout
    assert len(rows(tmp_path / "o" / RESULTS)) == 3
    second = cli("experiment", "t.toml", "--out", "o", "--rounds", "2", cwd=tmp_path)
    assert "3 runs computed, 3 kept" in second.stdout
    bad = cli("experiment", "nope.toml", cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "nope.toml: cannot read" in bad.stderr


def test_cli_simulate_with_a_strategy(tmp_path: Path) -> None:
    out = cli(
        "simulate", "--workload", "lublin", "--jobs", "300", "--machine-size", "32",
        "--site-procs", "32", "--strategy", "weighted_queue", "--out", "o", cwd=tmp_path,
    )  # fmt: skip
    text = out.stdout.replace("│", " ")
    assert "on 32 site processors with the weighted_queue strategy set, up to 32" in text
    assert "performance cost" in text and "base (site only, EASY): AWRT" in text
    jobs = rows(tmp_path / "o" / "lublin-300-weighted_queue-jobs.csv")
    assert len(jobs) == 300
    assert {j["where"] for j in jobs} == {"site", "cloud"}
    png = tmp_path / "o" / "lublin-300-weighted_queue.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
    bad = cli("simulate", "--strategy", "nope", cwd=tmp_path, check=False)
    assert bad.returncode == 2 and "unknown strategy 'nope'" in bad.stderr


def test_the_shipped_policy_comparison_runs(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "experiments" / "fig7-8-policies.toml")
    result = run_experiment(spec, tmp_path, workers=2, rounds=1)
    got = rows(result.summary)
    assert len(got) == 8 and all(num(r["jobs_done"]) == 20 for r in got)
    elapsed = {(r["workload"], r["policy"]): num(r["elapsed"]) for r in got}
    # the dedicated pool never waits for more VMs than it has: never slower than bursts
    assert elapsed["workload2", "dedicated"] <= elapsed["workload2", "bursts"]


def test_replay_timeline_nets_simultaneous_changes() -> None:
    # Two 1-processor jobs back to back on a 1-processor site: the busy series must
    # never show 2 at the instant one ends and the next starts.
    from elasticsite.sim.figures import replay_series
    from elasticsite.sim.replay import replay

    result = replay([0.0, 0.0], [1, 1], [10.0, 10.0], [10.0, 10.0], site_procs=1, strategy="base")
    t, busy = replay_series(result)["site"]
    assert [x * 3600 for x in t] == [0.0, 10.0, 20.0]
    assert list(busy) == [1.0, 1.0, 0.0]
    t, waiting = replay_series(result)["waiting"]
    assert list(waiting) == [1.0, 0.0]  # one waits 0-10 s (both arrive at 0, one starts)
