"""Paper 003's fair share drawn: each user's VMs over time, graceful and immediate,
beside the shares the paper describes. matplotlib through its object API, imported only
when a plot is drawn."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from elasticsite import plots
from elasticsite.reproduce.paper003_sim import LIMIT, USERS, Run

__all__ = ["plot_shares"]


def plot_shares(runs: Mapping[str, Run], path: Path) -> Path:
    """One panel per re-balancing mode: the VMs each user held (solid) and their fair
    share, the paper's expected figure (dashed), against time."""
    fig = plots.figure(11, 3.8)
    colours = dict(zip(USERS, ("tab:blue", "tab:orange", "tab:green"), strict=True))
    for i, (mode, run) in enumerate(runs.items()):
        ax = fig.add_subplot(1, len(runs), i + 1)
        minutes = [t / 60 for t in run.times]
        for user in USERS:
            ax.step(minutes, run.held[user], where="post", color=colours[user], label=user)
            ax.step(minutes, run.fair[user], where="post", color=colours[user],
                    linestyle="--", linewidth=1, alpha=0.7)  # fmt: skip
        ax.plot([], [], color="grey", linestyle="--", label="paper 003: even share")
        ax.set_ylim(0, LIMIT + 1)
        ax.set_xlabel("minutes")
        ax.set_ylabel("VMs running the user's jobs")
        ax.set_title(f"{mode} re-balancing", fontsize=10)
        ax.legend(fontsize=8, loc="center right")
    return plots.save(fig, path, 100)
