"""``elasticsite urgent simulate``: each cloud policy on a full finite cloud, against paper 004."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from elasticsite.cli.common import NonNegativeInt, PositiveInt, console, fail

__all__ = ["simulate"]

_POLICIES = ("default", "urgent_only", "qos", "migration", "suspension", "preemption")


def simulate(
    policy: Annotated[
        list[str] | None,
        typer.Option("--policy", "-p", help=f"One of {', '.join(_POLICIES)}; repeat; all if none."),
    ] = None,
    nodes: Annotated[
        PositiveInt | None,
        typer.Option(help="Hosts of 8 cores and 16 GB. Default: the paper's.", show_default=False),
    ] = None,
    fill: Annotated[
        str | None,
        typer.Option(
            help="Type of the non-urgent VMs filling the cloud. Default: the paper's "
            "(c1.xlarge; m1.small for migration; none for default).",
            show_default=False,
        ),
    ] = None,
    urgent: Annotated[str, typer.Option(help="Type of the urgent VMs.")] = "c1.xlarge",
    count: Annotated[
        PositiveInt, typer.Option(help="Urgent VMs asked for at once (one node each).")
    ] = 1,
    volunteers: Annotated[
        float,
        typer.Option(
            min=0.0, max=1.0, help="Share of non-urgent owners who volunteer (paper: all)."
        ),
    ] = 1.0,
    free_cores: Annotated[
        NonNegativeInt | None,
        typer.Option(
            help="Cores the fill leaves free per host. Default: the paper's (migration: "
            "the urgent VM's cores less one target's; default: all).",
            show_default=False,
        ),
    ] = None,
    trials: Annotated[int, typer.Option(min=1, max=10_000)] = 25,
    seed: Annotated[NonNegativeInt, typer.Option()] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per policy.")] = False,
) -> None:
    """Replay urgent VMs on a finite cloud under each policy, next to paper 004's figures.

    With no options each policy runs paper 004's own condition for it (section 4.1):
    one node full of c1.xlarge targets (default: an empty node, the paper's probe;
    migration: m1.small targets on two nodes with room to move one), one urgent
    c1.xlarge, every non-urgent VM a possible target. The delays are drawn from the
    paper's measurements (Tables 4.12 to 4.24); what the simulation adds is which VMs
    each policy hits and what that costs their owners.
    """
    from elasticsite.clouds.capacity_delays import reference
    from elasticsite.sim.urgent_cloud import paper_scenario, summarize

    chosen = policy or list(_POLICIES)
    rows = []
    for name in chosen:
        if name not in _POLICIES:
            raise fail(f"unknown cloud policy {name!r}; choose from {', '.join(_POLICIES)}")
        try:
            sc = paper_scenario(
                name, nodes=nodes, fill=fill, urgent=urgent, count=count,
                volunteers=volunteers, free_cores=free_cores,
            )  # fmt: skip
        except ValueError as exc:
            raise fail(str(exc)) from None
        row = summarize(sc, trials=trials, seed=seed)
        empty = sc.free_cores >= sc.host_cores
        spread = count if sc.policy.value == "migration" else min(count, sc.nodes)
        ref = None
        if urgent == "c1.xlarge":
            per_node = -(-count // spread)
            ref = reference(name, "" if empty else sc.fill, spread, per_node)
        row["scenario"] = _scenario(sc.nodes, sc.fill, sc.free_cores, empty)
        row["paper_mean"], row["paper_sd"] = ref if ref else (None, None)
        rows.append(row)
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    from rich.table import Table

    def fmt(v: object, unit: str = "") -> str:
        return "-" if v is None else f"{v:g}{unit}" if isinstance(v, float | int) else str(v)

    table = Table(title=f"{count} urgent {urgent} under each policy, {trials} trials")
    for col in ("policy", "cloud", "delay (s)", "paper 004 (s)", "VMs hit", "their cost",
                "refused"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("policy", "cloud") else "right")
    for r in rows:
        hit, cost = "-", "-"
        for key, label, unit in (
            ("preempted", "preempted", ""),
            ("suspended", "suspended", "suspended_for"),
            ("migrated", "migrated", "unavailable_for"),
            ("shrunk", "shrunk", "shrunk_for"),
        ):
            n = r[key]
            if isinstance(n, float) and n > 0:
                hit = f"{n:g} {label}"
                cost = "lost" if not unit else f"{fmt(r[unit])} s each"
        delay = (
            f"{fmt(r['delay_mean'])} ± {fmt(r['delay_sd'])}"
            if r["delay_mean"] is not None
            else "never"
        )
        if r["unplaced"]:
            delay += f" ({fmt(r['unplaced'])} left waiting)"
        paper = f"{fmt(r['paper_mean'])} ± {fmt(r['paper_sd'])}" if r["paper_mean"] else "-"
        table.add_row(str(r["policy"]), str(r["scenario"]), delay, paper, hit, cost,
                      fmt(r["refused"]))  # fmt: skip
    console.print(table)


def _scenario(nodes: int, fill: str, free: int, empty: bool) -> str:
    if empty:
        return f"{nodes} empty"
    return f"{nodes} of {fill}" + (f", {free} free" if free else ", full")
