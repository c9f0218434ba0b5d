"""How long one full Slurm snapshot takes with 10,000 queued jobs, on a real Slurm.

The manager senses the batch system once per loop (every 5-10 s; paper 001 decided
every 5 s): ``SlurmBatch.snapshot()`` runs ``squeue --json`` and ``sinfo --json`` and
parses both. This submits one job array of 10,000 held tasks to the test Slurm of
scripts/slurm/ and times the snapshot in two shapes:

- *as submitted*: Slurm keeps a pending array as one record; the adapter expands it
  into 10,000 queued jobs;
- *split*: every task released from the hold becomes a record of its own (what a
  queue of 10,000 separately submitted jobs looks like); a begin time an hour away
  keeps them queued.

Needs root and Slurm (``scripts/slurm/install.sh``); starts it with
``scripts/slurm/start.sh`` if it is not running, and cancels its jobs afterwards.

    python benchmarks/slurm_sense.py [--jobs 10000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from elasticsite.batch.command import CommandResult, run
from elasticsite.batch.slurm import SlurmBatch

PERIOD = 5.0  # the manager's shortest loop interval, seconds (paper 001 decided every 5 s)
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "slurm"


class Counting:
    """The ordinary runner, also counting the bytes each command printed."""

    def __init__(self) -> None:
        self.bytes = 0

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        result = run(argv)
        self.bytes += len(result.stdout.encode())
        return result


def measure(label: str, repeat: int, jobs_from: str) -> tuple[float, float, int, int]:
    counter = Counting()
    batch = SlurmBatch(runner=counter, include_held=True, jobs_from=jobs_from)
    batch.snapshot()  # warm-up (page cache, the controller's first answer)
    times = []
    for _ in range(repeat):
        counter.bytes = 0
        start = time.perf_counter()
        view = batch.snapshot()
        times.append(time.perf_counter() - start)
    times.sort()
    median = statistics.median(times)
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    print(
        f"{label:<34} {len(view.queued):>6,} queued  {counter.bytes / 1e6:6.2f} MB read  "
        f"median {median * 1e3:7.1f} ms  p95 {p95 * 1e3:7.1f} ms",
        flush=True,
    )
    return median, p95, len(view.queued), counter.bytes


def wait_queued(array: str, expected: int, timeout: float = 120.0) -> None:
    batch = SlurmBatch(include_held=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = sum(1 for j in batch.snapshot().queued if j.id.startswith(f"{array}_"))
        if queued >= expected:
            return
        time.sleep(0.5)
    raise SystemExit(f"only {queued} of {expected} tasks of array {array} queued")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root: it starts and fills the test Slurm of scripts/slurm/")
    already = subprocess.run(["scontrol", "ping"], capture_output=True, text=True).stdout
    already_up = "UP" in already
    started = subprocess.run(["bash", str(SCRIPTS / "start.sh")], capture_output=True, text=True)
    if started.returncode != 0:
        raise SystemExit(f"scripts/slurm/start.sh failed: {started.stderr.strip()}")
    last = args.jobs - 1
    submit = run(
        ["sbatch", "--parsable", f"--array=0-{last}", "--hold", "--begin=now+1hour",
         "--ntasks=1", "--job-name=bench", "--output=/dev/null", "--wrap", "true"]
    )  # fmt: skip
    array = submit.stdout.strip().split(";")[0]
    try:
        wait_queued(array, args.jobs)
        rows = [
            measure("array, held: squeue --format", args.repeat, "format"),
            measure("array, held: squeue --json", args.repeat, "json"),
        ]
        t0 = time.perf_counter()
        run(["scontrol", "release", f"{array}_[0-{last - 1}]"])  # a partial range splits
        run(["scontrol", "release", f"{array}_{last}"])
        split = time.perf_counter() - t0
        wait_queued(array, args.jobs)
        rows.append(measure(f"{args.jobs:,} records: squeue --format", args.repeat, "format"))
        rows.append(
            measure(f"{args.jobs:,} records: squeue --json", max(3, args.repeat // 2), "json")
        )
    finally:
        subprocess.run(["scancel", array], check=False)
        if not already_up:  # stop only what this run started
            subprocess.run(["bash", str(SCRIPTS / "stop.sh")], capture_output=True, check=False)
    print(f"splitting the array into {args.jobs:,} records took {split:.1f} s", file=sys.stderr)
    fmt, js = rows[2], rows[3]
    print(
        f"snapshot, {args.jobs:,} queued jobs as separate records (squeue + sinfo): "
        f"default squeue --format median {fmt[0] * 1e3:.0f} ms, p95 {fmt[1] * 1e3:.0f} ms, "
        f"{fmt[3] / 1e6:.1f} MB read; squeue --json median {js[0] * 1e3:.0f} ms, "
        f"p95 {js[1] * 1e3:.0f} ms, {js[3] / 1e6:.1f} MB read"
    )
    print(
        f"as one pending array record: squeue --format {rows[0][0] * 1e3:.0f} ms, "
        f"squeue --json {rows[1][0] * 1e3:.0f} ms"
    )
    print(
        f"share of the manager's {PERIOD:g} s loop period: default {100 * fmt[0] / PERIOD:.1f}%, "
        f"json {100 * js[0] / PERIOD:.1f}%"
    )


if __name__ == "__main__":
    main()
