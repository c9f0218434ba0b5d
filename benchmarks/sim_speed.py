"""Simulator speed against AccaSim, on one trace both simulators read from the same file.

Peer: AccaSim 1.1.3 (PyPI ``accasim``), ``EASYBackfilling`` with ``FirstFit`` and
``FirstInFirstOut``, run by ``benchmarks/accasim_peer.py`` in its own virtualenv. The
trace is a Lublin99 workload on 144 nodes x 8 cores, normalised once (whole seconds,
positive memory, first submission at 1 s) so AccaSim's reader accepts it, and read by
both. Ours is timed including SWF parsing; AccaSim's parsing is inside its loop.

Figures printed, targets from the project's simulator issue:
* site-only EASY jobs/s including parsing (target >= 100,000), and its ratio to
  AccaSim's EASY (target >= 50x);
* site-only conservative and selective backfilling jobs/s (target >= 20,000);
* a 250,000-job Lublin workload with EASY and a bursting strategy (target < 10 s);
* FCFS mean wait of both simulators on the same trace (must agree).

AccaSim 1.1.3's EASY does not protect the head job's reservation (see
accasim_peer.py), so only its FCFS waits are comparable; its EASY is a speed peer.

    python benchmarks/sim_speed.py [--jobs 20000] [--skip-peer]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accasim_peer import lublin_swf, normalise_swf, run_accasim

from elasticsite.policies.strategies import Strategy
from elasticsite.sim.cloud import CloudModel
from elasticsite.sim.replay import replay
from elasticsite.traces.lublin import generate
from elasticsite.traces.swf import read_swf

NODES, CORES = 144, 8
PROCS = NODES * CORES


def site_only(scheduler: str) -> Strategy:
    """A strategy set that never uses the cloud, with the given site scheduler."""
    cls = type(
        f"SiteOnly_{scheduler}", (Strategy,), {"name": scheduler, "site_scheduler": scheduler}
    )
    return cls()


def ours(path: Path, scheduler: str, repeat: int) -> tuple[float, float, int]:
    """Best wall time (parse + replay), mean wait and job count of a site-only replay."""
    best = float("inf")
    wait = 0.0
    n = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        trace = read_swf(path)
        result = replay(
            trace.submit_time,
            trace.allocated_processors,
            trace.run_time,
            trace.requested_time,
            site_procs=PROCS,
            strategy=site_only(scheduler),
        )
        best = min(best, time.perf_counter() - t0)
        jobs = result.jobs
        wait = float(np.mean(jobs.start - jobs.submit))
        n = len(trace)
    return best, wait, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-peer", action="store_true", help="do not run AccaSim")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "lublin.swf"
        clean = Path(tmp) / "lublin-clean.swf"
        load = lublin_swf(raw, args.jobs, PROCS, seed=1)
        normalise_swf(raw, clean, max_processors=PROCS)
        print(f"trace: {args.jobs:,} Lublin99 jobs on {NODES}x{CORES} processors, load {load:.2f}")

        easy_s, _, n = ours(clean, "easy", args.repeat)
        fcfs_s, fcfs_wait, _ = ours(clean, "fcfs", args.repeat)
        cons_s, _, _ = ours(clean, "conservative", 1)
        sel_s, _, _ = ours(clean, "selective", 1)
        print(f"ours  EASY          {n / easy_s:>10,.0f} jobs/s  (parse + replay {easy_s:.3f} s)")
        print(f"ours  FCFS          {n / fcfs_s:>10,.0f} jobs/s  mean wait {fcfs_wait:,.1f} s")
        print(f"ours  conservative  {n / cons_s:>10,.0f} jobs/s")
        print(f"ours  selective     {n / sel_s:>10,.0f} jobs/s")

        big = generate(250_000, machine_size=PROCS, seed=2)
        cloud = CloudModel("cloud", vm_limit=PROCS, price_per_hour=0.10, billing_increment=3600)
        t0 = time.perf_counter()
        burst = replay(
            big.submit_time,
            big.processors,
            big.runtime,
            big.requested_time,
            site_procs=PROCS,
            strategy="shortest_queue",
            cloud=cloud,
        )
        big_s = time.perf_counter() - t0
        on_cloud = int(np.sum(burst.jobs.where == 1))
        print(
            f"ours  250,000 jobs, EASY + shortest-queue bursting: {big_s:.2f} s "
            f"({on_cloud:,} jobs on the cloud; target < 10 s)"
        )

        if args.skip_peer:
            return
        peer_easy = run_accasim(clean, "easy", NODES, CORES, timeout=1800, outputs=False)
        peer_fcfs = run_accasim(clean, "fcfs", NODES, CORES, timeout=1800, outputs=False)
        if peer_easy is None or peer_fcfs is None:
            print("AccaSim unavailable: peer figures skipped")
            return
        acc_easy = peer_easy["jobs"] / peer_easy["seconds"]
        acc_fcfs = peer_fcfs["jobs"] / peer_fcfs["seconds"]
        print(f"AccaSim EASY        {acc_easy:>10,.0f} jobs/s")
        peer_wait = float(peer_fcfs["mean_wait"])
        print(f"AccaSim FCFS        {acc_fcfs:>10,.0f} jobs/s  mean wait {peer_wait:,.1f} s")
        agree = abs(peer_fcfs["mean_wait"] - fcfs_wait) <= 1e-6 * max(1.0, fcfs_wait)
        print(f"FCFS mean waits agree: {'yes' if agree else 'NO'} (ours {fcfs_wait:,.1f} s)")
        print(f"FCFS speed ratio, ours / AccaSim: {(n / fcfs_s) / acc_fcfs:.1f}x")
        print(f"EASY speed ratio, ours / AccaSim (target >= 50x): {(n / easy_s) / acc_easy:.1f}x")


if __name__ == "__main__":
    main()
