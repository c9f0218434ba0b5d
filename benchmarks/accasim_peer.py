"""The peer half of the simulator speed benchmark: AccaSim 1.1.3 on the same SWF trace.

The peer is AccaSim (PyPI ``accasim`` 1.1.3, Galleguillos et al., an event-driven HPC
workload management simulator in pure Python). It lives in its own virtualenv,
``/tmp/accvenv``, so its pins (matplotlib, scipy, psutil, ...) never touch the project's,
and it needs a one-line shim on Python 3.10+: ``accasim.utils.misc`` does
``from collections import Mapping``, so ``collections.Mapping`` is aliased to
``collections.abc.Mapping`` before the first ``accasim`` import (the installed package is
never patched).

What is timed: only ``Simulator.start_simulation()`` -- AccaSim's whole simulation call,
with ``time.perf_counter`` around it. Imports, building the system, the scheduler and the
``Simulator`` object are outside the clock. AccaSim's trace parsing *is* inside: its reader
parses the SWF lazily, a few submit instants at a time, from within the simulation loop, so
it cannot be separated. ``--outputs off`` (the default) turns AccaSim's result files off;
``--outputs on`` keeps its defaults (the ``sched-`` dispatching plan and ``stats-``
summary) inside the clock. They go to a temporary directory deleted afterwards, and they
are costly: the plan is formatted in a forked child process per 10,000 jobs, with a
``pydoc.locate`` per field, which about quadruples the 20,000-job run time. Each variant
runs ``--repeat`` times (default 3) and the fastest is kept.

The two halves run in two interpreters::

    # project venv: Lublin trace -> normalised SWF -> AccaSim EASY and FCFS in a subprocess
    .venv/bin/python benchmarks/accasim_peer.py [--jobs 20000] [--nodes 144] [--cores 8]

    # AccaSim venv, one simulation, prints one JSON line {"jobs", "seconds", "mean_wait", ...}
    /tmp/accvenv/bin/python benchmarks/accasim_peer.py --run-accasim FILE \\
        --scheduler easy|fcfs --nodes N --cores C

``easy`` is ``EASYBackfilling(FirstFit())`` and ``fcfs`` is ``FirstInFirstOut(FirstFit())``.
AccaSim's default SWF reader turns a job of *p* processors into *p* one-core "node
requests" that First-Fit may pack onto the same node, so on ``nodes x cores`` it schedules a
pool of ``nodes * cores`` interchangeable cores, like the project's simulator.

AccaSim 1.1.3's EASY does not protect the head job's reservation: it computes one, but
calls the allocator to backfill with ``reserved_nodes=[]``, so every queued job that fits
*now* starts, however long it runs. On exact estimates its schedule is FCFS until the head
blocks plus greedy first-fit of the rest of the queue, and its mean wait is not EASY's.

Mean wait is AccaSim's own: ``EventManager.finish_event`` sets
``waiting_time = start_time - queued_time`` for every finished job and appends it to
``mapper.wtimes``; ``mean_wait`` is the mean of that list (the number its ``stats-`` file
prints as "Avg. waiting times"), so rejected jobs are not in it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ACCASIM_VERSION = "1.1.3"
ACCASIM_VENV = Path("/tmp/accvenv")
ACCASIM_PYTHON = ACCASIM_VENV / "bin" / "python"
DEFAULT_MEMORY_KB = 1024
"""Requested memory (kB per processor) given to a job whose trace knows none."""
SCHEDULERS = ("easy", "fcfs")


# --------------------------------------------------------------------------------------
# Trace normalisation (project side; needs elasticsite)
# --------------------------------------------------------------------------------------


@dataclass(slots=True)
class NormaliseReport:
    """What :func:`normalise_swf` did: counts of jobs read, kept, dropped and repaired."""

    read: int = 0
    kept: int = 0
    dropped_by_reader: int = 0
    dropped_too_wide: int = 0
    memory_from_used: int = 0
    memory_defaulted: int = 0
    submit_shift: int = 0
    reader_summary: str = ""


def normalise_swf(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    max_processors: int | None = None,
    default_memory_kb: int = DEFAULT_MEMORY_KB,
) -> NormaliseReport:
    """Write ``dst``, a copy of the SWF trace ``src`` that AccaSim and the project both accept.

    Rules, in order (the first six are :func:`elasticsite.traces.swf.read_swf`'s default
    :class:`~elasticsite.traces.swf.CleaningRules`):

    1. Allocated processors ``-1`` become the requested processors.
    2. Cancelled jobs (status 5) without processors are dropped.
    3. Jobs with allocated processors <= 0 are dropped.
    4. Jobs with run time <= 0 (including unknown) are dropped.
    5. Requested processors ``-1`` become the allocated ones; requested time ``-1``
       becomes the run time.
    6. A run time over a known requested time is clipped to it (the limit is enforced).
    7. Jobs wider than ``max_processors`` (the machine, when given) are dropped: AccaSim
       would reject them, and a trace with unrunnable jobs is no speed benchmark.
    8. Jobs are sorted stably by submit time (AccaSim's reader needs them in order) and
       renumbered 1..n (AccaSim keys jobs by number, so duplicates would clash).
    9. Every number is written as an integer, because AccaSim's SWF regex only reads
       integers in all fields but average CPU time (``12.5`` would be mis-split, not
       rejected): submit, run and requested times are rounded *up* to whole seconds,
       then requested time is raised to at least the run time (so exact estimates stay
       exact and requested time >= run time >= 1 s always holds).
    10. Submit times are shifted so that the first is >= 1 s: AccaSim tests its clock
        with ``if not current_time``, which misbehaves when a job is submitted at 0.
    11. Requested processors are set equal to the allocated ones (AccaSim reads the
        requested count first; the project reads the allocated one), so both
        simulators see the same width.
    12. Requested memory (kB per processor) <= 0 becomes the used memory when that is
        > 0, else ``default_memory_kb``: AccaSim's EASY divides by every requested
        resource when it computes a reservation, so a zero memory request crashes it.

    Wait time is written as ``-1`` (unknown) and status as 1; other fields are kept.
    """
    import numpy as np

    from elasticsite.traces.swf import SWFHeader, read_swf, write_swf

    if default_memory_kb <= 0:
        raise ValueError(f"default_memory_kb must be > 0, got {default_memory_kb}")
    trace = read_swf(src, sort_by_submit=True)  # rules 1-6 and the sort of rule 8
    report = NormaliseReport(
        read=trace.report.records_read,
        dropped_by_reader=trace.report.dropped,
        reader_summary=trace.report.summary(),
    )
    procs = trace.allocated_processors.copy()
    keep = np.ones(len(trace), dtype=bool)
    if max_processors is not None:
        keep = procs <= max_processors
        report.dropped_too_wide = int((~keep).sum())

    def cut(column: Any) -> Any:
        return np.asarray(column)[keep]

    procs = cut(procs)
    submit = np.ceil(cut(trace.submit_time)).astype(np.int64)
    run = np.maximum(np.ceil(cut(trace.run_time)), 1).astype(np.int64)
    req_time = np.maximum(np.ceil(cut(trace.requested_time)), run).astype(np.int64)
    if len(submit) and submit[0] < 1:
        report.submit_shift = int(1 - submit[0])
        submit += report.submit_shift
    used_mem = np.ceil(cut(trace.used_memory)).astype(np.int64)
    req_mem = np.ceil(cut(trace.requested_memory)).astype(np.int64)
    from_used = (req_mem <= 0) & (used_mem > 0)
    defaulted = (req_mem <= 0) & ~from_used
    req_mem[from_used] = used_mem[from_used]
    req_mem[defaulted] = default_memory_kb
    report.memory_from_used = int(from_used.sum())
    report.memory_defaulted = int(defaulted.sum())

    n = len(submit)
    report.kept = n
    ints = {
        name: np.rint(cut(getattr(trace, name))).astype(np.int64)
        for name in ("status", "user_id", "group_id", "executable_number", "queue_number",
                     "partition_number")
    }  # fmt: skip
    columns = [
        np.arange(1, n + 1),  # job_number
        submit,
        np.full(n, -1),  # wait_time
        run,
        procs,  # allocated_processors
        np.full(n, -1),  # average_cpu_time
        used_mem,
        procs,  # requested_processors
        req_time,
        req_mem,
        np.ones(n, dtype=np.int64),  # status: completed
        ints["user_id"],
        ints["group_id"],
        ints["executable_number"],
        ints["queue_number"],
        ints["partition_number"],
        np.full(n, -1),  # preceding_job_number: renumbering broke the links
        np.full(n, -1),  # think_time
    ]
    stale = {"maxjobs", "maxrecords"} | ({"maxprocs"} if max_processors is not None else set())
    header = SWFHeader(
        (key, value) for key, value in trace.header.entries if (key or "").casefold() not in stale
    )
    header.add("MaxJobs", n)
    header.add("MaxRecords", n)
    header.add(
        "Note",
        "normalised by benchmarks/accasim_peer.py: integer fields, requested memory > 0, "
        "requested processors = allocated, requested time >= run time >= 1",
    )
    if max_processors is not None:
        header.add("MaxProcs", max_processors)
    rows = zip(*(column.tolist() for column in columns), strict=True)
    write_swf(dst, rows, header)  # type: ignore[arg-type]  # plain 18-tuples
    return report


def lublin_swf(dst: str | os.PathLike[str], n_jobs: int, machine_size: int, seed: int) -> float:
    """Write a Lublin-Feitelson trace of ``n_jobs`` as SWF; returns its offered load."""
    from elasticsite.traces.lublin import generate
    from elasticsite.traces.swf import SWFHeader, SWFRecord, write_swf

    work = generate(n_jobs, machine_size=machine_size, seed=seed)
    header = SWFHeader()
    header.add("Note", f"Lublin-Feitelson model, {n_jobs} jobs, seed {seed}")
    header.add("MaxProcs", machine_size)
    records = (
        SWFRecord(i + 1, s, -1.0, r, p, -1.0, -1.0, p, w, -1.0, 1, -1, -1, -1, q, -1, -1, -1.0)
        for i, (s, p, r, w, q) in enumerate(
            zip(work.submit_time.tolist(), work.processors.tolist(), work.runtime.tolist(),
                work.requested_time.tolist(), work.job_type.tolist(), strict=True)
        )
    )  # fmt: skip
    write_swf(dst, records, header)
    return work.load(machine_size)


# --------------------------------------------------------------------------------------
# Driving the peer (project side)
# --------------------------------------------------------------------------------------


def ensure_accasim(venv: Path = ACCASIM_VENV) -> bool:
    """Make sure ``venv`` has AccaSim, creating it and pip-installing it if needed.

    Returns False (after printing why) when it cannot be had, so callers can skip the peer.
    """
    python = venv / "bin" / "python"
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('accasim') is None)"
    if python.exists() and subprocess.run([python, "-c", probe], check=False).returncode == 0:
        return True
    print(f"AccaSim not found in {venv}; installing accasim=={ACCASIM_VERSION} there ...")
    steps = [[sys.executable, "-m", "venv", str(venv)]] if not python.exists() else []
    steps.append([str(python), "-m", "pip", "install", "-q", f"accasim=={ACCASIM_VERSION}"])
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            print(
                f"Could not install AccaSim ({' '.join(step)} exited {done.returncode}); "
                f"skipping the AccaSim peer.\n{tail}",
                file=sys.stderr,
            )
            return False
    return True


def run_accasim(
    path: str | os.PathLike[str],
    scheduler: str,
    nodes: int,
    cores: int,
    timeout: float | None = None,
    *,
    outputs: bool = True,
) -> dict[str, Any] | None:
    """Simulate the (normalised) SWF ``path`` with AccaSim in its own venv.

    Returns the JSON the subprocess prints: ``jobs`` (finished), ``seconds`` (wall time of
    ``start_simulation``), ``mean_wait`` (s), plus ``loaded``, ``rejected`` and AccaSim's own
    ``accasim_seconds``. ``outputs=False`` turns off AccaSim's default result files
    (``scheduling_output`` and ``statistics_output``). Returns None (after printing why)
    when AccaSim cannot be installed or the run exceeds ``timeout`` seconds; raises
    RuntimeError when the simulation fails.
    """
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler must be one of {SCHEDULERS}, got {scheduler!r}")
    if not ensure_accasim():
        return None
    command = [
        str(ACCASIM_PYTHON), str(Path(__file__).resolve()), "--run-accasim",
        str(Path(path).resolve()), "--scheduler", scheduler,
        "--nodes", str(nodes), "--cores", str(cores), *([] if outputs else ["--no-output"]),
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        print(f"AccaSim {scheduler} did not finish within {timeout} s; skipped.", file=sys.stderr)
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-20:])
        raise RuntimeError(f"AccaSim {scheduler} failed (exit {done.returncode}):\n{tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# --------------------------------------------------------------------------------------
# The AccaSim side (runs in /tmp/accvenv; must not import elasticsite or numpy at top)
# --------------------------------------------------------------------------------------


def _shim_collections() -> None:
    """Restore the ``collections`` ABC aliases Python 3.10 removed, which AccaSim imports."""
    import collections
    import collections.abc

    for name in ("Mapping", "MutableMapping", "Sequence", "Iterable", "Callable"):
        if not hasattr(collections, name):
            setattr(collections, name, getattr(collections.abc, name))


def _max_memory_kb(path: str) -> int:
    """Largest requested memory (kB per processor, SWF field 10) in the trace."""
    most = 1
    with open(path) as trace:
        for line in trace:
            fields = line.split(";", 1)[0].split()
            if len(fields) >= 10:
                most = max(most, int(float(fields[9])))
    return most


def _simulate(
    path: str, scheduler: str, nodes: int, cores: int, outputs: bool = True
) -> dict[str, Any]:
    """One AccaSim run (inside the AccaSim venv); the clock covers start_simulation only."""
    _shim_collections()
    from accasim.base.allocator_class import FirstFit  # type: ignore[import-not-found]
    from accasim.base.scheduler_class import EASYBackfilling, FirstInFirstOut  # type: ignore[import-not-found]
    from accasim.base.simulator_class import Simulator  # type: ignore[import-not-found]

    # Memory is a resource in AccaSim's usual setup; size it so that it never binds
    # (cores x the largest per-processor request), leaving a pool of nodes x cores cores.
    mem_per_node = cores * _max_memory_kb(path)
    with tempfile.TemporaryDirectory(prefix="accasim-") as results:
        config = Path(results) / "system.json"
        config.write_text(
            json.dumps(
                {
                    "groups": {"node": {"core": cores, "mem": mem_per_node}},
                    "resources": {"node": nodes},
                }
            )
        )
        allocator = FirstFit()
        dispatcher = (
            EASYBackfilling(allocator) if scheduler == "easy" else FirstInFirstOut(allocator)
        )
        simulator = Simulator(
            path,
            str(config),
            dispatcher,
            RESULTS_FOLDER_PATH=results,
            LOG_LEVEL="WARNING",
            scheduling_output=outputs,
            statistics_output=outputs,
            show_statistics=False,
        )
        start = time.perf_counter()
        simulator.start_simulation()
        seconds = time.perf_counter() - start
        waits = simulator.mapper.wtimes
        return {
            "jobs": len(waits),
            "seconds": seconds,
            "mean_wait": sum(waits) / len(waits) if waits else math.nan,
            "loaded": simulator.loaded_jobs,
            "rejected": simulator.rejected_jobs,
            "accasim_seconds": simulator.end_simulation_time - simulator.start_simulation_time,
            "scheduler": str(dispatcher),
            "outputs": outputs,
            "accasim_version": ACCASIM_VERSION,
        }


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------


def _benchmark(args: argparse.Namespace) -> None:
    """Project side: generate, normalise, run both AccaSim schedulers, print the rates."""
    machine = args.nodes * args.cores
    with tempfile.TemporaryDirectory(prefix="accasim-peer-") as tmp:
        raw, clean = Path(tmp) / "lublin.swf", Path(tmp) / "lublin-clean.swf"
        load = lublin_swf(raw, args.jobs, machine, args.seed)
        report = normalise_swf(raw, clean, max_processors=machine)
        print(
            f"Lublin trace: {args.jobs} jobs, seed {args.seed}, {args.nodes} nodes x "
            f"{args.cores} cores = {machine} cores, offered load {load:.2f}; normalised: "
            f"kept {report.kept}/{report.read}, memory defaulted {report.memory_defaulted}"
        )
        if args.keep_trace:
            Path(args.keep_trace).write_bytes(clean.read_bytes())
            print(f"normalised trace copied to {args.keep_trace}")
        variants = {"on": [True], "off": [False], "both": [False, True]}[args.outputs]
        for scheduler in args.schedulers:
            for outputs in variants:
                runs = [
                    run_accasim(
                        clean, scheduler, args.nodes, args.cores, args.timeout, outputs=outputs
                    )
                    for _ in range(args.repeat)
                ]
                done = [run for run in runs if run is not None]
                result = min(done, key=lambda run: run["seconds"]) if done else None
                label = f"{scheduler.upper()} outputs {'on' if outputs else 'off'}"
                if result is None:
                    print(f"AccaSim {label}: skipped")
                    continue
                rate = result["jobs"] / result["seconds"]
                print(
                    f"AccaSim {label:<16} ({result['scheduler']}): {result['jobs']} jobs in "
                    f"{result['seconds']:.2f} s = {rate:,.0f} jobs/s, mean wait "
                    f"{result['mean_wait']:.1f} s (rejected {result['rejected']})"
                )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-accasim", metavar="FILE", help="(AccaSim venv) simulate FILE")
    parser.add_argument("--scheduler", choices=SCHEDULERS, default="easy")
    parser.add_argument("--schedulers", nargs="+", choices=SCHEDULERS, default=list(SCHEDULERS))
    parser.add_argument("--nodes", type=int, default=144)
    parser.add_argument("--cores", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per AccaSim run")
    parser.add_argument(
        "--outputs",
        choices=("on", "off", "both"),
        default="off",
        help="AccaSim's default result files (sched-, stats-) on, off, or a run of each",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per variant, fastest kept")
    parser.add_argument("--no-output", action="store_true", help="(AccaSim venv) no files")
    parser.add_argument("--keep-trace", metavar="FILE", help="also save the normalised SWF")
    args = parser.parse_args(argv)
    if args.run_accasim:
        outputs = not args.no_output
        result = _simulate(args.run_accasim, args.scheduler, args.nodes, args.cores, outputs)
        print(json.dumps(result))
    else:
        _benchmark(args)


if __name__ == "__main__":
    main()
