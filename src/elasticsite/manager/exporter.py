"""The manager's Prometheus metrics, and the small HTTP listener that serves them.

Off by default; ``[manager] metrics_port`` turns the listener on (on
``metrics_address``, 127.0.0.1 unless set). Names follow Prometheus' conventions:
``elasticsite_`` prefix, base units (seconds), ``_total`` on counters.

Counted on the loop thread after each step, in O(what the step changed):

* ``elasticsite_launches_total{cloud}``, ``elasticsite_launch_retries_total{cloud}``
* ``elasticsite_terminations_total{cloud,cause}``
* ``elasticsite_worker_failures_total{cloud,cause}``, ``elasticsite_stalls_total{cloud}``
* ``elasticsite_step_duration_seconds`` (histogram), ``elasticsite_step_errors_total``,
  ``elasticsite_last_step_timestamp_seconds``
* ``elasticsite_budget_refused_launches_total{cloud}``: launches the budget held back

Read from the last step's report when Prometheus scrapes (so a step never pays for
them): ``elasticsite_workers{cloud,state}``, ``elasticsite_queued_jobs{group}``,
``elasticsite_queued_cores{group}``, ``elasticsite_running_jobs{group}``,
``elasticsite_running_cores{group}`` (a group is the jobs' partition, ``default``
without one), ``elasticsite_spend_rate_per_hour`` and
``elasticsite_spend_cap_per_hour``, ``elasticsite_spent_total{cloud,currency}`` (a
counter: what the workers have cost so far under each cloud's billing rule, finished
ones included, kept across restarts), and with a budget
``elasticsite_budget{period,currency}``, ``elasticsite_budget_spent{period,currency}``
(spent in the current period) and ``elasticsite_budget_forecast{period,currency}``,
and ``elasticsite_jobs_unservable`` (queued jobs no cloud can run, for which nothing is
launched; ``elasticsite queue`` says why). Every HELP text names the site's currency
(``[site] currency``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from elasticsite.model import Cause, CloudSpec, Job, WorkerState
from elasticsite.spend import Budget

if TYPE_CHECKING:
    from elasticsite.manager.report import StepReport

__all__ = ["ManagerMetrics", "serve_metrics"]

disable_created_metrics()  # no ``_created`` series: they double what is scraped for nothing

S = WorkerState
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_PAID = (S.REQUESTED, S.BOOTING, S.IDLE, S.BUSY, S.DRAINING)
"""States in which a worker is billed (a terminating one is on its way out)."""


def _group(job: Job) -> str:
    return job.attributes.get("partition", "") or "default"


class ManagerMetrics:
    """Every metric of one manager, in a registry of its own."""

    def __init__(
        self,
        specs: Sequence[CloudSpec],
        spend_cap: float | None = None,
        registry: CollectorRegistry | None = None,
        *,
        currency: str = "USD",
        budget: Budget | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.prices = {c.name: c.price_per_hour for c in specs}
        self.spend_cap = spend_cap
        self.currency = currency
        self.budget = budget
        r = self.registry
        self.launches = Counter(
            "elasticsite_launches", "Workers asked of a cloud", ["cloud"], registry=r
        )
        self.retries = Counter(
            "elasticsite_launch_retries",
            "Launches tried again after a failed attempt",
            ["cloud"],
            registry=r,
        )
        self.terminations = Counter(
            "elasticsite_terminations",
            "Workers being terminated, by why",
            ["cloud", "cause"],
            registry=r,
        )
        self.failures = Counter(
            "elasticsite_worker_failures",
            "Workers given up as failed, by why",
            ["cloud", "cause"],
            registry=r,
        )
        self.stalls = Counter(
            "elasticsite_stalls", "Workers that never joined in time", ["cloud"], registry=r
        )
        self.step_seconds = Histogram(
            "elasticsite_step_duration_seconds",
            "Time one decision step took",
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.step_errors = Counter(
            "elasticsite_step_errors", "Problems a step reported", registry=r
        )
        self.refused = Counter(
            "elasticsite_budget_refused_launches",
            "Launches the budget held back (their forecast spend would pass it)",
            ["cloud"],
            registry=r,
        )
        self.last_step = Gauge(
            "elasticsite_last_step_timestamp_seconds",
            "When the last step ran (Unix time)",
            registry=r,
        )
        self._report: StepReport | None = None
        self._lock = threading.Lock()
        r.register(_Scraped(self))

    def observe(self, report: StepReport) -> None:
        """Count what one step did (on the loop thread, after the step)."""
        clouds = report.worker_clouds
        for t in report.transitions:
            cloud = clouds.get(t.worker_id, "")
            cause = str(t.cause)
            if t.from_state is None and t.to_state is S.REQUESTED:
                self.launches.labels(cloud).inc()
            elif t.to_state is S.TERMINATING:
                self.terminations.labels(cloud, cause).inc()
            elif t.to_state is S.FAILED:
                self.failures.labels(cloud, cause).inc()
                if t.cause == Cause.STALLED:
                    self.stalls.labels(cloud).inc()
        for cloud in report.retried:
            self.retries.labels(cloud).inc()
        for refusal in report.decision.refused:
            self.refused.labels(refusal.launch.cloud).inc(refusal.launch.count)
        if report.errors:
            self.step_errors.inc(len(report.errors))
        self.step_seconds.observe(report.total_seconds)
        self.last_step.set(report.at)
        with self._lock:
            self._report = report

    def last_report(self) -> StepReport | None:
        with self._lock:
            return self._report


class _Scraped(Collector):
    """The gauges computed from the last step's report when Prometheus asks."""

    def __init__(self, metrics: ManagerMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return []  # computed at collection; nothing to check at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        m = self.metrics
        report = m.last_report()
        workers = GaugeMetricFamily(
            "elasticsite_workers", "Workers by cloud and state", labels=["cloud", "state"]
        )
        counts: Mapping[tuple[str, str], int] = report.worker_counts if report else {}
        for (cloud, state), count in sorted(counts.items()):
            workers.add_metric([cloud, state], count)
        yield workers
        spend = sum(
            m.prices.get(cloud, 0.0) * count
            for (cloud, state), count in counts.items()
            if S(state) in _PAID
        )
        cur = m.currency
        rate = GaugeMetricFamily(
            "elasticsite_spend_rate_per_hour",
            f"What the site's workers cost per hour now, in {cur}",
        )
        rate.add_metric([], spend)
        yield rate
        if m.spend_cap is not None:
            cap = GaugeMetricFamily(
                "elasticsite_spend_cap_per_hour", f"The site's spend cap, in {cur} per hour"
            )
            cap.add_metric([], m.spend_cap)
            yield cap
        yield from _money(m, report)
        unservable = GaugeMetricFamily(
            "elasticsite_jobs_unservable",
            "Queued jobs no cloud can run (nothing is launched for them)",
        )
        unservable.add_metric([], len(report.unservable) if report else 0)
        yield unservable
        snapshot = report.snapshot if report else None
        for name, help_, jobs in (
            ("queued", "Jobs waiting", snapshot.queued if snapshot else ()),
            ("running", "Jobs running", snapshot.running if snapshot else ()),
        ):
            n: dict[str, int] = {}
            cores: dict[str, int] = {}
            for job in jobs:
                g = _group(job)
                n[g] = n.get(g, 0) + 1
                cores[g] = cores.get(g, 0) + job.cores
            fam = GaugeMetricFamily(
                f"elasticsite_{name}_jobs", f"{help_}, by group", labels=["group"]
            )
            fam_c = GaugeMetricFamily(
                f"elasticsite_{name}_cores", f"Cores of the jobs {name}, by group", labels=["group"]
            )
            for g in sorted(n):
                fam.add_metric([g], n[g])
                fam_c.add_metric([g], cores[g])
            yield fam
            yield fam_c


def _money(m: ManagerMetrics, report: StepReport | None) -> Iterator[Any]:
    """What was spent (a counter: it only grows, and starts again where the store left
    it after a restart), and the budget's amount, spent part and forecast."""
    cur = m.currency
    spent = report.spent() if report is not None and report.spent is not None else None
    total = CounterMetricFamily(
        "elasticsite_spent",
        f"What the site's workers have cost so far under each cloud's billing rule, in {cur}",
        labels=["cloud", "currency"],
    )
    for cloud, amount in sorted((spent.by_cloud if spent else {}).items()):
        total.add_metric([cloud, cur], amount)
    yield total
    budget = m.budget
    if budget is None:
        return
    for name, help_, value in (
        ("elasticsite_budget", f"The site's budget per {budget.period} (UTC), in {cur}",
         budget.amount),
        ("elasticsite_budget_spent", f"What was spent in the budget's current period, in {cur}",
         spent.period_total if spent else None),
        ("elasticsite_budget_forecast",
         f"What the budget's period will have cost by its end at this rate, in {cur}",
         report.forecast() if report is not None and report.forecast is not None else None),
    ):  # fmt: skip
        fam = GaugeMetricFamily(name, help_, labels=["period", "currency"])
        if value is not None:
            fam.add_metric([budget.period, cur], value)
        yield fam


def serve_metrics(metrics: ManagerMetrics, address: str, port: int) -> Any:
    """Serve ``/metrics`` on ``address:port`` from a daemon thread; the server (call
    ``shutdown()`` to stop it)."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=address, registry=metrics.registry)
    return server
