"""How many jobs per second the backfilling schedulers push through a tiny event loop.

Target: 20,000 jobs/s, so that a year-long trace replays in seconds. A seeded
synthetic stream (Poisson arrivals, a quarter serial jobs and the rest powers of
two up to 128 processors, requested times log-uniform from 10 min to 12 h, actual
runtimes a uniform 5-100% of the request) runs through conservative and
selective backfilling from :mod:`elasticsite.batch.backfill` on one machine of
1,152 processors (paper 002's Blue Horizon), then through EASY from
:mod:`elasticsite.batch.scheduling` driven the same way (one pass per instant with
events). The loop is the same for all three: a heap of finish and submit events,
``start_now`` once per instant; each replay is repeated and the fastest run kept
(the machine is shared). Printed last: each scheduler's speed as a ratio to EASY's.

    python benchmarks/backfill_speed.py [--jobs 20000] [--load 0.9] [--seed 1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import time
from collections.abc import Callable
from typing import NamedTuple

from elasticsite.batch.backfill import ConservativeBackfill
from elasticsite.batch.scheduling import easy
from elasticsite.batch.selective import SelectiveBackfill

CAPACITY = 1152


class Job(NamedTuple):
    id: str
    cores: int
    walltime: float
    submit: float
    runtime: float


def workload(count: int, load: float, seed: int) -> list[Job]:
    """The seeded stream; the arrival rate is set so that offered work is ``load`` x capacity."""
    rng = random.Random(seed)
    sizes = [1 if rng.random() < 0.25 else 2 ** rng.randint(1, 7) for _ in range(count)]
    walls = [math.exp(rng.uniform(math.log(600), math.log(43_200))) for _ in range(count)]
    runs = [w * rng.uniform(0.05, 1.0) for w in walls]
    mean_work = sum(s * r for s, r in zip(sizes, runs, strict=True)) / count
    rate = load * CAPACITY / mean_work
    t = 0.0
    jobs = []
    for i in range(count):
        t += rng.expovariate(rate)
        jobs.append(Job(str(i), sizes[i], walls[i], t, runs[i]))
    return jobs


class Stats(NamedTuple):
    seconds: float
    mean_wait: float
    mean_queue: float


def replay(jobs: list[Job], step: Callable[[float, list[Job], list[str]], list[str]]) -> Stats:
    """Drive one scheduler: ``step(now, arrivals, finished) -> started`` once per instant."""
    by_id = {j.id: j for j in jobs}
    events: list[tuple[float, int, str]] = [(j.submit, 1, j.id) for j in jobs]
    heapq.heapify(events)
    waits = 0.0
    queued = 0
    queue_sum = 0
    instants = 0
    began = time.perf_counter()
    while events:
        now = events[0][0]
        arrivals: list[Job] = []
        finished: list[str] = []
        while events and events[0][0] == now:
            _, kind, job_id = heapq.heappop(events)
            if kind:
                arrivals.append(by_id[job_id])
            else:
                finished.append(job_id)
        for job_id in step(now, arrivals, finished):
            job = by_id[job_id]
            waits += now - job.submit
            heapq.heappush(events, (now + job.runtime, 0, job_id))
            queued -= 1
        queued += len(arrivals)
        queue_sum += queued
        instants += 1
    elapsed = time.perf_counter() - began
    return Stats(elapsed, waits / len(jobs), queue_sum / instants)


def backfill_step(
    sched: ConservativeBackfill[str] | SelectiveBackfill[str],
) -> Callable[[float, list[Job], list[str]], list[str]]:
    def step(now: float, arrivals: list[Job], finished: list[str]) -> list[str]:
        for job_id in finished:
            sched.finish(job_id, now)
        for job in arrivals:
            sched.submit(job.id, job.cores, job.walltime, now)
        return sched.start_now(now)

    return step


def easy_step() -> Callable[[float, list[Job], list[str]], list[str]]:
    queue: list[Job] = []
    running: dict[str, tuple[str, int, float]] = {}
    busy = 0

    def step(now: float, arrivals: list[Job], finished: list[str]) -> list[str]:
        nonlocal queue, busy
        for job_id in finished:
            busy -= running.pop(job_id)[1]
        queue.extend(arrivals)
        out = easy(now, queue, [("m", CAPACITY - busy)], list(running.values()))
        if out:
            started = {job_id for job_id, _ in out}
            for job in queue:
                if job.id in started:
                    running[job.id] = ("m", job.cores, now + job.walltime)
                    busy += job.cores
            queue = [job for job in queue if job.id not in started]
        return [job_id for job_id, _ in out]

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--load", type=float, default=0.9, help="offered load, 0..1+")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="replays per scheduler, best kept")
    args = parser.parse_args()
    jobs = workload(args.jobs, args.load, args.seed)
    print(f"{args.jobs} jobs, offered load {args.load}, {CAPACITY} processors, seed {args.seed}")
    runs: dict[str, Callable[[], Callable[[float, list[Job], list[str]], list[str]]]] = {
        "conservative": lambda: backfill_step(ConservativeBackfill[str](CAPACITY)),
        "selective": lambda: backfill_step(SelectiveBackfill[str](CAPACITY)),
        "easy (scheduling.py)": easy_step,
    }
    rates: dict[str, float] = {}
    for name, make in runs.items():
        stats = min((replay(jobs, make()) for _ in range(args.repeat)), key=lambda s: s.seconds)
        rates[name] = len(jobs) / stats.seconds
        print(
            f"{name:>22}: {rates[name]:>9,.0f} jobs/s  ({stats.seconds:.2f} s; "
            f"mean wait {stats.mean_wait / 3600:.2f} h, mean queue {stats.mean_queue:.1f})"
        )
    base = rates["easy (scheduling.py)"]
    print(
        f"speed vs EASY: conservative {rates['conservative'] / base:.2f}x, "
        f"selective {rates['selective'] / base:.2f}x"
    )


if __name__ == "__main__":
    main()
