"""One full manager iteration (sense, reconcile, snapshot, policy, act) at scale.

Peer figure: paper 001's decision engine ran every 5 s; our budget is 1% of that,
50 ms median at 100,000 queued jobs and 10,000 workers, growing no worse than
linearly. The batch system and the clouds answer from memory with pre-built
reports (what an adapter returns), so the time measured is the manager's own:
reconciling every worker against cloud and batch reports, building the snapshot
and its aggregates over every queued job, the policy and the decision.

    python benchmarks/decision_loop.py [--repeat 15] [--policy bursts]

Absolute times on a shared machine drift from day to day, so a change is judged
against an older commit measured in the same run: ``--against e595074`` exports that
commit's ``src/`` (``git archive``) into a temporary directory and runs this same
benchmark on it and on the current tree, each in a process of its own, in the order
current, old, old, current (a drift of the machine during the run weighs on both
alike), ``--rounds`` times (one process's times can sit 20% off another's of the same
tree, so the sides take the median over several); the ratio of the medians comes
last, with that of the CPU times (which a busy machine disturbs less than the wall
clock). ``--profile DIR`` writes each side's
cProfile of its timed steps there and prints the functions that took most time.

    python benchmarks/decision_loop.py --against e595074 [--largest] [--rounds 3] [--profile /tmp/p]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import elasticsite
from elasticsite import policies
from elasticsite.batch.base import BatchView, JobRequest, Node, NodeState
from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, Instance, InstanceState
from elasticsite.config import ManagerConfig
from elasticsite.manager.loop import Manager
from elasticsite.manager.store import StateStore, WorkerRecord
from elasticsite.model import CloudSpec, Job, JobState, Worker, WorkerState

PERIOD = 5.0  # paper 001's decision period, seconds
SIZES = [(1_000, 100), (10_000, 1_000), (100_000, 10_000)]


class MemoryBatch:
    """Answers with a pre-built view, as an adapter would after parsing its command."""

    def __init__(self, view: BatchView) -> None:
        self.view = view

    def snapshot(self) -> BatchView:
        return BatchView(self.view.taken_at, self.view.queued, self.view.running, self.view.nodes)

    def add_node(self, name: str, cores: int, pool: str = "") -> None: ...
    def drain(self, name: str, reason: str) -> None: ...
    def undrain(self, name: str) -> None: ...
    def remove_node(self, name: str) -> None: ...
    def submit(self, request: JobRequest) -> str:
        return "0"

    def set_priority(self, job_id: str, priority: int) -> None: ...
    def move_to_front(self, job_id: str) -> None: ...
    def preempt(self, job_id: str) -> None: ...
    def hold(self, job_id: str) -> None: ...
    def release(self, job_id: str) -> None: ...


class MemoryCloud:
    name = "bench"

    def __init__(self, instances: list[Instance]) -> None:
        self.instances = instances

    def launch(self, *_: object) -> list[Instance]:
        return []  # it starts nothing: only the manager's own work is timed

    def describe(self) -> list[Instance]:
        return list(self.instances)

    def terminate(self, instance_ids: Sequence[str]) -> None: ...


def build(jobs: int, workers: int, tmp: Path, policy: str) -> Manager:
    now = time.time()
    queued = [Job(str(i), 1, 3600.0, now - 100.0) for i in range(jobs)]
    running = [
        Job(f"r{i}", 1, 3600.0, now - 200.0, JobState.RUNNING, started_at=now - 50, node=f"w{i}")
        for i in range(workers)
    ]
    nodes = [Node(f"w{i}", 1, NodeState.BUSY, running_jobs=1, free_cores=0) for i in range(workers)]
    instances = [
        Instance(f"i-{i}", f"w{i}", InstanceState.RUNNING, {SITE_TAG: "bench", WORKER_TAG: f"w{i}"})
        for i in range(workers)
    ]
    store = StateStore(tmp / f"state-{jobs}.db")
    with store.transaction():
        for i in range(workers):
            w = Worker(f"w{i}", "bench", "small", 1, now - 300, WorkerState.BUSY, f"i-{i}")
            w.running_jobs = 1
            store.save(WorkerRecord(w))
    # Full cloud: the policy wants more than it may have, so the decision is computed
    # in full but launches nothing (what a saturated site looks like every iteration).
    spec = CloudSpec("bench", max_instances=workers, price_per_hour=0.1, billing_increment=3600)
    return Manager(
        config=ManagerConfig(site_id="bench", interval=PERIOD),
        batch=MemoryBatch(BatchView(now, queued, running, nodes)),
        clouds={"bench": MemoryCloud(instances)},
        specs=[spec],
        store=store,
        policy=policies.get(policy),
        settings=policies.PolicySettings(),
    )


Times = list[tuple[float, float]]
"""Each step's wall-clock and CPU time (of every thread of the process), in seconds."""


def measure(
    sizes: Sequence[tuple[int, int]], repeat: int, policy: str, profile: Path | None = None
) -> list[tuple[int, int, Times]]:
    """Each size's step times, after one warm-up step."""
    results = []
    profiler = cProfile.Profile() if profile is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        for jobs, workers in sizes:
            manager = build(jobs, workers, Path(tmp), policy)
            manager.step()  # warm-up; also settles any first-iteration bookkeeping
            times: Times = []
            for _ in range(repeat):
                if profiler is not None:
                    profiler.enable()
                t0, c0 = time.perf_counter(), time.process_time()
                report = manager.step()
                times.append((time.perf_counter() - t0, time.process_time() - c0))
                if profiler is not None:
                    profiler.disable()
            assert not report.errors, report.errors
            results.append((jobs, workers, times))
            dispatch = getattr(manager, "dispatch", None)  # older trees: a bare pool
            pool = dispatch.pool if dispatch is not None else manager._pool  # type: ignore[attr-defined]
            pool.shutdown()
    if profiler is not None and profile is not None:
        profiler.dump_stats(str(profile))
    return results


def line(jobs: int, workers: int, times: Times, what: str) -> str:
    wall = [w for w, _ in times]
    med, cpu = statistics.median(wall), statistics.median(c for _, c in times)
    return (
        f"{jobs:>7,} queued jobs, {workers:>6,} workers: median {med * 1e3:7.2f} ms, "
        f"max {max(wall) * 1e3:7.2f} ms, CPU median {cpu * 1e3:7.2f} ms"
        f"  ({len(times)} iterations, {what})"
    )


def export(rev: str, into: Path) -> Path:
    """``rev``'s ``src/`` unpacked under ``into``; exits with one line if git cannot."""
    repo = Path(__file__).resolve().parent.parent
    try:
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", rev, "src"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    except subprocess.CalledProcessError as exc:
        err = exc.stderr.decode(errors="replace").strip() if exc.stderr else ""
        sys.exit(f"decision_loop: cannot export {rev!r} from {repo}: {err or exc}")
    return into / "src"


def child(src: Path, args: argparse.Namespace, profile: Path | None) -> list[Times]:
    """Run this benchmark on the tree at ``src`` in a process of its own."""
    cmd = [sys.executable, __file__, "--child", "--repeat", str(args.repeat)]
    cmd += ["--policy", args.policy] + (["--largest"] if args.largest else [])
    cmd += ["--profile", str(profile)] if profile is not None else []
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"decision_loop: the run on {src} failed:\n{done.stderr.strip()}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(answer["package"]).resolve().is_relative_to(src.resolve()):
        sys.exit(f"decision_loop: {src} ran {answer['package']} instead of its own tree")
    return [[(w, c) for w, c in t] for t in answer["times"]]


def against(args: argparse.Namespace, sizes: Sequence[tuple[int, int]]) -> None:
    """This tree and ``args.against``'s, measured in one run; the ratio last."""
    here = Path(__file__).resolve().parent.parent / "src"
    profiles = Path(args.profile) if args.profile else None
    if profiles is not None:
        profiles.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        old = export(args.against, Path(tmp))
        sides = {"current": here, args.against: old}
        times: dict[str, list[Times]] = {k: [[] for _ in sizes] for k in sides}
        order = ["current", args.against, args.against, "current"] * args.rounds
        for n, label in enumerate(order):
            prof = profiles / f"{label}-{n}.prof" if profiles is not None else None
            for i, t in enumerate(child(sides[label], args, prof)):
                times[label][i].extend(t)
    if profiles is not None:
        for label in sides:
            files = sorted(str(p) for p in profiles.glob(f"{label}-*.prof"))
            print(f"\n--- profile of {label} (by own time; files in {profiles}) ---")
            pstats.Stats(*files).sort_stats("tottime").print_stats(args.top)
    medians = {}
    for label in sides:
        for (jobs, workers), t in zip(sizes, times[label], strict=True):
            print(line(jobs, workers, t, f"{args.policy}, {label}"))
            medians[label, jobs] = (
                statistics.median(w for w, _ in t),
                statistics.median(c for _, c in t),
            )
    for jobs, workers in sizes:
        (wall, cpu), (old_wall, old_cpu) = medians["current", jobs], medians[args.against, jobs]
        print(
            f"ratio current / {args.against} at {jobs:,} jobs, {workers:,} workers: "
            f"{wall / old_wall:.2f}x median (CPU time {cpu / old_cpu:.2f}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--policy", default="bursts", choices=policies.available())
    parser.add_argument("--against", metavar="REV", help="an older commit to run beside this one")
    parser.add_argument("--largest", action="store_true", help="only the largest size")
    parser.add_argument(
        "--rounds", type=int, default=3, help="--against: rounds of current, old, old, current"
    )
    parser.add_argument("--profile", metavar="DIR", help="write and print cProfile stats")
    parser.add_argument("--top", type=int, default=25, help="profile lines to print")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = SIZES[-1:] if args.largest else SIZES
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.against:
        against(args, sizes)
        return
    if args.child:  # one side of --against: the times, as one JSON line
        prof = Path(args.profile) if args.profile else None
        results = measure(sizes, args.repeat, args.policy, prof)
        package = str(Path(elasticsite.__file__).parent)
        print(json.dumps({"package": package, "times": [t for _, _, t in results]}))
        return
    results = measure(sizes, args.repeat, args.policy)
    for jobs, workers, times in results:
        print(line(jobs, workers, times, args.policy))
    (j0, w0, t0), (j2, w2, t2) = results[0], results[-1]
    m0, m2 = statistics.median(w for w, _ in t0), statistics.median(w for w, _ in t2)
    if len(results) > 1:
        growth = (m2 / m0) / ((j2 + w2) / (j0 + w0))
        print(f"growth, smallest to largest size, relative to linear: {growth:.2f}x (1 = linear)")
    verdict = "met" if m2 <= 0.05 else "MISSED"
    print(f"budget of 50 ms median at 100,000 jobs / 10,000 workers: {verdict}")
    print(
        f"ratio of the largest median to paper 001's 5 s decision period: "
        f"{m2 / PERIOD:.4f} ({m2 / PERIOD * 100:.2f}%)"
    )


if __name__ == "__main__":
    main()
