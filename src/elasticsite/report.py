"""Files people read after a run: a step plot of the run and the CSVs it was drawn from.

Every instant is written as seconds since the first submission, and every duration
(instants relative to that origin included) is multiplied by ``scale``, so a demo run
at N times speed reads in uncompressed seconds. matplotlib is imported only when a
plot is drawn, so importing this module stays cheap.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from elasticsite import plots
from elasticsite.metrics import Timeline, WorkloadMetrics, worker_usage
from elasticsite.model import CloudSpec, Job, Worker

__all__ = [
    "write_jobs_csv",
    "write_plot",
    "write_summary_csv",
    "write_timeline_csv",
    "write_workers_csv",
]

_PLOT_SUFFIXES = (".png", ".svg")
_DPI = 120


def _number(value: float | None) -> str:
    """A CSV cell for a number: empty when unknown, free of float noise otherwise."""
    if value is None:
        return ""
    rounded = round(value, 6)
    return str(int(rounded)) if rounded == int(rounded) else repr(rounded)


def _since(instant: float | None, origin: float, scale: float) -> str:
    return "" if instant is None else _number((instant - origin) * scale)


def _check_scale(scale: float) -> None:
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")


def write_plot(path: str | Path, timeline: Timeline, title: str, scale: float = 1.0) -> Path:
    """Draw queued and running jobs, live and joined workers over time, as in paper 000's
    reactivity figures; PNG or SVG by the suffix of ``path``. Returns the path written."""
    _check_scale(scale)
    path = Path(path)
    if path.suffix.lower() not in _PLOT_SUFFIXES:
        raise ValueError(
            f"plot path {str(path)!r} must end in one of {', '.join(_PLOT_SUFFIXES)} "
            "(the suffix picks the format)"
        )
    from matplotlib.ticker import MaxNLocator

    fig = plots.figure(8.0, 4.5)
    ax = fig.add_subplot()
    x = timeline.relative(scale)
    # Workers first and wider, so jobs drawn on top stay visible where the counts match.
    series = (
        ("live workers", timeline.live_workers, "tab:blue", "-", 2.8, 0.55),
        ("joined workers", timeline.joined_workers, "navy", "--", 1.4, 1.0),
        ("running jobs", timeline.running, "tab:green", "-", 1.6, 1.0),
        ("queued jobs", timeline.queued, "tab:orange", "-", 1.6, 1.0),
    )
    if len(x):
        for label, values, color, style, width, alpha in series:
            ax.step(
                x, values, where="post", label=label, color=color, ls=style, lw=width, alpha=alpha
            )
        ax.set_xlim(left=min(0.0, float(x[0])), right=max(float(x[-1]), 1.0))
        # Below the axes, so the legend never hides a line.
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4, frameon=False)
    else:
        ax.text(0.5, 0.5, "no events", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("time since first submission (s)")
    ax.set_ylabel("jobs / workers")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    return plots.save(fig, path, _DPI)


def _write_csv(path: str | Path, header: Sequence[str], rows: Iterable[Iterable[object]]) -> Path:
    """``rows`` under ``header`` in the CSV file ``path``, each written as it comes."""
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(header)
        out.writerows(rows)
    return path


def write_timeline_csv(path: str | Path, timeline: Timeline, scale: float = 1.0) -> Path:
    """The step series a plot is drawn from: each row's counts hold until the next row."""
    _check_scale(scale)
    header = ("time", "queued", "running", "live_workers", "joined_workers")
    rows = (
        (
            _number(float(t)),
            int(timeline.queued[i]),
            int(timeline.running[i]),
            int(timeline.live_workers[i]),
            int(timeline.joined_workers[i]),
        )
        for i, t in enumerate(timeline.relative(scale))
    )
    return _write_csv(path, header, rows)


def write_jobs_csv(path: str | Path, jobs: Sequence[Job], scale: float = 1.0) -> Path:
    """One row per job; times in seconds since the first submission, empty when unknown."""
    _check_scale(scale)
    origin = min((j.submitted_at for j in jobs), default=0.0)

    def row(j: Job) -> tuple[object, ...]:
        wait = None if j.started_at is None else (j.started_at - j.submitted_at) * scale
        return (
            j.id,
            j.cores,
            _number(j.walltime * scale),
            _since(j.submitted_at, origin, scale),
            _since(j.started_at, origin, scale),
            _since(j.finished_at, origin, scale),
            _number(wait),
            j.node or "",
            "" if j.exit_code is None else j.exit_code,
        )

    header = (
        "id", "cores", "walltime", "submitted_at", "started_at", "finished_at", "wait", "node",
        "exit_code",
    )  # fmt: skip
    return _write_csv(path, header, map(row, jobs))


def write_workers_csv(
    path: str | Path,
    workers: Sequence[Worker],
    clouds: Mapping[str, CloudSpec] | Iterable[CloudSpec],
    scale: float = 1.0,
    *,
    jobs: Sequence[Job],
    until: float | None = None,
) -> Path:
    """One row per worker: its life, its busy and overhead seconds and what it cost.

    ``jobs`` is needed to know when each worker's node ran work; ``until`` closes the
    life of still-live workers (default: the last instant any record mentions).
    """
    usage = worker_usage(workers, jobs, clouds, until=until, scale=scale)
    starts = [j.submitted_at for j in jobs] or [w.requested_at for w in workers]
    origin = min(starts, default=0.0)
    header = (
        "id", "cloud", "vm_type", "requested_at", "joined_at", "ended_at", "state", "active_s",
        "busy_s", "overhead_s", "cost", "end_cause",
    )  # fmt: skip
    rows = (
        (
            u.id,
            u.cloud,
            u.vm_type,
            _since(u.requested_at, origin, scale),
            _since(u.joined_at, origin, scale),
            _since(u.ended_at, origin, scale),
            u.state.value,
            _number(u.active),
            _number(u.busy),
            _number(u.overhead),
            _number(u.cost),
            u.end_cause or "",
        )
        for u in usage
    )
    return _write_csv(path, header, rows)


def write_summary_csv(path: str | Path, metrics: WorkloadMetrics) -> Path:
    """The summary table (``WorkloadMetrics.to_rows``) as label, value, unit rows."""
    rows = ((label, _number(value), unit) for label, value, unit in metrics.to_rows())
    return _write_csv(path, ("label", "value", "unit"), rows)
