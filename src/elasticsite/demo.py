"""A live elastic site on this machine: a built-in workload through the real manager.

Everything is real (worker processes, the SQLite batch queue, the manager loop with
its thread pool); only time is compressed by ``speed``: boot delays, job run times,
walltimes and the loop interval are divided by it, and the metrics are reported
multiplied back, in the paper's seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from elasticsite import policies
from elasticsite.batch.base import JobRequest
from elasticsite.batch.local import LocalBatch
from elasticsite.config import SiteConfig, parse_config
from elasticsite.manager.report import StepReport
from elasticsite.manager.site import open_site
from elasticsite.metrics import WorkloadMetrics, timeline, workload_metrics
from elasticsite.model import Job
from elasticsite.workloads import get_workload

__all__ = ["DemoOptions", "DemoProgress", "DemoResult", "demo_config", "run_demo"]


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What to run; every duration is in uncompressed seconds."""

    policy: str = "bursts"
    workload: str = "workload1"
    speed: float = 4.0
    max_instances: int = 10
    boot_time: float = 60.0
    boot_jitter: float = 10.0
    image_transfer: float = 0.0
    """Seconds of a boot alone that move its image over a link the boots share (paper
    000's contention; ``docs/boot-model.md``): 0, none."""
    parallel_boots: int = 0
    """Boots in progress at once, the rest waiting (0: no limit)."""
    shutdown_time: float = 6.0
    interval: float = 10.0
    price_per_hour: float = 0.10
    billing_increment: float = 1.0
    dedicated_workers: int = 10
    seed: int = 0
    out_dir: Path = Path("demo-out")
    time_limit: float = 3 * 3600.0


@dataclass(slots=True)
class DemoProgress:
    """A view of the run for a progress display (times uncompressed)."""

    elapsed: float
    submitted: int
    total: int
    queued: int
    running: int
    done: int
    workers: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class DemoResult:
    metrics: WorkloadMetrics
    plot: Path
    jobs_csv: Path
    workers_csv: Path
    state_dir: Path
    wall_seconds: float


def demo_config(opts: DemoOptions, state_dir: Path) -> SiteConfig:
    """The site a demo runs: one local cloud shaped like paper 000's Nimbus cloud."""
    s = opts.speed
    return parse_config(
        {
            "manager": {
                "site_id": "demo",
                "state_dir": str(state_dir),
                "interval": opts.interval / s,
                "stall_timeout": 600.0 / s,
                "heartbeat_timeout": max(60.0 / s, 5.0),
                "retry_backoff": 5.0 / s,
                "on_shutdown": "drain",
            },
            "policy": {
                "name": opts.policy,
                "dedicated_workers": opts.dedicated_workers,
                "billing_margin": 120.0 / s,
            },
            "batch": {"scheduler": "easy"},
            "clouds": [
                {
                    "name": "nimbus",
                    "max_instances": opts.max_instances,
                    "price_per_hour": opts.price_per_hour,
                    "billing_increment": opts.billing_increment / s,
                    "boot_time": opts.boot_time / s,
                    "shutdown_time": opts.shutdown_time / s,
                    "options": {
                        "boot_jitter": opts.boot_jitter / s,
                        "image_transfer": opts.image_transfer / s,
                        "parallel_boots": opts.parallel_boots,
                        "poll_interval": min(1.0, max(0.05, 1.0 / s)),
                        "seed": opts.seed,
                    },
                }
            ],
        },
        source="demo",
    )


def run_demo(
    opts: DemoOptions, on_progress: Callable[[DemoProgress], None] | None = None
) -> DemoResult:
    """Run the workload to completion and every worker to termination, then report."""
    from elasticsite.report import write_jobs_csv, write_plot, write_workers_csv

    arrivals = get_workload(opts.workload, opts.seed)
    s = opts.speed
    tag = f"{opts.workload}-{opts.policy}"
    out = opts.out_dir
    out.mkdir(parents=True, exist_ok=True)
    state_dir = (out / f"state-{tag}-{int(time.time())}").resolve()
    config = demo_config(opts, state_dir)
    site = open_site(config)
    manager = site.manager()
    batch = site.batch
    assert isinstance(batch, LocalBatch)

    latest: list[StepReport] = []
    loop = threading.Thread(target=manager.run, kwargs={"on_step": latest.append}, daemon=True)
    submitted = 0

    def submit_due(elapsed: float) -> None:
        nonlocal submitted
        while submitted < len(arrivals) and arrivals[submitted].at / s <= elapsed:
            a = arrivals[submitted]
            batch.submit(
                JobRequest(
                    command=["sleep", f"{a.runtime / s:.3f}"],
                    cores=a.cores,
                    walltime=a.walltime / s,
                )
            )
            submitted += 1

    preboot = policies.preboot_workers(opts.policy, manager.settings)
    if preboot:
        # The papers' baseline: the pool is booted and joined before the first job.
        loop.start()
        deadline = time.monotonic() + opts.time_limit / s
        while time.monotonic() < deadline:
            report = latest[-1] if latest else None
            if report is not None and policies.preboot_done(report.workers, preboot):
                break
            time.sleep(min(0.25, config.manager.interval / 2))
        submit_due(0.0)
        start = time.monotonic()
    else:
        # Jobs due at the start are queued before the manager's first look, as in the
        # paper.
        submit_due(0.0)
        start = time.monotonic()
        loop.start()
    hard_stop = start + opts.time_limit / s
    quiet, last_seen = 0, 0.0
    try:
        while True:
            now = time.monotonic()
            submit_due(now - start)
            counts = batch.counts()
            done = counts.get("completed", 0) + counts.get("failed", 0)
            report = latest[-1] if latest else None
            live = sum(
                n for k, n in (report.workers.items() if report else ()) if k not in ("terminated",)
            )
            if on_progress is not None:
                on_progress(
                    DemoProgress(
                        elapsed=(now - start) * s,
                        submitted=submitted,
                        total=len(arrivals),
                        queued=counts.get("queued", 0),
                        running=counts.get("running", 0),
                        done=done,
                        workers=dict(report.workers) if report else {},
                    )
                )
            finished = submitted == len(arrivals) and done == len(arrivals)
            if finished and report is not None:
                if live == 0:
                    break
                # Policies with a floor (steady stream, dedicated) keep idle workers
                # for ever: once only idle ones are left and three decisions passed
                # without a change, the run is over and the shutdown drains them.
                if report.at != last_seen:
                    last_seen = report.at
                    quiet = quiet + 1 if set(report.workers) == {"idle"} else 0
                    if quiet >= 3 and not report.decision:
                        break
            if now > hard_stop:
                break
            time.sleep(min(0.25, config.manager.interval / 2))
    finally:
        manager.stop()
        loop.join()

    jobs: list[Job] = batch.jobs()
    workers = [r.worker for r in site.store.load(include_done=True, history=True)]
    # Bill in uncompressed time: the metrics scale every duration back by ``speed``.
    specs = [
        replace(spec, price_per_hour=opts.price_per_hour, billing_increment=opts.billing_increment)
        for spec in config.cloud_specs()
    ]
    metrics = workload_metrics(jobs, workers, specs, scale=s)
    tl = timeline(jobs, workers)
    plot = write_plot(
        out / f"{tag}.png", tl, f"{opts.policy} policy, {opts.workload} (x{s:g} speed)", scale=s
    )
    jobs_csv = write_jobs_csv(out / f"{tag}-jobs.csv", jobs, scale=s)
    workers_csv = write_workers_csv(out / f"{tag}-workers.csv", workers, specs, scale=s, jobs=jobs)
    return DemoResult(metrics, plot, jobs_csv, workers_csv, state_dir, time.monotonic() - start)
