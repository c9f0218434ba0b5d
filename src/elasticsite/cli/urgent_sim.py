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
    nodes: Annotated[PositiveInt, typer.Option(help="Hosts of 8 cores and 16 GB.")] = 1,
    fill: Annotated[str, typer.Option(help="Type of the non-urgent VMs filling the cloud.")] = (
        "c1.xlarge"
    ),
    urgent: Annotated[str, typer.Option(help="Type of the urgent VMs.")] = "c1.xlarge",
    count: Annotated[PositiveInt, typer.Option(help="Urgent VMs asked for at once.")] = 1,
    volunteers: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of non-urgent owners who volunteer.")
    ] = 0.25,
    free_cores: Annotated[
        NonNegativeInt,
        typer.Option(help="Cores the fill leaves free per host (migration needs some)."),
    ] = 0,
    trials: Annotated[int, typer.Option(min=1, max=10_000)] = 25,
    seed: Annotated[NonNegativeInt, typer.Option()] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per policy.")] = False,
) -> None:
    """Replay urgent VMs on a full finite cloud under each policy, next to paper 004's figures.

    The delays are drawn from paper 004's measurements (Tables 4.12 to 4.24); what the
    simulation adds is which VMs each policy hits and what that costs their owners.
    Migration needs room elsewhere: with ``--free-cores 0`` it falls back to waiting.
    """
    from elasticsite.sim.urgent_cloud import Scenario, summarize
    from elasticsite.urgent.capacity import CloudPolicy
    from elasticsite.urgent.cloud_delays import reference

    chosen = policy or list(_POLICIES)
    rows = []
    for name in chosen:
        if name not in _POLICIES:
            raise fail(f"unknown cloud policy {name!r}; choose from {', '.join(_POLICIES)}")
        try:
            sc = Scenario(
                policy=CloudPolicy(name),
                nodes=nodes,
                fill=fill,
                urgent=urgent,
                urgent_count=count,
                volunteers=volunteers,
                free_cores=free_cores,
            )
        except ValueError as exc:
            raise fail(str(exc)) from None
        row = summarize(sc, trials=trials, seed=seed)
        ref = reference(name, fill) if count == 1 and urgent == "c1.xlarge" else None
        row["paper_mean"], row["paper_sd"] = ref if ref else (None, None)
        rows.append(row)
    if as_json:
        for row in rows:
            print(json.dumps(row))
        return
    from rich.table import Table

    def fmt(v: object, unit: str = "") -> str:
        return "-" if v is None else f"{v:g}{unit}" if isinstance(v, float | int) else str(v)

    table = Table(
        title=f"{count} urgent {urgent} on {nodes} full node(s) of {fill}, {trials} trials"
    )
    for col in ("policy", "delay (s)", "paper 004 (s)", "VMs hit", "their cost", "refused"):
        table.add_column(col, justify="left" if col == "policy" else "right")
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
        table.add_row(str(r["policy"]), delay, paper, hit, cost, fmt(r["refused"]))
    console.print(table)
