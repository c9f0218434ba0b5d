"""Paper 004's figures beside the dissertation's: the composite bound's success and
over-prediction per configuration (Tables 3.3-3.4 and 3.6-3.7), and each cloud
policy's allocation delay (Tables 4.12-4.24). matplotlib through its object API,
imported only when a plot is drawn."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from elasticsite import plots
from elasticsite.advisor.evaluate import OVERALL, Row
from elasticsite.reproduce.paper004_advisor import PUBLISHED, phase_figures

__all__ = ["plot_bounds", "plot_clouds"]


def plot_bounds(rows: Mapping[tuple[str, str], Row], path: Path) -> Path:
    """Two panels: the composite bound's success rate, and its over-prediction (log
    scale), measured beside published, one pair of bars per configuration."""
    labels = [f"{res}\n{policy.replace('_', '-')}" for res, policy in rows]
    measured = [phase_figures(r)[OVERALL] for r in rows.values()]
    published = [PUBLISHED[key][OVERALL] for key in rows]
    fig = plots.figure(10, 4)
    x = range(len(labels))
    panels = (
        ("composite bound: runs under it", "%"),
        ("composite bound: over-prediction", "% (symmetric log)"),
    )
    for i, (title, unit) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        ours = [m[i] or 0.0 for m in measured]
        theirs = [p[i] for p in published]
        if i == 1:  # symmetric log: an under-prediction shows below zero
            ax.set_yscale("symlog", linthresh=10)
            ax.axhline(0, color="grey", linewidth=0.5)
        else:
            ax.axhline(81.5, color="grey", linestyle="--", linewidth=1, label="target 81.5 %")
        ax.bar([v - 0.2 for v in x], ours, 0.4, label="measured")
        ax.bar([v + 0.2 for v in x], theirs, 0.4, label="paper 004")
        ax.set_xticks(list(x), labels, fontsize=8)
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8, loc="lower right")
    return plots.save(fig, path, 100)


def plot_clouds(rows: Mapping[str, tuple[float, float, float, float]], path: Path) -> Path:
    """Each cloud policy's mean allocation delay ± sd, measured beside published."""
    fig = plots.figure(6, 3.5)
    ax = fig.add_subplot(1, 1, 1)
    x = range(len(rows))
    vals = list(rows.values())
    ax.bar([v - 0.2 for v in x], [r[0] for r in vals], 0.4, yerr=[r[1] for r in vals],
           label="measured")  # fmt: skip
    ax.bar([v + 0.2 for v in x], [r[2] for r in vals], 0.4, yerr=[r[3] for r in vals],
           label="paper 004")  # fmt: skip
    ax.set_xticks(list(x), list(rows), fontsize=8)
    ax.set_ylabel("allocation delay, s")
    ax.set_title("one urgent c1.xlarge, each policy in the paper's condition", fontsize=10)
    ax.legend(fontsize=8)
    return plots.save(fig, path, 100)
