"""What the dashboard shows, computed from the state store: pure functions of what
:class:`~.history.HistoryReader` returns and the time now.

Charts are inline SVG polylines drawn here (a few hundred points at most: a day of
one-minute samples is cut to one point per bucket, the bucket's maximum, so a short
peak is not averaged away); the templates only place them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from elasticsite.dashboard.history import HistoryReader, Sample, WorkerRow
from elasticsite.feasibility import explain

__all__ = ["Chart", "Overview", "age_text", "overview"]

STATES = ("requested", "booting", "idle", "busy", "draining", "terminating")
"""Worker states in the order of a worker's life, the columns of the workers table."""
POINTS = 240
WIDTH, HEIGHT = 480.0, 120.0


@dataclass(frozen=True, slots=True)
class Chart:
    """One line chart: its title, the polyline's points and the axis labels."""

    title: str
    points: str
    top: str
    start: str
    end: str
    empty: bool


@dataclass(slots=True)
class Overview:
    """Everything the main page shows."""

    site: str
    now: float
    last_at: float | None
    stale: bool
    workers_by_cloud: dict[str, dict[str, int]]
    worker_rows: list[WorkerRow]
    queued_jobs: int
    queued_cores: int
    running_jobs: int
    queue: list[tuple[str, str, int, float, float, str]]
    spend_rate: float
    spend_cap: float | None
    transitions: list[tuple[float, str, str, str, str]]
    charts: list[Chart] = field(default_factory=list)
    unservable: list[tuple[str, str, float]] = field(default_factory=list)
    """Queued jobs no cloud can run: (job, why in words, since), as last marked."""

    @property
    def why(self) -> dict[str, str]:
        """Why a queued job gets no worker, by job id (jobs with no mark left out)."""
        return {job: why for job, why, _ in self.unservable}

    @property
    def spend_share(self) -> float | None:
        """The spend rate as a share of the cap (None without a cap)."""
        if not self.spend_cap:
            return None
        return min(1.0, self.spend_rate / self.spend_cap)


def age_text(seconds: float) -> str:
    """``12 s``, ``5 min``, ``3 h 20 min``, ``2 d 4 h``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _clock(t: float) -> str:
    import time

    return time.strftime("%H:%M", time.localtime(t))


def chart(
    title: str,
    samples: Sequence[Sample],
    value: Callable[[Sample], float],
    start: float,
    end: float,
) -> Chart:
    """A polyline of ``value`` over [start, end], at most :data:`POINTS` points."""
    span = max(end - start, 1.0)
    buckets: dict[int, float] = {}
    for s in samples:
        b = min(POINTS - 1, int((s.at - start) / span * POINTS))
        v = value(s)
        if v > buckets.get(b, float("-inf")):
            buckets[b] = v
    top = max(buckets.values(), default=0.0)
    scale = HEIGHT / top if top > 0 else 0.0
    points = " ".join(
        f"{b / (POINTS - 1) * WIDTH:.1f},{HEIGHT - v * scale:.1f}"
        for b, v in sorted(buckets.items())
    )
    label = f"{top:,.2f}" if top and top < 10 and top != int(top) else f"{top:,.0f}"
    return Chart(title, points, label, _clock(start), _clock(end), not buckets)


def overview(
    reader: HistoryReader, now: float, *, hours: float = 6.0, stale_after: float = 180.0
) -> Overview:
    """The main page's content; ``stale`` when the last sample is older than
    ``stale_after`` seconds (the manager is stopped, or stuck)."""
    last = reader.last_sample()
    rows = reader.workers()
    by_cloud: dict[str, dict[str, int]] = {}
    for w in rows:
        by_cloud.setdefault(w.cloud, {s: 0 for s in STATES})
        by_cloud[w.cloud][w.state] = by_cloud[w.cloud].get(w.state, 0) + 1
    samples = reader.samples(now - hours * 3600)
    # A history shorter than the window fills the chart instead of hugging its edge.
    start = min(samples[0].at, now - 60.0) if samples else now - hours * 3600
    view = Overview(
        site=reader.site_id() or "?",
        now=now,
        last_at=last.at if last else None,
        stale=last is None or now - last.at > stale_after,
        workers_by_cloud=dict(sorted(by_cloud.items())),
        worker_rows=rows,
        queued_jobs=last.queued_jobs if last else 0,
        queued_cores=last.queued_cores if last else 0,
        running_jobs=last.running_jobs if last else 0,
        queue=reader.queue(),
        spend_rate=last.spend_rate if last else 0.0,
        spend_cap=reader.spend_cap(),
        transitions=reader.transitions(),
        unservable=[(j, explain(why), at) for j, why, at in reader.unservable()],
    )
    view.charts = [
        chart("Workers", samples, lambda s: s.live_workers, start, now),
        chart("Queued jobs", samples, lambda s: s.queued_jobs, start, now),
        chart("Spend per hour", samples, lambda s: s.spend_rate, start, now),
    ]
    return view
