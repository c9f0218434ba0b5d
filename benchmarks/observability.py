"""What watching a site costs: metrics on the decision step, and the dashboard's page.

Peer figures: the targets set for this work. Counting a step for Prometheus and the
dashboard's history must add under 5% to a step at 100,000 queued jobs and 10,000
workers (benchmarks/decision_loop.py's largest size, same in-memory batch system and
cloud); the dashboard's main page must render in under 200 ms for a site of 10,000
workers with a day of one-minute history.

Both managers run in this process and are stepped alternately, so they see the same
machine; the figure is the difference of their median steps. The page is asked for
through the server's ASGI application (Starlette's test client), with the admin token,
from a state store holding 10,000 workers, 20,000 transitions and 1,440 samples.

    python benchmarks/observability.py [--repeat 21]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from prometheus_client import generate_latest

sys.path.insert(0, str(Path(__file__).parent))
from decision_loop import build

from elasticsite.history.samples import HistoryWriter
from elasticsite.manager.exporter import ManagerMetrics
from elasticsite.manager.store import StateStore
from elasticsite.model import CloudSpec, Transition, WorkerState

JOBS, WORKERS = 100_000, 10_000
STEP_TARGET = 0.05
PAGE_TARGET = 0.200


def step_overhead(tmp: Path, repeat: int) -> tuple[float, float, float]:
    plain = build(JOBS, WORKERS, tmp / "a", "bursts")
    watched = build(JOBS, WORKERS, tmp / "b", "bursts")
    spec = CloudSpec("bench", max_instances=WORKERS, price_per_hour=0.1)
    watched.metrics = ManagerMetrics([spec], spend_cap=500.0)
    watched.observers = [HistoryWriter(watched.store.path, [spec], 500.0, every=60.0)]
    for m in (plain, watched):
        m._guarded_step()  # warm-up
    a, b = [], []
    for _ in range(repeat):
        for manager, times in ((plain, a), (watched, b)):
            t0 = time.perf_counter()
            manager._guarded_step()
            times.append(time.perf_counter() - t0)
    assert watched.metrics is not None
    t0 = time.perf_counter()
    text = generate_latest(watched.metrics.registry)
    scrape = time.perf_counter() - t0
    print(f"scrape of the manager's /metrics: {scrape * 1e3:.1f} ms, {len(text):,} bytes "
          "(on the listener's thread, not the step's)")  # fmt: skip
    for m in (plain, watched):
        m.dispatch.pool.shutdown()
    return statistics.median(a), statistics.median(b), scrape


def page_time(tmp: Path, repeat: int) -> float:
    from fastapi.testclient import TestClient

    from elasticsite.dashboard.routes import Dashboard
    from elasticsite.server import create_app

    db = tmp / "state" / "manager.db"
    build(1, WORKERS, tmp / "state-build", "bursts")  # a store of 10,000 busy workers ...
    (tmp / "state").mkdir()
    src = StateStore(tmp / "state-build" / "state-1.db")
    store = StateStore(db)
    with store.transaction():
        for rec in src.load():
            store.save(rec)
        now = time.time()
        store.set_meta("site_id", "bench")
        store.record([
            Transition(f"w{i % WORKERS}", WorkerState.BOOTING, WorkerState.BUSY,
                       now - 86400 + i * 4, "joined")
            for i in range(2 * WORKERS)
        ])  # fmt: skip
    writer = HistoryWriter(db, [CloudSpec("bench", max_instances=WORKERS)], 500.0)
    workers = json.dumps({"bench": {"busy": WORKERS}})
    with writer.db.transaction():
        writer.db.executemany(
            "INSERT INTO site_samples VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(now - 86400 + 60 * i, JOBS, JOBS, WORKERS, WORKERS, workers, 1000.0,
              json.dumps({"by_cloud": {"bench": 1000.0 * i / 60}})) for i in range(1440)],
        )  # fmt: skip
        writer.db.executemany(
            "INSERT INTO site_queue VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(i, str(i), "alice", 1, 3600.0, now - 100, "default") for i in range(100)],
        )
    app = create_app(tmp / "broker", admin_token="t" * 43, dashboard=Dashboard(db))
    client = TestClient(app)
    headers = {"Authorization": "Bearer " + "t" * 43}
    for path in ("/dashboard", "/dashboard/live"):
        assert client.get(path, headers=headers).status_code == 200
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = client.get("/dashboard", headers=headers)
        times.append(time.perf_counter() - t0)
        assert r.status_code == 200 and "10000" in r.text
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for d in ("a", "b"):
            (base / d).mkdir()
        plain, watched, _ = step_overhead(base, args.repeat)
        page = page_time(base, args.repeat)
    overhead = (watched - plain) / plain
    print(f"step at {JOBS:,} queued jobs, {WORKERS:,} workers: {plain * 1e3:.2f} ms without, "
          f"{watched * 1e3:.2f} ms with metrics and history "
          f"(medians of {args.repeat})")  # fmt: skip
    print(f"dashboard main page, {WORKERS:,} workers and a day of history: "
          f"{page * 1e3:.1f} ms median of {args.repeat}")  # fmt: skip
    print(
        f"metrics overhead on the step: {overhead * 100:+.2f}% (target under "
        f"{STEP_TARGET * 100:.0f}%); page: {page / PAGE_TARGET:.2f} of the 200 ms target"
    )


if __name__ == "__main__":
    main()
