"""Reproducing paper 003 (Cloud Scheduler): VMs of the type each job names, fair
shares among users re-balanced gracefully or at once, VMs in error replaced, state
resumed after a restart.

The first four run on the simulator (:mod:`~elasticsite.reproduce.paper003_sim`: the
manager's core and the ``cloud_scheduler`` policy, the paper's three-user example);
the restart on the live manager over the embedded site
(:mod:`~elasticsite.reproduce.paper003_live`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from elasticsite.reproduce.claims import Claim, Reproduction, check, markdown_table
from elasticsite.reproduce.paper003_live import JOBS, VMS, Restart, restart_run
from elasticsite.reproduce.paper003_sim import (
    BURSTS,
    EXPECTED,
    LIMIT,
    SAMPLES,
    Rebalance,
    Run,
    failed,
    simulate,
)

__all__ = ["PAPER003_CLAIMS", "reproduce_paper003"]

ERROR_AT = 400.0
"""When the simulated cloud puts VMs in error (ann alone, every VM busy)."""
ERRORS = 2
JAIN = 0.95
"""The lowest Jain index of each user's VM-seconds over their due taken as fair."""

_CLAIMS: dict[str, tuple[str, str]] = {
    "vm_type_per_job": (
        "Sec. 2, 3.2",
        "Each job names the VM it needs (VMType in its attributes) and Cloud Scheduler "
        "boots VMs of that type for it.",
    ),
    "single_user_all": (
        "Sec. 3.3",
        "A single user gets the full allocation of Cloud Scheduler's VMs.",
    ),
    "second_user_half": (
        "Sec. 3.3",
        "Once a second user submits jobs, half of the first user's VMs are shut down to "
        "free resources for the second user.",
    ),
    "fair_share_graceful": (
        "Sec. 3.3",
        "VMs are evenly distributed among users with jobs; re-balanced gracefully, the "
        "over-allocated user's pending jobs are held and their VMs shut down after their "
        "current job, without affecting running jobs.",
    ),
    "fair_share_immediate": (
        "Sec. 3.3",
        "Re-balanced by killing, VMs are shut down at once; a job killed with its VM is "
        "re-queued by the batch system and runs again.",
    ),
    "error_replaced": (
        "Sec. 3.2",
        "VMs in an error state are shut down and, for the jobs still needing them, new "
        "ones started in their place.",
    ),
    "restart_resumes": (
        "Sec. 3.2",
        "Shut down persisting its state, the VMs go on running their jobs; restarted, "
        "Cloud Scheduler reloads its state and resumes managing the jobs and resources.",
    ),
}
PAPER003_CLAIMS = tuple(_CLAIMS)
"""The claims' keys, in report order."""


def _claim(key: str, ok: bool | None, measured: str, note: str = "") -> Claim:
    source, text = _CLAIMS[key]
    return check(key, source, text, ok, measured, note)


def _shares(t: tuple[int, ...]) -> str:
    return "/".join(str(v) for v in t)


def reproduce_paper003(
    out: Path,
    *,
    quick: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Reproduction:
    """Run paper 003's checks and write the plot under ``out``; the quick variant runs
    one seed of each simulated scenario (the full one five)."""
    say = progress or (lambda _: None)
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    repro = Reproduction("paper003", "paper 003: Cloud Scheduler", quick)
    seeds = (1,) if quick else (1, 2, 3, 4, 5)

    say("fair shares: the paper's three users on the simulator, graceful and immediate")
    modes: tuple[Rebalance, ...] = ("graceful", "immediate")
    runs: dict[str, list[Run]] = {m: [simulate(m, seed=s) for s in seeds] for m in modes}
    say("VMs in error: two of the first user's VMs fail while busy")
    broken = [simulate("graceful", errors=ERRORS, seed=s) for s in seeds]
    say("restart: the live manager over the embedded site, killed and started again")
    restart = restart_run(out / "live")
    repro.claims += _sim_claims(runs, broken, restart)
    repro.claims.append(_restart_claim(restart))

    first = {mode: rs[0] for mode, rs in runs.items()}
    repro.tables.append(markdown_table(
        ["at", "paper 003 (ann/bob/cid)", "graceful", "immediate"],
        [[f"{t:,.0f} s", _shares(EXPECTED[t]), _shares(first["graceful"].at(t)),
          _shares(first["immediate"].at(t))] for t in SAMPLES],
        "VMs held per user (running one of their jobs), seed 1",
    ))  # fmt: skip
    from elasticsite.reproduce.paper003_plots import plot_shares

    repro.plots.append(plot_shares(first, out / "fair-share.png"))
    bursts = "; ".join(
        f"{user} {n} `{vm}` jobs of {run:.0f} s at {at:,.0f} s" for at, user, vm, n, run in BURSTS
    )
    repro.setup = [
        f"Simulator: one cloud of {LIMIT} VMs (`small` 1 core, `large` 2), boots of "
        f"60-120 s, the manager's core and the `cloud_scheduler` policy every 10 s; {bursts}. "
        f"Seeds: {', '.join(map(str, seeds))}.",
        f"VMs in error: at {ERROR_AT:.0f} s the cloud reports {ERRORS} of ann's busy VMs in "
        "error (their nodes stop, their jobs go back to the queue).",
        f"Live: the embedded site, a local cloud of {VMS} VMs, {JOBS} jobs of this process's "
        "user naming `small` (a second user's jobs would need root and a second account); "
        f"the manager (`elasticsite run`) is killed with SIGKILL while {VMS} run, a new one "
        "starts on the same state directory.",
        "The paper publishes no measurements: its claims are behaviours, and the shares it "
        "describes (the VMs evenly among the users with jobs) are the expected figure.",
    ]
    repro.seconds = time.perf_counter() - started
    return repro


def _sim_claims(runs: dict[str, list[Run]], broken: list[Run], live: Restart) -> list[Claim]:
    out = []
    every = [r for rs in runs.values() for r in rs]
    wrong = sum(len(r.wrong_type()) for r in every)
    launched = Counter(w.vm_type for r in every for w in r.workers)
    live_wrong = sum(t != "small" for t in live.types)
    live_part = (
        f"; live: {len(live.types)} jobs naming small, {live_wrong} on another type"
        if live.types else "; live: not run (" + live.why_not + ")"
    )  # fmt: skip
    out.append(_claim(
        "vm_type_per_job", wrong == 0 and sum(launched.values()) > 0 and live_wrong == 0,
        f"simulator: {sum(len(r.jobs) for r in every)} jobs over {len(every)} runs, {wrong} on "
        f"a VM of another type; VMs booted: "
        + ", ".join(f"{n} {t}" for t, n in sorted(launched.items())) + live_part,
    ))  # fmt: skip
    alone = [r.at(SAMPLES[0]) for r in every]
    out.append(_claim(
        "single_user_all", all(a == EXPECTED[SAMPLES[0]] for a in alone),
        f"at {SAMPLES[0]:.0f} s ann holds {', '.join(sorted({str(a[0]) for a in alone}))} "
        f"of {LIMIT} VMs",
    ))  # fmt: skip
    two = [r.at(SAMPLES[1]) for r in every]
    out.append(_claim(
        "second_user_half", all(t == EXPECTED[SAMPLES[1]] for t in two),
        f"at {SAMPLES[1]:.0f} s ann/bob/cid hold " + ", ".join(sorted({_shares(t) for t in two})),
    ))  # fmt: skip
    for mode, rs in runs.items():
        held = [_shares(r.at(t)) for r in rs for t in SAMPLES]
        shares_ok = all(r.at(t) == EXPECTED[t] for r in rs for t in SAMPLES)
        jain = min(r.jain() for r in rs)
        moves = Counter[str]()
        for r in rs:
            moves.update(r.moves)
        done = all(j.state.value == "completed" for r in rs for j in r.jobs)
        requeued = sum(r.requeued for r in rs)
        jobs_held = sum(len(r.jobs_held) for r in rs)
        measured = (
            f"{' -> '.join(dict.fromkeys(held))} (paper "
            f"{' -> '.join(_shares(EXPECTED[t]) for t in SAMPLES)}), lowest Jain {jain:.3f}; "
            f"fair-share moves: {', '.join(f'{n} to {s}' for s, n in sorted(moves.items()))}; "
            f"{jobs_held} jobs held, {requeued} requeued by a VM killed under them"
        )
        if mode == "graceful":
            ok = shares_ok and jain >= JAIN and requeued == 0 and set(moves) == {"draining"}
            ok = ok and jobs_held > 0 and done
            note = "" if ok else _why(shares_ok, jain, done) or "a job was killed or none held"
        else:
            ok = shares_ok and jain >= JAIN and set(moves) == {"terminating"} and done
            ok = ok and requeued > 0
            note = "" if ok else _why(shares_ok, jain, done) or "no VM was killed under a job"
        out.append(_claim(f"fair_share_{mode}", ok, measured, note))
    fails = sum(len(failed(r)) for r in broken)
    # Launched after the errors and before bob arrives, beyond what the same seed's run
    # without errors launched then (ann alone on a full site: none).
    baseline = runs["graceful"]
    replaced = sum(
        _launched(r, ERROR_AT, BURSTS[1][0]) - _launched(b, ERROR_AT, BURSTS[1][0])
        for r, b in zip(broken, baseline, strict=True)
    )
    errors = sum(r.errors for r in broken)
    done = all(j.state.value == "completed" for r in broken for j in r.jobs)
    out.append(_claim(
        "error_replaced", errors > 0 and fails >= errors and replaced >= errors and done,
        f"{errors} VMs put in error over {len(broken)} runs: {fails} workers failed, "
        f"{replaced} more launched than without errors before bob arrived, "
        f"{sum(r.requeued for r in broken)} jobs requeued, every job completed: {done}",
    ))  # fmt: skip
    return out


def _launched(run: Run, start: float, end: float) -> int:
    return sum(start <= w.requested_at < end for w in run.workers)


def _why(shares_ok: bool, jain: float, done: bool) -> str:
    why = []
    if not shares_ok:
        why.append("the shares at the sample times differ from the paper's")
    if jain < JAIN:
        why.append(f"Jain's index {jain:.3f} is under {JAIN}")
    if not done:
        why.append("a job did not complete")
    return "; ".join(why)


def _restart_claim(r: Restart) -> Claim:
    if r.why_not:
        return _claim("restart_resumes", None, "not measured", r.why_not)
    codes = Counter(r.exit_codes)
    ok = (
        len(r.before) == VMS
        and r.after == r.before
        and not r.launched_after
        and not r.orphans
        and set(codes) == {0}
    )
    return _claim(
        "restart_resumes", ok,
        f"{len(r.before)} VMs live when the manager was killed, {len(r.after)} of them "
        f"resumed with the same owners; {len(r.launched_after)} launched after the "
        f"restart, {len(r.orphans)} orphaned; jobs' exit codes {dict(codes)}; {r.seconds:.1f} s",
        "" if ok else "a VM was lost, re-launched, orphaned or changed hands, or a job failed",
    )  # fmt: skip
