"""What every plot elasticsite writes does the same way: a figure drawn off-screen
(no display, no pyplot state shared between threads), laid out once and saved without
the writer's name or the date in it. matplotlib is imported only when a figure is
made, so importing this module stays cheap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["figure", "save"]

_PNG_QUIET: dict[str, str | None] = {"Software": None}
_SVG_QUIET: dict[str, str | None] = {"Creator": None, "Date": None}


def figure(width: float, height: float) -> Any:
    """A matplotlib ``Figure`` of ``width`` x ``height`` inches with its own canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def save(fig: Any, path: Path, dpi: int) -> Path:
    """Lay ``fig`` out and write it to ``path`` (its directory made if need be; PNG or,
    by its suffix, SVG) without the writer's name, version or date in it, so that
    drawing the same figure again gives the same PNG."""
    fig.tight_layout()
    # tight_layout leaves a placeholder layout engine, for which savefig lays the
    # figure out once more before drawing it; the layout is final already
    fig.set_layout_engine(None)
    path.parent.mkdir(parents=True, exist_ok=True)
    svg = path.suffix.lower() == ".svg"
    fig.savefig(path, dpi=dpi, metadata=_SVG_QUIET if svg else _PNG_QUIET)
    return path
