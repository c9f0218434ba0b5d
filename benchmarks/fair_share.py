"""Cloud Scheduler mode's fair share, measured: the VMs each user held over time.

Paper 003 (Cloud Scheduler): "a single user will get the full allocation of Cloud
Scheduler's VMs, but once a second user submits jobs, half of the first user's VMs will
be shut down to free resources for the second user". Three scenarios run on the
simulator (the live manager's core and policies on a virtual clock):

* ``paper003``: 12 VMs; ann queues 60 ``small`` jobs, bob 30 ``small`` a little later,
  cid 20 ``large`` later still: ann should have all, then half, then a third.
* ``three-users``: 6 VMs; ann 12 ``small``, bob 4 ``large``, cid 8 ``small``, queued
  together (their shares start at 2/2/2).
* ``same-type``: 4 VMs, one type; ann 8 jobs, then cid 8 while ann's run.

What is measured, every decision step (10 s): the VMs each user holds (a VM held by a
user runs one of their jobs), and their fair share at that instant, the published
figure: the VMs divided evenly among the users with jobs running or queued, none
getting more than they have jobs (what one leaves goes to the others). Summed over the
run these are each user's VM-seconds and fair VM-seconds; their ratio is the part of
their due each user got. Jain's fairness index of those ratios, ``(sum x)^2 / (n * sum
x^2)``, is 1 when every user got the same part of their due and 1/n when one user got
it all. The paper003 scenario is also shown over time, against its published figure.

The peers, in the same run: the published figure itself (every ratio 1, index 1), and
the Cloud Scheduler policy of another commit (``--peer REV``, by default ``main``),
read from this checkout's git history and run beside this version's on the same
simulator, scenarios and seeds. The last line is the ratio of the two lowest Jain
indexes, this version's over the peer's::

    .venv/bin/python benchmarks/fair_share.py [--rebalance graceful|immediate] [--peer REV]
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import types
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticsite import policies
from elasticsite.plugins import PolicyPlugin
from elasticsite.reproduce import paper003_sim as paper003
from elasticsite.sim.elastic import ElasticRun

INTERVAL = paper003.INTERVAL
TYPES = paper003.TYPES
POLICY = "src/elasticsite/policies/cloud_scheduler.py"
REPO = Path(__file__).resolve().parents[1]
SAMPLES = (600.0, 1500.0, 2400.0, 3300.0)
"""When the paper003 scenario is shown: ann alone, with bob, with bob and cid, later."""
Policy = PolicyPlugin[Any]


@dataclass(frozen=True)
class Scenario:
    name: str
    limit: int
    bursts: tuple[tuple[float, str, str, int, float], ...]
    """(submitted at, user, VM type, how many jobs, run time of each)."""

    def jobs(self) -> list[tuple[float, str, str, float]]:
        return [(at, u, t, run) for at, u, t, n, run in self.bursts for _ in range(n)]

    def users(self) -> list[str]:
        return sorted({u for _, u, _, _, _ in self.bursts})


SCENARIOS = (
    Scenario("paper003", paper003.LIMIT, paper003.BURSTS),  # as `reproduce paper003` runs it
    Scenario("three-users", 6, ((0.0, "ann", "small", 12, 600.0), (0.0, "bob", "large", 4, 600.0),
                                (0.0, "cid", "small", 8, 600.0))),
    Scenario("same-type", 4, ((0.0, "ann", "small", 8, 600.0), (300.0, "cid", "small", 8, 600.0))),
)  # fmt: skip


@dataclass
class Measured:
    used: Counter[str] = field(default_factory=Counter)
    due: Counter[str] = field(default_factory=Counter)
    held: dict[float, tuple[Counter[str], dict[str, int]]] = field(default_factory=dict)
    """At each of :data:`SAMPLES`: the VMs each user held, and their fair share."""

    def ratios(self) -> dict[str, float]:
        return {u: self.used[u] / self.due[u] for u in sorted(self.due) if self.due[u]}

    def jain(self) -> float:
        x = list(self.ratios().values())
        return sum(x) ** 2 / (len(x) * sum(v * v for v in x)) if x else 1.0


def run(scn: Scenario, policy: Policy, rebalance: str, seed: int) -> Measured:
    jobs = scn.jobs()
    m = Measured()
    users = scn.users()
    samples = list(SAMPLES)

    def watch(run: ElasticRun, running: Counter[str], shares: dict[str, int]) -> None:
        for user, share in shares.items():
            m.used[user] += running[user] * INTERVAL
            m.due[user] += share * INTERVAL
        if samples and run.sim.now >= samples[0]:
            m.held[samples.pop(0)] = (running, shares)

    sim = paper003.watched_run(jobs, scn.limit, users, policy, rebalance, seed, watch)
    sim.sim.run()
    return m


def peer(rev: str) -> tuple[Policy | None, str]:
    """The Cloud Scheduler policy of commit ``rev`` of this checkout, and its name; None
    (and why) when git cannot show it or it is this version's."""
    try:
        shown = subprocess.run(
            ["git", "-C", str(REPO), "log", "-1", "--format=%h %s", rev, "--"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
        source = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{rev}:{POLICY}"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"git cannot show {rev}'s policy ({exc.__class__.__name__})"
    if source == (REPO / POLICY).read_text():
        return None, f"{rev} ({shown}) has this version's policy"
    # Its registration (a decorator in older commits, a call in newer ones) is left out:
    # this version's policy holds the name.
    source = re.sub(r"^@register\(.*\)$|^register\(.*\)\(\w+\)$", "", source, flags=re.M)
    module = types.ModuleType("cloud_scheduler_peer")
    exec(compile(source, f"{rev}:{POLICY}", "exec"), module.__dict__)
    decide = module.decide

    def as_then(snapshot: Any, settings: policies.PolicySettings) -> Any:
        return decide(snapshot, _Flat(settings))

    policy: Policy = dataclasses.replace(policies.get("cloud_scheduler"), decide=as_then)
    return policy, f"{rev} ({shown})"


class _Flat:
    """These settings as an older commit's policy reads them: its own options (such as
    ``rebalance``) were fields of the settings then."""

    def __init__(self, settings: policies.PolicySettings) -> None:
        self._settings = settings

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._settings, name)
        except AttributeError:
            return getattr(self._settings.options, name)


def report(label: str, m: Measured) -> None:
    ratios = m.ratios()
    shares = ", ".join(f"{u} {ratios[u]:.2f}" for u in ratios)
    print(f"  {label:<13} VM-s / fair VM-s: {shares:<32} Jain {m.jain():.3f}")


def timeline(users: Sequence[str], runs: dict[str, Measured]) -> None:
    """The VMs each user held at each sample, beside the published figure."""
    print(f"  over time, VMs held by {'/'.join(users)}:")
    for at in SAMPLES:
        cells = []
        fair = ""
        for label, m in runs.items():
            if at not in m.held:
                continue
            held, shares = m.held[at]
            cells.append(f"{label} {'/'.join(str(held[u]) for u in users)}")
            fair = "/".join(str(shares.get(u, 0)) for u in users)
        print(f"    t={at:>5.0f} s  published figure {fair:<9} " + "  ".join(cells))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rebalance", choices=["graceful", "immediate"], default="graceful")
    parser.add_argument("--peer", default="main", help="the commit to compare with (git)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    ours = policies.get("cloud_scheduler")
    theirs, named = peer(args.peer)
    print(f"Cloud Scheduler fair share on the simulator ({args.rebalance}, seed {args.seed})")
    print(f"peers: the published figure (paper 003: VMs evenly among users), and "
          f"{named if theirs is not None else 'no commit: ' + named}")  # fmt: skip
    lowest: dict[str, float] = {}
    for scn in SCENARIOS:
        print(f"{scn.name}: {scn.limit} VMs")
        print(f"  {'published':<13} VM-s / fair VM-s: every user 1.00{'':<17} Jain 1.000")
        runs: dict[str, Measured] = {}
        for label, policy in (("this version", ours), ("peer", theirs)):
            if policy is None:
                continue
            m = runs[label] = run(scn, policy, args.rebalance, args.seed)
            report(label, m)
            lowest[label] = min(lowest.get(label, 1.0), m.jain())
        if scn.name == "paper003":
            timeline(scn.users(), runs)
    if "peer" not in lowest:
        print(
            f"lowest Jain index, this version / published figure: "
            f"{lowest['this version']:.3f} / 1.000 = {lowest['this version']:.2f}x"
        )
        return
    print(
        f"lowest Jain index, this version / {args.peer}: {lowest['this version']:.3f} / "
        f"{lowest['peer']:.3f} = {lowest['this version'] / lowest['peer']:.2f}x"
    )


if __name__ == "__main__":
    main()
