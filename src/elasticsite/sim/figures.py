"""Plots of aggregated experiment results, in the layout of the papers' figures.

Each function reads the rows of an experiment's ``summary.csv`` (strings, as written)
and saves PNGs next to it. matplotlib is imported only here, through its object API
and an explicit Agg canvas, so pyplot's global state is left alone and worker
processes need no display.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from elasticsite import plots

__all__ = [
    "deadline_plots",
    "elastic_bar_plots",
    "replay_series",
    "replay_sweep_plots",
    "replay_timeline_plot",
]

_DPI = 120
_LABELS = {
    "base": "Base (EASY, site only)",
    "naive": "Naive",
    "shortest_queue": "Shortest Queue",
    "weighted_queue": "Weighted Queue",
    "selective": "Selective (per category)",
    "selective_global": "Selective (one threshold)",
    "deadline_conservative": "Conservative (deadline)",
    "deadline_aggressive": "Aggressive (deadline)",
}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _figure(size: tuple[float, float] = (6.4, 4.2)) -> tuple[Any, Any]:
    fig = plots.figure(*size)
    return fig, fig.add_subplot()


def _num(cell: str) -> float:
    return math.nan if cell == "" else float(cell)


def replay_sweep_plots(
    out: Path, name: str, parameter: str, strategies: Sequence[str], rows: Sequence[dict[str, str]]
) -> list[Path]:
    """Figure 3's two panels for one swept parameter: the base's site utilisation and
    each strategy's performance cost (eq. 3) against the parameter's value."""
    base = sorted((_num(r["value"]), _num(r["site_utilisation"])) for r in rows
                  if r["strategy"] == "base")  # fmt: skip
    fig, ax = _figure()
    ax.plot([v for v, _ in base], [100 * u for _, u in base], marker="o", color="tab:blue")
    ax.set_xlabel(parameter)
    ax.set_ylabel("site utilisation (%)")
    ax.set_title(f"{name}: site utilisation, aggressive backfilling, no cloud")
    ax.grid(True, alpha=0.3)
    util = plots.save(fig, out / "utilisation.png", _DPI)

    fig, ax = _figure()
    for i, s in enumerate(strategies):
        pts = sorted((_num(r["value"]), _num(r["performance_cost"])) for r in rows
                     if r["strategy"] == s)  # fmt: skip
        ax.plot([v for v, _ in pts], [c for _, c in pts], marker=_MARKERS[i % len(_MARKERS)],
                label=_LABELS.get(s, s))  # fmt: skip
    ax.set_xlabel(parameter)
    ax.set_ylabel("performance cost")
    ax.set_title(f"{name}: performance cost (eq. 3)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    cost = plots.save(fig, out / "performance_cost.png", _DPI)
    return [util, cost]


_SCENARIOS = {0.9: "tight", 1.3: "normal", 1.7: "relaxed"}


def deadline_plots(
    out: Path, name: str, strategies: Sequence[str], rows: Sequence[dict[str, str]]
) -> list[Path]:
    """Figures 4 and 5: per stringency factor, each strategy's money spent, its
    non-violation cost (eq. 4) and the share of deadline jobs rejected (the base, site
    only, against each strategy with the cloud), against the share of deadline jobs."""
    paths = []
    panels = (
        ("money_spent", "amount spent on the cloud ($)", "money", False),
        ("non_violation_cost", "non-violation cost (eq. 4)", "non_violation_cost", False),
        ("rejected_share", "deadline jobs rejected (%)", "rejected", True),
    )
    for sf in dict.fromkeys(r["stringency"] for r in rows):
        here = [r for r in rows if r["stringency"] == sf]
        scenario = _SCENARIOS.get(float(sf), "")
        label = f"sf {float(sf):g}" + (f", {scenario}" if scenario else "")
        for column, ylabel, file, with_base in panels:
            if with_base and not any(_num(r["rejected"]) > 0 for r in here):
                continue
            fig, ax = _figure()
            shown = ["base", *strategies] if with_base else list(strategies)
            for i, s in enumerate(shown):
                pts = sorted((_num(r["fraction"]), _num(r[column])) for r in here
                             if r["strategy"] == s)  # fmt: skip
                scale = 100.0 if with_base else 1.0
                ax.plot([100 * f for f, _ in pts], [scale * v for _, v in pts],
                        marker=_MARKERS[i % len(_MARKERS)], label=_LABELS.get(s, s))  # fmt: skip
            ax.set_xlabel("deadline-constrained jobs (%)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{name}: {ylabel.split(' (')[0]}, {label}")
            ax.grid(True, alpha=0.3)
            ax.legend()
            paths.append(plots.save(fig, out / f"{file}-sf{float(sf):g}.png", _DPI))
    return paths


def elastic_bar_plots(out: Path, name: str, rows: Sequence[dict[str, str]]) -> list[Path]:
    """Figures 7 and 8: elapsed workload time and total overhead, bars grouped by
    workload, one bar per policy (mean over the rounds)."""
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    by = {(r["workload"], r["policy"]): r for r in rows}
    paths = []
    for column, label, file in (
        ("elapsed", "elapsed workload time (s)", "elapsed.png"),
        ("overhead", "total overhead (s)", "overhead.png"),
    ):
        fig, ax = _figure((max(6.4, 1.6 * len(workloads) * max(1, len(policies)) / 2), 4.2))
        width = 0.8 / max(1, len(policies))
        for j, p in enumerate(policies):
            xs, hs = [], []
            for i, w in enumerate(workloads):
                row = by.get((w, p))
                if row is not None and row[column] != "":
                    xs.append(i - 0.4 + width * (j + 0.5))
                    hs.append(_num(row[column]))
            ax.bar(xs, hs, width=width, label=p)
        ax.set_xticks(range(len(workloads)), workloads)
        ax.set_ylabel(label)
        ax.set_title(f"{name}: {label.split(' (')[0]}")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend()
        paths.append(plots.save(fig, out / file, _DPI))
    return paths


def replay_series(result: Any) -> dict[str, tuple[Any, Any]]:
    """Exact step series of one replay: hours since the first submission -> level.

    Keys: ``site`` (processors busy), ``cloud`` (VMs busy), ``waiting`` (jobs queued).
    Built from the per-job records; every change at one instant is netted first, so a
    job ending as another starts never shows as a spike.
    """
    import numpy as np

    from elasticsite.sim.metrics import CLOUD

    jobs = result.jobs
    ran = ~np.asarray(jobs.rejected, dtype=bool) & np.isfinite(jobs.start)
    sub, start, fin = jobs.submit[ran], jobs.start[ran], jobs.finish[ran]
    procs = jobs.processors[ran].astype(np.float64)
    cloud = np.asarray(jobs.where[ran]) == CLOUD
    origin = float(np.min(jobs.submit)) if len(jobs.submit) else 0.0

    def steps(times: Any, deltas: Any) -> tuple[Any, Any]:
        order = np.argsort(times, kind="stable")
        t, level = times[order], np.cumsum(deltas[order])
        last = np.append(t[1:] != t[:-1], True) if len(t) else np.zeros(0, dtype=bool)
        return (t[last] - origin) / 3600.0, level[last]

    ones = np.ones(int(ran.sum()))
    return {
        "site": steps(
            np.concatenate([start[~cloud], fin[~cloud]]),
            np.concatenate([procs[~cloud], -procs[~cloud]]),
        ),
        "cloud": steps(
            np.concatenate([start[cloud], fin[cloud]]),
            np.concatenate([procs[cloud], -procs[cloud]]),
        ),
        "waiting": steps(np.concatenate([sub, start]), np.concatenate([ones, -ones])),
    }


def replay_timeline_plot(path: str | Path, result: Any, title: str) -> Path:
    """Waiting jobs and busy processors on the site and the cloud over one replay
    (``result`` is a :class:`~elasticsite.sim.replay.ReplayResult`)."""
    series = replay_series(result)
    fig, ax = _figure((8.0, 4.2))
    ax.step(*series["site"], where="post", label="site processors busy", color="tab:blue")
    ax.step(*series["cloud"], where="post", label="cloud VMs busy", color="tab:orange")
    ax.step(*series["waiting"], where="post", label="waiting jobs", color="tab:green", alpha=0.8)
    ax.set_xlabel("time since first submission (h)")
    ax.set_ylabel("processors / jobs")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    return plots.save(fig, Path(path), _DPI)
