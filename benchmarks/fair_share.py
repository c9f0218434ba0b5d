"""Cloud Scheduler mode's fair share, measured: each user's VM-seconds against the fair share.

Paper 003 (Cloud Scheduler): "a single user will get the full allocation of Cloud
Scheduler's VMs, but once a second user submits jobs, half of the first user's VMs will
be shut down to free resources for the second user". Three scenarios run on the
simulator (the live manager's core and policies on a virtual clock):

* ``paper003``: 12 VMs; ann queues 60 ``small`` jobs, bob 30 ``small`` a little later,
  cid 20 ``large`` later still: ann should have all, then half, then a third.
* ``three-users``: 6 VMs; ann 12 ``small``, bob 4 ``large``, cid 8 ``small``, queued
  together (their shares start at 2/2/2).
* ``same-type``: 4 VMs, one type; ann 8 jobs, then cid 8 while ann's run.

What is measured, every decision step (10 s): the VMs each user's jobs run on (one job a
VM), and their fair share at that instant: the VMs divided evenly among the users with
jobs running or queued, none getting more than they have jobs (what one leaves goes to
the others). Summed over the run these are each user's VM-seconds and fair VM-seconds;
their ratio is the user's share of what they were due. Jain's fairness index of those
ratios, ``(sum x)^2 / (n * sum x^2)``, is 1 when every user got the same part of their
due and 1/n when one user got it all.

The peers, in the same run: the fair share itself (every ratio 1, index 1), and the
policy of a checkout of the previous version (``--main DIR``, by default
``/tmp/es-main``, made with ``git archive main | tar -x -C /tmp/es-main``): its
``policies/cloud_scheduler.py`` is loaded beside this version's and run on the same
simulator, scenarios and seeds. The last line is the ratio of the two versions' lowest
Jain index::

    .venv/bin/python benchmarks/fair_share.py [--rebalance graceful|immediate] [--main DIR]
"""

from __future__ import annotations

import argparse
import types
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from elasticsite import policies
from elasticsite.model import Decision, VMType
from elasticsite.policies.fair_share import fair_shares
from elasticsite.sim.cloud import CloudModel, Durations
from elasticsite.sim.elastic import ElasticRun
from elasticsite.snapshot import SiteSnapshot

INTERVAL = 10.0
TYPES = (VMType("small", 1), VMType("large", 2))
Policy = Callable[[SiteSnapshot, policies.PolicySettings], Decision]


@dataclass(frozen=True)
class Scenario:
    name: str
    limit: int
    bursts: tuple[tuple[float, str, str, int, float], ...]
    """(submitted at, user, VM type, how many jobs, run time of each)."""

    def jobs(self) -> list[tuple[float, str, str, float]]:
        return [(at, u, t, run) for at, u, t, n, run in self.bursts for _ in range(n)]


SCENARIOS = (
    Scenario("paper003", 12, ((0.0, "ann", "small", 60, 600.0), (900.0, "bob", "small", 30, 600.0),
                              (1800.0, "cid", "large", 20, 600.0))),
    Scenario("three-users", 6, ((0.0, "ann", "small", 12, 600.0), (0.0, "bob", "large", 4, 600.0),
                                (0.0, "cid", "small", 8, 600.0))),
    Scenario("same-type", 4, ((0.0, "ann", "small", 8, 600.0), (300.0, "cid", "small", 8, 600.0))),
)  # fmt: skip


@dataclass
class Measured:
    used: Counter[str]
    due: Counter[str]
    contended: Counter[str]
    """Mean VMs per user while every user of the scenario had jobs queued."""

    def ratios(self) -> dict[str, float]:
        return {u: self.used[u] / self.due[u] for u in sorted(self.due) if self.due[u]}

    def jain(self) -> float:
        x = list(self.ratios().values())
        return sum(x) ** 2 / (len(x) * sum(v * v for v in x)) if x else 1.0


def run(scn: Scenario, policy: Policy, rebalance: str, seed: int) -> Measured:
    jobs = scn.jobs()
    used: Counter[str] = Counter()
    due: Counter[str] = Counter()
    contended: Counter[str] = Counter()
    steps = 0
    users = {u for _, u, _, _ in jobs}

    class Watched(ElasticRun):
        def step(self, _: object = None) -> None:
            nonlocal steps
            super().step(_)
            running = Counter(j.user for j in self.batch.running.values())
            waiting = Counter(j.user for j in (*self.batch.queue, *self.batch.held.values()))
            demand = {u: running[u] + waiting[u] for u in users if running[u] + waiting[u]}
            for user, share in fair_shares(scn.limit, demand).items():
                used[user] += running[user] * INTERVAL
                due[user] += share * INTERVAL
            if all(waiting[u] for u in users):
                steps += 1
                contended.update(running)

    cloud = CloudModel(
        name="science",
        vm_limit=scn.limit,
        boot=Durations.uniform(60.0, 120.0),
        shutdown=Durations.uniform(5.0, 15.0),
        billing_increment=1.0,
        vm_types=TYPES,
    )
    cores = {t.name: t.cores for t in TYPES}
    sim = Watched(
        [(at, cores[t], r, r * 1.2) for at, _, t, r in jobs], [cloud], policy,
        policies.PolicySettings(rebalance=rebalance), INTERVAL, "easy", seed,
        users=[u for _, u, _, _ in jobs], attributes=[{"vm_type": t} for _, _, t, _ in jobs],
    )  # fmt: skip
    sim.sim.run()
    mean = Counter({u: n / steps for u, n in contended.items()}) if steps else Counter()
    return Measured(used, due, mean)


def previous(main: Path) -> Policy | None:
    """The previous version's Cloud Scheduler policy, loaded from its checkout."""
    path = main / "src" / "elasticsite" / "policies" / "cloud_scheduler.py"
    if not path.is_file():
        return None
    source = path.read_text().replace('@register("cloud_scheduler")', "@_as_is")
    module = types.ModuleType("cloud_scheduler_previous")
    module.__dict__["_as_is"] = lambda fn: fn
    exec(compile(source, str(path), "exec"), module.__dict__)
    policy: Policy = module.decide
    return policy


def report(label: str, m: Measured) -> None:
    ratios = m.ratios()
    shares = ", ".join(f"{u} {ratios[u]:.2f}" for u in ratios)
    held = ", ".join(f"{u} {m.contended[u]:.1f}" for u in sorted(m.contended)) or "-"
    print(f"  {label:<15} VM-s / fair: {shares:<34} VMs while all wait: {held:<24} "
          f"Jain {m.jain():.3f}")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rebalance", choices=["graceful", "immediate"], default="graceful")
    parser.add_argument("--main", type=Path, default=Path("/tmp/es-main"))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    ours = policies.get("cloud_scheduler")
    theirs = previous(args.main)
    print(f"Cloud Scheduler fair share on the simulator ({args.rebalance}, seed {args.seed})")
    lowest: dict[str, float] = {}
    for scn in SCENARIOS:
        print(f"{scn.name}: {scn.limit} VMs")
        print(f"  {'fair share':<15} VM-s / fair: every user 1.00{'':<21} Jain 1.000")
        for label, policy in (("this version", ours), ("previous", theirs)):
            if policy is None:
                continue
            m = run(scn, policy, args.rebalance, args.seed)
            report(label, m)
            lowest[label] = min(lowest.get(label, 1.0), m.jain())
    if "previous" not in lowest:
        print(f"(no previous version at {args.main}: only the fair share is the peer)")
        print(f"lowest Jain index, this version / fair share: {lowest['this version']:.3f}")
        return
    print(
        f"lowest Jain index, this version / previous: {lowest['this version']:.3f} / "
        f"{lowest['previous']:.3f} = {lowest['this version'] / lowest['previous']:.2f}x"
    )


if __name__ == "__main__":
    main()
