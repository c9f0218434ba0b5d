"""Paper 001 (a large-scale elastic Torque site and its recontextualization broker):
Figures 3-6 and the claims of its text.

* Figure 3 (reactivity time, 2-256 nodes) and Figures 5 and 6 (the multi-cloud and
  EC2 traces) run on the simulator with the manager's own core and the ``core_demand``
  policy, the paper's decision engine (:mod:`.paper001_sim`), on clouds calibrated from
  the paper's text (:mod:`.paper001_clouds`, ``docs/boot-model.md``).
* Figure 4 (recontextualization time, 2-256 nodes) is measured against the real
  broker on 127.0.0.1, with real agent processes and agents held by this process,
  polling every 120 s as the paper's (one join per size, so it takes about 40 minutes)
  or at a shorter period (2 s when quick; :mod:`.paper001_broker`), and beside it with
  our agents' long polls.

The paper's figures are images; their numbers are known only where its text gives
them, so each claim is a sentence of the text and each plot sets that beside the
measurement.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TypeVar

from elasticsite.reproduce.claims import Reproduction, markdown_table
from elasticsite.reproduce.paper001_broker import (
    RecontextPlan,
    RecontextRig,
    RecontextTrial,
    measure,
)
from elasticsite.reproduce.paper001_broker import summary_rows as recontext_rows
from elasticsite.reproduce.paper001_claims import (
    PAPER001_CLAIMS,
    fig3_claims,
    fig4_claims,
    trace_claims,
)
from elasticsite.reproduce.paper001_clouds import (
    DECISION_PERIOD,
    RECONTEXT_PERIOD,
    SENSOR_PERIOD,
    Calibration,
    calibrate,
    ec2_micro,
    futuregrid,
)
from elasticsite.reproduce.paper001_plots import reactivity_plot, recontext_plot, trace_plot
from elasticsite.reproduce.paper001_sim import ReactivityRun, Trace, reactivity_run, trace_run
from elasticsite.sim.cloud import CloudModel
from elasticsite.sim.elastic import RunStatus
from elasticsite.sim.runner import round_seed

__all__ = ["PAPER001_CLAIMS", "Paper001Settings", "recontext_plan", "reproduce_paper001"]

Status = Callable[[RunStatus], None] | None
T = TypeVar("T")
SIZES = (2, 4, 8, 16, 32, 64, 128, 256)
"""Figures 3 and 4: cluster sizes from 2 to 256 nodes."""


@dataclass(frozen=True, slots=True)
class Paper001Settings:
    """How much to run: Figure 3's runs per size, the traces' runs, Figure 4's plan."""

    reactivity_runs: int
    trace_runs: int
    recontext: RecontextPlan
    defaults: bool = True
    """Also run what the manager's own defaults would change."""


FIG4_BUDGET = 1800.0
"""Seconds the full run's periodic joins are planned to take, beyond one period per
size for the cluster to settle: each join takes about 1.5 periods (a wait to a random
point of the period, then up to a period). At the paper's 120 s that is one join per
size (the least), at 10 s or less the paper's three."""
QUICK_PERIOD = 2.0
"""Figure 4's polling period in the quick run: 60 times the paper's load per node."""


def recontext_plan(period: float = RECONTEXT_PERIOD, *, quick: bool = False) -> RecontextPlan:
    """Figure 4's plan at a polling ``period``: in the quick run, 2 and 64 nodes with two
    joins each (256 agents in one process cost too much CPU for a busy machine to keep
    a short period); else every size, as many joins (one to three) as fit the budget."""
    if quick:
        return RecontextPlan((2, 64), 2, period, long_sizes=(64,))
    trials = int((FIG4_BUDGET / len(SIZES) - period) // (1.5 * period))
    return RecontextPlan(SIZES, max(1, min(3, trials)), period, long_sizes=SIZES)


QUICK = Paper001Settings(3, 1, recontext_plan(QUICK_PERIOD, quick=True), False)
FULL = Paper001Settings(30, 5, recontext_plan())


def _scratch() -> str | None:
    """Where Figure 4's broker keeps its state: in memory where the machine has a tmpfs,
    as the paper's broker kept its database in RAM (lines 369-371)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and shm.stat().st_mode & 0o002 else None


def _figure3(cal: Calibration, runs: int, seed: int) -> list[partial[ReactivityRun]]:
    """Figure 3's runs, each to be called (with a ``status``, or in a worker process)."""
    cloud = ec2_micro(cal.boot_failure)
    return [
        partial(reactivity_run, n, k, cloud, round_seed(seed, n * 1000 + k))
        for n in SIZES
        for k in range(runs)
    ]


TRACES = ("hotel-alone", "fig5-multicloud", "fig6-ec2")


def _traces(cal: Calibration, runs: int, seed: int) -> list[partial[Trace]]:
    """The traces' runs: for each run, Hotel alone, Figure 5 and Figure 6 (in that order)."""

    def hotel(limit: int) -> list[CloudModel]:
        return [futuregrid("hotel", cal.hotel_transfer, limit)]

    both = [*hotel(cal.hotel_limit), futuregrid("sierra", cal.sierra_transfer, cal.sierra_limit)]
    out = []
    for k in range(runs):
        s = round_seed(seed, 10 + k)
        out += [
            partial(trace_run, "hotel-alone", 256, hotel(10_000), s),
            partial(trace_run, "fig5-multicloud", 512, both, s),
            partial(trace_run, "fig6-ec2", 512, [ec2_micro(cal.boot_failure)], s, stall=600.0),
        ]
    return out


def _start(tasks: Sequence[partial[T]], pool: ProcessPoolExecutor | None) -> list[Future[T]]:
    """Start ``tasks`` in ``pool``'s worker processes (none: later, here)."""
    return [] if pool is None else [pool.submit(t) for t in tasks]


def _results(tasks: Sequence[partial[T]], futures: list[Future[T]], status: Status) -> list[T]:
    """The tasks' results: from their futures, or run here one after another."""
    if futures:
        return [f.result() for f in futures]
    return [t(status=status) for t in tasks]


def _defaults(cal: Calibration, seed: int, status: Status) -> list[list[str]]:
    """What the manager's own defaults change: a cloud protected after three failed
    boots in a row, and a stall timeout counted from the request on FutureGrid."""
    cloud = ec2_micro(cal.boot_failure)
    base = reactivity_run(256, 0, cloud, round_seed(seed, 256_000), status)
    guarded = reactivity_run(256, 0, cloud, round_seed(seed, 256_000), status, protect=True)
    hotel = [futuregrid("hotel", cal.hotel_transfer, 10_000)]
    stalled = trace_run("hotel-stall", 256, hotel, round_seed(seed, 10), status, stall=600.0)
    return [
        ["Figure 3, 256 nodes: a cloud is closed for 30 minutes after 3 boots in a row "
         "fail (protect_after = 3)",
         f"reactivity {base.seconds:,.0f} s ({base.stalled} stalled boots)",
         f"reactivity {guarded.seconds:,.0f} s"],
        ["Hotel alone: a boot not joined 10 minutes after its request is replaced "
         "(stall_timeout = 600)",
         "128 VMs launched for 128",
         f"{stalled.launched} VMs launched, {stalled.stalled} replaced as stalled; "
         f"{stalled.up_at('hotel', 1800)} up at 30 minutes"],
    ]  # fmt: skip


def _fig3_table(runs: Sequence[ReactivityRun], p: float) -> str:
    rows = []
    for n in SIZES:
        mine = [r for r in runs if r.nodes == n]
        secs = [r.seconds for r in mine]
        rows.append([
            str(n), str(len(mine)), f"{statistics.median(secs):,.0f}",
            f"{min(secs):,.0f}-{max(secs):,.0f}", str(sum(r.stalled > 0 for r in mine)),
            f"{1 - (1 - p) ** n:.0%}",
        ])  # fmt: skip
    return markdown_table(
        ["nodes", "runs", "median (s)", "range (s)", "runs with a stall",
         "model's chance of a stall"], rows, "Figure 3: reactivity time",
    )  # fmt: skip


def _trace_table(traces: dict[str, list[Trace]]) -> str:
    rows = []
    for name, runs in traces.items():
        for k, t in enumerate(runs):
            top, when = t.peak("all")
            rows.append([
                name, str(k + 1), str(len(t.jobs)), str(t.launched), f"{top} at {when:,.0f} s",
                str(t.up_at("all", 900)), str(t.up_at("all", 1800)), str(t.stalled),
                f"{t.done} by {t.finished:,.0f} s",
            ])  # fmt: skip
    return markdown_table(
        ["run", "#", "jobs", "VMs launched", "most VMs up", "up at 15 min", "up at 30 min",
         "stalled boots", "jobs done"], rows, "Figures 5 and 6, and Hotel alone: the traces",
    )  # fmt: skip


def _plots(
    out: Path, runs: Sequence[ReactivityRun], trials: Sequence[RecontextTrial],
    traces: dict[str, list[Trace]], cal: Calibration,
) -> list[Path]:  # fmt: skip
    small = statistics.median(r.seconds for r in runs if r.nodes <= 16)
    plots = [reactivity_plot(out, runs, small), recontext_plot(out, trials)]
    plots.append(
        trace_plot(
            out,
            traces["hotel-alone"][0],
            "Hotel alone: 256 single-core jobs (simulated)",
            [("over 100 VMs at 30 min", 1800.0, 100.0), ("not 128 VMs within 30 min", None, 128.0)],
            f"Hotel: images {cal.hotel_transfer:g} s each alone, 10 boots at once",
        )
    )
    plots.append(
        trace_plot(
            out,
            traces["fig5-multicloud"][0],
            "Figure 5: Hotel and Sierra, 512 jobs (simulated)",
            [
                ("Sierra at its limit just before 2,000 s", 2000.0, None),
                ("Hotel at its limit just before 3,000 s", 3000.0, None),
                (f"Hotel's limit here ({cal.hotel_limit})", None, float(cal.hotel_limit)),
                (f"Sierra's limit here ({cal.sierra_limit})", None, float(cal.sierra_limit)),
            ],
            "dual-core workers; limits fitted to the paper's times",
        )
    )
    plots.append(trace_plot(
        out, traces["fig6-ec2"][0], "Figure 6: EC2 micro, 512 jobs (simulated)",
        [("476 instances in under 15 min", 900.0, 476.0), ("trails off around 400", None, 400.0),
         ("490 at most within 30 min", None, 490.0)],
        f"boots 74-205 s; {cal.boot_failure:.2%} never end (replaced after 10 min)",
    ))  # fmt: skip
    return plots


def reproduce_paper001(
    out: Path,
    *,
    quick: bool = False,
    seed: int = 2012,
    progress: Callable[[str], None] | None = None,
    status: Status = None,
    period: float | None = None,
    workers: int | None = None,
    settings: Paper001Settings | None = None,
) -> Reproduction:
    """Run paper 001's Figures 3-6 and check its claims; plots and their CSVs go to
    ``out``. ``quick`` runs fewer runs and a shorter Figure 4; ``period`` is Figure 4's
    polling period (default: the paper's 120 s, 2 s when quick); ``settings`` chooses
    outright. Figures 3, 5 and 6's runs go to ``workers`` processes (default: the CPU
    count; 1 runs them here). ``progress`` gets a line as each part starts, ``status``
    each simulated run's status now and then, when run here. Figure 4 needs this
    machine's loopback and a free port; a failure there raises
    :class:`~.paper001_broker.RecontextError` (an ``OSError``)."""
    say = progress or (lambda _: None)
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    plan = settings or (QUICK if quick else FULL)
    if settings is None and period is not None:
        plan = replace(plan, recontext=recontext_plan(period, quick=quick))
    cal = calibrate()
    with (
        tempfile.TemporaryDirectory(prefix="elasticsite-paper001-", dir=_scratch()) as work,
        RecontextRig(Path(work), plan.recontext, seed) as rig,
    ):
        rig.start_broker()  # it starts while Figure 3 runs
        fig3, fig56 = _figure3(cal, plan.reactivity_runs, seed), _traces(cal, plan.trace_runs, seed)
        procs = min(workers or os.cpu_count() or 1, len(fig3) + len(fig56))
        with ProcessPoolExecutor(procs) if procs > 1 else nullcontext() as pool:
            try:
                futures = _start(fig3, pool), _start(fig56, pool)
                say(f"Figure 3: reactivity, {len(SIZES)} cluster sizes x "
                    f"{plan.reactivity_runs} runs")  # fmt: skip
                runs = _results(fig3, futures[0], status)
                rig.start_agents()
                say(f"Figures 5 and 6: the traces, {plan.trace_runs} run(s) each")
                done = _results(fig56, futures[1], status)
            except BaseException:  # interrupted or failed: the runs not started never are
                if pool is not None:
                    pool.shutdown(wait=False, cancel_futures=True)
                raise
        traces = {name: done[i :: len(TRACES)] for i, name in enumerate(TRACES)}
        defaults = _defaults(cal, seed, status) if plan.defaults else []
        trials = measure(rig, say)
    repro = Reproduction(
        "paper001",
        "paper 001: a large-scale elastic Torque site and its recontextualization broker "
        "(Figures 3-6)",
        quick,
    )
    repro.claims += fig3_claims(runs, cal.boot_failure)
    repro.claims += fig4_claims(trials)
    repro.claims += trace_claims(traces, cal)
    repro.plots += _plots(out, runs, trials, traces, cal)
    repro.tables += [
        _fig3_table(runs, cal.boot_failure),
        markdown_table(["mode", "nodes", "joins", "recontextualization time (s)",
                        "worst beyond the period (s)"], recontext_rows(trials),
                       f"Figure 4: recontextualization time (period {plan.recontext.period:g} s; "
                       f"the paper's {RECONTEXT_PERIOD:g} s)"),
        _trace_table(traces),
    ]  # fmt: skip
    if defaults:
        repro.tables.append(markdown_table(
            ["setting", "as the EPU (these runs)", "the manager's default"], defaults,
            "What the manager's own defaults would change",
        ))  # fmt: skip
    period = plan.recontext.period
    repro.setup = [
        "Figures 3, 5 and 6: the manager's core and the core_demand policy (launch the "
        "cores queued jobs ask for less the free and pending workers' cores) on the "
        f"simulator, deciding every {DECISION_PERIOD:g} s; jobs submitted together are "
        f"first seen at the sensor's next reading (every {SENSOR_PERIOD:g} s) and the next "
        "decision, a phase drawn per run; times count from the submission.",
        "An MPI job of n ranks is n one-core jobs submitted together (the last starts when "
        "the n-th worker joins); idle workers are released at once; a pending EC2 boot is "
        "replaced after 10 minutes; no cloud is closed after failures (the EPU had no "
        "such state); on FutureGrid no boot is taken for stalled (its boots wait for the "
        "cloud's places: the EPU's rule looks for no change, ours for no join).",
        *cal.lines(),
        f"Figure 4: `elasticsite broker` on 127.0.0.1 (HTTPS, its state in memory as the "
        f"paper's), two real `elasticsite agent` processes and the rest of the agents in "
        f"this process (the client library's AsyncNodeClient, each answer applied with "
        f"the agent's plan()). Agents poll every {period:g} s (the paper: "
        f"{RECONTEXT_PERIOD:g} s); the time beyond the period, in seconds, is what the paper "
        "bounds by 1 s.",
        f"Figure 3: {plan.reactivity_runs} runs per size (the paper ran 3); the traces: "
        f"{plan.trace_runs} run(s) each; Figure 4: {plan.recontext.trials} joins per size.",
    ]
    repro.seconds = time.perf_counter() - started
    return repro
