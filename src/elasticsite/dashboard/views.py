"""What the dashboard shows, computed from the state store: pure functions of what
:class:`~elasticsite.history.samples.HistoryReader` returns and the time now.

Nothing here may overstate. The site is *live* only while the manager keeps sampling:
once it stopped (it says so when it stops cleanly) or no sample came for
``stale_after`` seconds (a few sampling intervals), the page says since when it is
stale. Charts are inline SVG drawn here, with labelled time and value axes; a stretch
without samples longer than ``stale_after`` (the manager was stopped, then started
again) is left blank rather than bridged by a line. A day of one-minute samples is cut
to one point per bucket, the bucket's maximum, so a short peak is not averaged away.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from elasticsite.feasibility import explain
from elasticsite.history.samples import HistoryReader, Sample, WorkerRow
from elasticsite.spend import Budget, Refused, period_bounds, refusal_text

__all__ = ["Chart", "Overview", "age_text", "chart", "overview"]

STATES = ("requested", "booting", "idle", "busy", "draining", "terminating")
"""Worker states in the order of a worker's life, the columns of the workers table."""
POINTS = 240
WIDTH, HEIGHT = 480.0, 120.0
_TIME_STEPS = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800)
"""Seconds between time ticks, the first giving at most :data:`_TIME_TICKS` ticks."""
_TIME_TICKS = 6


@dataclass(frozen=True, slots=True)
class Chart:
    """One line chart: its unbroken stretches (SVG points), lone samples between gaps,
    and its axes: ticks as ``(position, label)`` and each axis's title with its unit."""

    title: str
    unit: str
    segments: list[str]
    dots: list[tuple[float, float]]
    x_ticks: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    x_title: str
    empty: bool


@dataclass(slots=True)
class Overview:
    """Everything the main page shows."""

    site: str
    now: float
    last_at: float | None
    stale: bool
    stopped: bool
    """The manager said it stopped (else a stale page means it has gone quiet)."""
    workers_by_cloud: dict[str, dict[str, int]]
    worker_rows: list[WorkerRow]
    queued_jobs: int
    queued_cores: int
    running_jobs: int
    queue: list[tuple[str, str, int, float, float, str]]
    spend_rate: float
    spend_cap: float | None
    transitions: list[tuple[float, str, str, str, str]]
    currency: str = "USD"
    spent_by_cloud: dict[str, float] = field(default_factory=dict)
    budget: Budget | None = None
    period: tuple[float, float] | None = None
    period_spent: float | None = None
    forecast: float | None = None
    refused: Refused | None = None
    """The budget's refusals of the current period, if any."""
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

    @property
    def spent_total(self) -> float:
        return sum(self.spent_by_cloud.values())

    @property
    def refusal(self) -> str:
        return refusal_text(self.refused, self.currency) if self.refused else ""


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


def _x(t: float, start: float, span: float) -> float:
    return (t - start) / span * WIDTH


def _time_ticks(start: float, end: float) -> list[tuple[float, str]]:
    """Ticks at round local times (every minute, 5 min ... a day), at most six."""
    span = max(end - start, 1.0)
    step = next((s for s in _TIME_STEPS if span / s <= _TIME_TICKS), _TIME_STEPS[-1])
    offset = time.localtime(start).tm_gmtoff
    first = math.ceil((start + offset) / step) * step - offset
    fmt = "%d %b" if step >= 86400 else ("%a %H:%M" if span > 86400 else "%H:%M")
    ticks = []
    t = float(first)
    while t <= end + 1e-6:
        ticks.append((round(_x(t, start, span), 1), time.strftime(fmt, time.localtime(t))))
        t += step
    return ticks


def _value_axis(top: float, whole: bool) -> tuple[float, list[float]]:
    """The value axis' top and its ticks, at round steps (whole ones for counts)."""
    if top <= 0:
        return 1.0, [0.0, 1.0]
    raw = top / 4
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw - 1e-12)
    if whole:
        step = float(max(1, math.ceil(step)))
    n = math.ceil(top / step - 1e-9)
    return n * step, [k * step for k in range(n + 1)]


def _labels(values: list[float]) -> list[str]:
    """Tick labels, with decimals only when a tick needs them."""
    if all(abs(v - round(v)) < 1e-9 for v in values):
        return [f"{v:,.0f}" for v in values]
    return [f"{v:,.2f}" for v in values]


def chart(
    title: str,
    samples: Sequence[Sample],
    value: Callable[[Sample], float],
    start: float,
    end: float,
    *,
    unit: str,
    gap: float,
    whole: bool = True,
) -> Chart:
    """``value`` over [start, end]: at most :data:`POINTS` points, broken where no
    sample came for longer than ``gap`` seconds."""
    span = max(end - start, 1.0)
    # Stretches of samples with no gap longer than ``gap`` between neighbours.
    runs: list[list[Sample]] = []
    for s in samples:
        if s.at < start or s.at > end:
            continue
        if not runs or s.at - runs[-1][-1].at > gap:
            runs.append([])
        runs[-1].append(s)
    stretches: list[list[tuple[float, float]]] = []
    top = 0.0
    for run in runs:
        buckets: dict[int, tuple[float, float]] = {}  # bucket -> (value, time), the max
        for s in run:
            b = min(POINTS - 1, int((s.at - start) / span * POINTS))
            v = value(s)
            if b not in buckets or v > buckets[b][0]:
                buckets[b] = (v, s.at)
        points = [(t, v) for v, t in (buckets[b] for b in sorted(buckets))]
        stretches.append(points)
        top = max([top, *(v for _, v in points)])
    axis_top, ticks = _value_axis(top, whole)

    def y(v: float) -> float:
        return round(HEIGHT - v / axis_top * HEIGHT, 1)

    segments, dots = [], []
    for points in stretches:
        if len(points) == 1:
            t, v = points[0]
            dots.append((round(_x(t, start, span), 1), y(v)))
        else:
            segments.append(" ".join(f"{_x(t, start, span):.1f},{y(v)}" for t, v in points))
    zone = time.strftime("%Z", time.localtime(end)) or "local"
    return Chart(
        title,
        unit,
        segments,
        dots,
        _time_ticks(start, end),
        list(zip([y(v) for v in ticks], _labels(ticks), strict=True)),
        f"time ({zone})",
        not runs,
    )


def overview(
    reader: HistoryReader, now: float, *, hours: float = 6.0, stale_after: float = 180.0
) -> Overview:
    """The main page's content; ``stale`` when the manager said it stopped or the last
    sample is older than ``stale_after`` seconds (the manager is stopped, or stuck)."""
    last = reader.last_sample()
    stopped_at = reader.stopped_at()
    stopped = last is not None and stopped_at is not None and stopped_at >= last.at
    rows = reader.workers()
    by_cloud: dict[str, dict[str, int]] = {}
    for w in rows:
        by_cloud.setdefault(w.cloud, {s: 0 for s in STATES})
        by_cloud[w.cloud][w.state] = by_cloud[w.cloud].get(w.state, 0) + 1
    samples = reader.samples(now - hours * 3600)
    # A history shorter than the window fills the chart instead of hugging its edge.
    start = min(samples[0].at, now - 60.0) if samples else now - hours * 3600
    money = reader.money()
    view = Overview(
        site=reader.site_id() or "?",
        now=now,
        last_at=last.at if last else None,
        stale=last is None or stopped or now - last.at > stale_after,
        stopped=stopped,
        workers_by_cloud=dict(sorted(by_cloud.items())),
        worker_rows=rows,
        queued_jobs=last.queued_jobs if last else 0,
        queued_cores=last.queued_cores if last else 0,
        running_jobs=last.running_jobs if last else 0,
        queue=reader.queue(),
        spend_rate=last.spend_rate if last else 0.0,
        spend_cap=reader.spend_cap(),
        transitions=reader.transitions(),
        currency=money.currency,
        spent_by_cloud=dict(sorted(last.spent.items())) if last else {},
        budget=money.budget,
        unservable=[(j, explain(why), at) for j, why, at in reader.unservable()],
    )
    if money.budget is not None and last is not None:
        view.period = period_bounds(last.at, money.budget.period)
        view.period_spent = last.period_spent
        view.forecast = last.forecast
        r = money.watch.refused
        view.refused = r if r is not None and r.until == view.period[1] else None
    cur = money.currency
    view.charts = [
        chart("Workers", samples, lambda s: s.live_workers, start, now,
              unit="workers", gap=stale_after),
        chart("Queued jobs", samples, lambda s: s.queued_jobs, start, now,
              unit="jobs", gap=stale_after),
        chart("Spend per hour", samples, lambda s: s.spend_rate, start, now,
              unit=f"{cur} per hour", gap=stale_after, whole=False),
        chart("Spent so far", [s for s in samples if s.spent], lambda s: s.spent_total, start,
              now, unit=cur, gap=stale_after, whole=False),
    ]  # fmt: skip
    return view
