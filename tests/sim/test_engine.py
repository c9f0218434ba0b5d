"""The event engine and the cloud model: order, determinism, distributions."""

from __future__ import annotations

import random

import pytest

from elasticsite.sim.cloud import CloudModel, Durations
from elasticsite.sim.engine import Simulation


def test_events_run_in_time_then_scheduling_order() -> None:
    sim = Simulation()
    seen: list[tuple[float, str]] = []

    def note(tag: str) -> None:
        seen.append((sim.now, tag))

    sim.at(5.0, note, "b")
    sim.at(1.0, note, "a")
    sim.at(5.0, note, "c")  # same instant as "b": runs after it

    def chain(_: object) -> None:
        note("d")
        sim.after(0.0, note, "e")  # scheduled during the instant: still runs at it

    sim.at(5.0, chain)
    sim.run()
    assert seen == [(1.0, "a"), (5.0, "b"), (5.0, "c"), (5.0, "d"), (5.0, "e")]
    assert sim.events == 5 and len(sim) == 0


def test_run_until_stops_and_resumes() -> None:
    sim = Simulation()
    seen: list[float] = []
    for t in (1.0, 2.0, 3.0):
        sim.at(t, lambda _: seen.append(sim.now))
    sim.run(until=2.5)
    assert seen == [1.0, 2.0] and sim.now == 2.5 and sim.peek() == 3.0
    sim.run()
    assert seen == [1.0, 2.0, 3.0]


def test_no_scheduling_in_the_past() -> None:
    sim = Simulation(start=10.0)
    with pytest.raises(ValueError, match=r"clock is already at 10\.0"):
        sim.at(9.0, lambda _: None)


def test_progress_is_reported() -> None:
    sim = Simulation()
    for t in range(10):
        sim.at(float(t), lambda _: None)
    marks: list[float] = []
    sim.run(progress=marks.append, every=4)
    assert marks == [3.0, 7.0]


def test_durations_sample_within_their_law() -> None:
    rng = random.Random(1)
    assert Durations.constant(6).sample(rng) == 6.0
    boots = [Durations.uniform(74, 205).sample(rng) for _ in range(1000)]
    assert min(boots) >= 74 and max(boots) <= 205
    assert Durations.uniform(74, 205).mean == 139.5
    emp = Durations.empirical([60, 62, 90])
    assert {emp.sample(rng) for _ in range(200)} == {60.0, 62.0, 90.0}
    with pytest.raises(ValueError, match="low <= high"):
        Durations.uniform(5, 1)
    with pytest.raises(ValueError, match="unknown duration kind"):
        Durations("normal", (1.0,))


def test_cloud_model_bills_and_describes_itself() -> None:
    cloud = CloudModel(
        "ec2", vm_limit=144, boot=Durations.uniform(74, 205), shutdown=Durations.constant(4)
    )
    assert cloud.cost(1800) == pytest.approx(0.10)  # a started hour is a whole hour
    assert cloud.cost(3601) == pytest.approx(0.20)
    assert CloudModel(billing_increment=1).cost(1800) == pytest.approx(0.05)
    spec = cloud.spec()
    assert spec.max_instances == 144 and spec.waste_time == pytest.approx(143.5)
