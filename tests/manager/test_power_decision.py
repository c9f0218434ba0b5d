"""Slurm's power requests as a decision: what to do and what to tell, before the manager
carries it out (tests/manager/test_power_save.py runs it in a live manager)."""

from __future__ import annotations

import calendar
import logging

from elasticsite.manager.power import power_decision
from elasticsite.model import Cause, CloudSpec, Terminate, VMType, Worker, WorkerState
from elasticsite.policies.base import PolicySettings
from elasticsite.spend import Budget

S = WorkerState
NIGHT = float(calendar.timegm((2025, 1, 31, 20, 0, 0)))
"""Four hours before the month ends: an hourly worker launched now costs 4 hours."""


def cloud(max_instances: int = 4, price: float = 0.0) -> CloudSpec:
    return CloudSpec(
        "a",
        max_instances=max_instances,
        price_per_hour=price,
        billing_increment=3600.0,
        vm_types=(VMType("small", 1),),
    )


def worker(wid: str, node: str, state: WorkerState) -> Worker:
    return Worker(wid, "a", "small", 1, 0.0, state=state, node=node)


def test_each_nodes_last_request_is_the_one_carried_out() -> None:
    workers = [worker("a-1", "n1", S.IDLE), worker("a-2", "n2", S.TERMINATED)]
    requests = [
        ("suspend", "n1", 1.0),
        ("resume", "n3", 2.0),
        ("resume", "n2", 3.0),  # its old worker is finished: a new one is started
        ("suspend", "n3", 4.0),  # n3 asked back before it was started
    ]
    out = power_decision(requests, workers, [cloud()], PolicySettings(), None, NIGHT)
    assert out.decision.terminate == [Terminate("a-1", Cause.POWER_DOWN)]
    assert [launch.nodes for launch in out.decision.launch] == [("n2",)]
    assert out.refused == [] and out.problems == []
    assert out.log == [(logging.INFO, "power saving: resume ['n2'], suspend ['n1', 'n3']")]


def test_nodes_beyond_the_cap_are_refused_and_said_in_the_report_and_the_log() -> None:
    workers = [worker("a-1", "n1", S.IDLE)]
    requests = [("resume", n, 1.0) for n in ("n2", "n3")]
    out = power_decision(requests, workers, [cloud(max_instances=2)], PolicySettings(), None, 0.0)
    assert [launch.nodes for launch in out.decision.launch] == [("n2",)]
    assert out.refused == ["n3"]
    assert out.problems == ["power saving: no cloud may take n3 now"]
    assert (
        logging.WARNING,
        "power saving: no cloud may take n3 now (caps, spend limit or budget); "
        "Slurm's resume timeout will apply",
    ) in out.log


def test_what_was_spent_in_the_period_counts_against_the_budget() -> None:
    settings = PolicySettings(budget=Budget(10.0, "month"))
    requests = [("resume", n, 1.0) for n in ("n1", "n2", "n3")]
    hourly = [cloud(price=1.0)]
    # Each worker started now costs 4 hours at 1.0 to the month's end.
    assert power_decision(requests, [], hourly, settings, 0.0, NIGHT).refused == ["n3"]
    later = power_decision(requests, [], hourly, settings, 3.0, NIGHT)
    assert [launch.nodes for launch in later.decision.launch] == [("n1",)]
    assert later.refused == ["n2", "n3"]
