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

__all__ = ["elastic_bar_plots", "replay_sweep_plots"]

_DPI = 120
_LABELS = {
    "base": "Base (EASY, site only)",
    "naive": "Naive",
    "shortest_queue": "Shortest Queue",
    "weighted_queue": "Weighted Queue",
    "selective": "Selective",
    "deadline_conservative": "Conservative (deadline)",
    "deadline_aggressive": "Aggressive (deadline)",
}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def _figure(size: tuple[float, float] = (6.4, 4.2)) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=_DPI, metadata={"Software": None})
    return path


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
    util = _save(fig, out / "utilisation.png")

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
    cost = _save(fig, out / "performance_cost.png")
    return [util, cost]


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
        paths.append(_save(fig, out / file))
    return paths
