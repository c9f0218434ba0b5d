"""The advisor service: configurations from the settings, phases from the site's history."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as settings_hypothesis
from hypothesis import strategies as st

from elasticsite.advisor.service import Advisor, NothingToRank
from elasticsite.config.advisor import AdvisorConfig
from elasticsite.history.observations import HistoryStore, Observation

HOUR = 3600.0
_clock = itertools.count(1)


def add(store: HistoryStore, phase: str, resource: str, values: list[float], **key: Any) -> None:
    """``values`` under one key, each observed a second after the one before."""
    store.add(
        Observation(
            phase=phase, resource=resource, value=v, at=float(next(_clock)), source="csv", **key
        )
        for v in values
    )


def settings(**over: Any) -> AdvisorConfig:
    base: dict[str, Any] = {
        "resources": [
            {
                "name": "hpc",
                "nodes": [4],
                "policies": ["default", "next_to_run", "preemption"],
                "app": "flash",
            }
        ]
    }
    return AdvisorConfig.model_validate({**base, **over})


@pytest.fixture
def store(tmp_path: Path) -> HistoryStore:
    return HistoryStore(tmp_path / "advisor.db")


def flash(store: HistoryStore, resource: str = "hpc", seconds: float = HOUR, n: int = 60) -> None:
    add(store, "execution", resource, [seconds] * n, app="flash", nodes=4)


def labels(ranked: Any) -> list[str]:
    return [r.configuration.label for r in ranked]


def test_each_policy_is_bounded_from_its_own_queue_waits(store: HistoryStore) -> None:
    flash(store)
    add(store, "allocation", "hpc", [2 * HOUR] * 30, nodes=4)  # default: 30 waits, up to 0.9
    add(store, "allocation", "hpc", [600.0] * 60, nodes=4, policy="next_to_run")
    advice = Advisor(store, settings()).advise(6 * HOUR)
    first, second = advice.ranked
    assert first.configuration.policy == "next_to_run"
    assert first.composite is not None
    assert first.probability == pytest.approx(0.95 * 0.95)
    assert first.composite.bound == 600.0 + HOUR
    assert dict(first.composite.quantiles) == {"allocation": 0.95, "execution": 0.95}
    assert second.configuration.policy == "default"
    assert second.probability == pytest.approx(0.9 * 0.95)
    assert second.bound == 3 * HOUR
    # Both are likely enough: the suggestion disturbs nobody.
    assert advice.suggestion is second
    (dropped,) = advice.dropped
    assert dropped.configuration.policy == "preemption"
    assert dropped.reason == "allocation: no history of hpc under policy preemption for 3-4 nodes"
    assert advice.observations == 150


def test_a_short_history_offers_only_the_quantiles_it_can_bound(store: HistoryStore) -> None:
    flash(store)
    add(store, "allocation", "hpc", [60.0] * 3, nodes=4)
    advice = Advisor(store, settings()).advise(6 * HOUR)
    default = next(r for r in advice.dropped if r.configuration.policy == "default")
    assert default.composite is None
    assert default.reason == (
        "allocation: needs at least 5 observations for the 0.5 quantile at 0.95 confidence; has 3"
    )
    add(store, "allocation", "hpc", [60.0] * 2, nodes=4)  # now 5: the median is bounded
    again = Advisor(store, settings(threshold=0.4)).advise(6 * HOUR)
    (default,) = again.ranked
    assert default.composite is not None
    assert dict(default.composite.quantiles) == {"allocation": 0.5, "execution": 0.95}


def test_a_job_is_bounded_by_its_own_size_class(store: HistoryStore) -> None:
    flash(store)
    add(store, "allocation", "hpc", [300.0] * 60, nodes=3)  # 3-4 nodes: the class of 4
    add(store, "allocation", "hpc", [20 * HOUR] * 60, nodes=512)
    advice = Advisor(store, settings()).advise(6 * HOUR)
    default = next(r for r in advice.ranked if r.configuration.policy == "default")
    assert default.bound == 300.0 + HOUR
    custom = Advisor(store, settings(size_classes=[2, 1024])).advise(6 * HOUR)  # 3-1024
    assert all(r.configuration.policy != "default" for r in custom.ranked)


def test_a_cloud_request_is_bounded_by_requests_of_exactly_its_size(store: HistoryStore) -> None:
    cloud = {"name": "ec2", "kind": "cloud", "nodes": [3, 4], "app": "flash"}
    flash(store, "ec2")
    add(store, "execution", "ec2", [HOUR] * 60, app="flash", nodes=3)
    add(store, "allocation", "ec2", [90.0] * 60, nodes=4)
    advice = Advisor(store, settings(resources=[cloud])).advise(6 * HOUR)
    assert labels(advice.ranked) == ["ec2, 4 nodes, default"]
    assert labels(advice.dropped) == ["ec2, 3 nodes, default"]
    assert advice.dropped[0].reason == (
        "allocation: no history of ec2 under policy default for 3 instances"
    )


def staged(**over: Any) -> AdvisorConfig:
    base: dict[str, Any] = {
        "resources": [{"name": "hpc", "nodes": [4], "app": "flash"}],
        "repositories": [{"name": "ucar", "url": "https://data.example.org/input"}],
        "input_bytes": 4 * 10**9,
    }
    return settings(**{**base, **over})


def probes(store: HistoryStore, seconds_per_byte: float, n: int = 20, **key: Any) -> None:
    key = {"resource": "lab", **key}
    add(
        store,
        "probe",
        key.pop("resource"),
        [seconds_per_byte] * n,
        repository="ucar",
        nbytes=10**6,
        **key,
    )


def test_input_staging_overlaps_the_queue_wait_unless_told_not_to(store: HistoryStore) -> None:
    flash(store)
    add(store, "allocation", "hpc", [600.0] * 60, nodes=4)
    probes(store, 1e-7)  # 4 GB at 10 MB/s: 400 s, known exactly (every forecaster is right)
    overlapped = Advisor(store, staged()).advise(6 * HOUR).ranked[0]
    assert overlapped.configuration.label == "hpc, 4 nodes, default, input from ucar"
    assert overlapped.composite is not None
    assert overlapped.composite.bound == pytest.approx(600.0 + HOUR)  # max(400, 600) + run
    assert overlapped.composite.bounds["input"] == pytest.approx(400.0)
    assert overlapped.probability == pytest.approx(0.99 * 0.95 * 0.95)
    serial = Advisor(store, staged(overlap_input=False)).advise(6 * HOUR).ranked[0]
    assert serial.bound == pytest.approx(400.0 + 600.0 + HOUR)


def test_staging_uses_probes_to_that_resource_when_there_are_some(store: HistoryStore) -> None:
    flash(store)
    add(store, "allocation", "hpc", [600.0] * 60, nodes=4)
    probes(store, 1e-7)  # to the head node
    advisor = Advisor(store, staged(overlap_input=False))
    assert advisor.advise(6 * HOUR).ranked[0].bound == pytest.approx(400.0 + 600.0 + HOUR)
    probes(store, 1e-6, resource="hpc")  # measured on hpc itself: 4,000 s
    assert advisor.advise(6 * HOUR).ranked[0].bound == pytest.approx(4000.0 + 600.0 + HOUR)


def test_output_goes_to_its_own_repository(store: HistoryStore) -> None:
    flash(store)
    add(store, "allocation", "hpc", [600.0] * 60, nodes=4)
    probes(store, 1e-7)
    advice = Advisor(
        store,
        staged(
            repositories=[
                {"name": "ucar", "url": "https://data.example.org/input"},
                {"name": "iu", "command": ["globus-url-copy"]},
            ],
            output_bytes=10**9,
            output_repository="iu",
        ),
    ).advise(6 * HOUR)
    assert advice.ranked == ()
    assert {r.configuration.label: r.reason for r in advice.dropped} == {
        "hpc, 4 nodes, default, input from ucar": "output: no probes of repository iu",
        "hpc, 4 nodes, default, input from iu": "input: no probes of repository iu",
    }


def test_asking_again_reads_only_what_is_new(store: HistoryStore) -> None:
    flash(store)
    add(store, "allocation", "hpc", [600.0] * 60, nodes=4, policy="next_to_run")
    advisor = Advisor(store, settings())
    assert advisor.refresh() == 120
    assert advisor.refresh() == 0
    assert labels(advisor.advise(6 * HOUR).ranked) == ["hpc, 4 nodes, next_to_run"]
    add(store, "allocation", "hpc", [900.0] * 60, nodes=4)
    advice = advisor.advise(6 * HOUR)
    assert labels(advice.ranked) == ["hpc, 4 nodes, next_to_run", "hpc, 4 nodes, default"]
    assert advice.observations == 180


def test_a_late_arrival_is_placed_in_time_order(store: HistoryStore) -> None:
    flash(store)
    add(store, "allocation", "hpc", [100.0] * 60, nodes=4)
    advisor = Advisor(store, settings())
    advisor.advise(6 * HOUR)
    # An import of older waits, stored after the newer ones: the history is rebuilt in
    # time order, so the advisor answers as one that read everything at once.
    store.add(
        Observation(phase="allocation", resource="hpc", nodes=4, value=5000.0 + i, at=0.5 + i / 1e3,
                    source="sacct", ref=str(i))
        for i in range(40)
    )  # fmt: skip
    late = advisor.advise(6 * HOUR).ranked
    fresh = Advisor(store, settings()).advise(6 * HOUR).ranked
    assert [(r.probability, r.bound) for r in late] == [(r.probability, r.bound) for r in fresh]


def test_two_unlikely_configurations_may_be_likely_together(store: HistoryStore) -> None:
    two = [
        {"name": "hpc", "nodes": [4], "app": "flash"},
        {"name": "ec2", "kind": "cloud", "nodes": [4], "app": "flash"},
    ]
    for resource in ("hpc", "ec2"):
        flash(store, resource)
        # Two short waits for one long one: the median is bounded by a short wait.
        add(store, "allocation", resource, [60.0, 60.0, 9 * HOUR] * 20, nodes=4)
    advice = Advisor(store, settings(resources=two)).advise(6 * HOUR)
    assert advice.ranked == ()  # each: the 0.5 quantile of the wait and the 0.95 of the run
    assert [r.probability for r in advice.dropped] == pytest.approx([0.475, 0.475])
    assert advice.speculative is not None
    assert sorted(labels(advice.speculative.members)) == [
        "ec2, 4 nodes, default",
        "hpc, 4 nodes, default",
    ]
    assert advice.speculative.probability == pytest.approx(1 - 0.525**2)


def test_threshold_and_quantiles_may_be_asked_per_question(store: HistoryStore) -> None:
    flash(store)
    add(store, "allocation", "hpc", [600.0] * 60, nodes=4)
    advisor = Advisor(store, settings(threshold=0.95))
    assert advisor.advise(6 * HOUR).ranked == ()
    assert labels(advisor.advise(6 * HOUR, threshold=0.9).ranked) == ["hpc, 4 nodes, default"]
    only_median = advisor.advise(6 * HOUR, threshold=0.2, quantiles=[0.5]).ranked[0]
    assert only_median.probability == pytest.approx(0.25)


def test_a_deadline_too_close_says_how_long_even_the_shortest_bound_is(
    store: HistoryStore,
) -> None:
    flash(store)
    add(store, "allocation", "hpc", [600.0] * 60, nodes=4)
    (r,) = Advisor(store, settings()).advise(HOUR).dropped[:1]
    assert r.reason == "even the shortest bound, 1h10m, is past the deadline of 1h00m"


def test_nothing_configured_is_nothing_to_rank(store: HistoryStore) -> None:
    with pytest.raises(NothingToRank, match=r"no resources to rank: add \[\[advisor.resources\]\]"):
        Advisor(store, AdvisorConfig()).advise(HOUR)


def test_the_answer_is_json_able(store: HistoryStore) -> None:
    flash(store)
    add(store, "allocation", "hpc", [600.0] * 60, nodes=4)
    data = Advisor(store, settings()).advise(2 * HOUR).to_json()
    assert data["ranked"][0] == {
        "label": "hpc, 4 nodes, default",
        "resource": "hpc",
        "nodes": 4,
        "repository": None,
        "policy": "default",
        "probability": pytest.approx(0.9025),
        "bound": 4200.0,
        "phases": [
            {"phase": "allocation", "quantile": 0.95, "bound": 600.0},
            {"phase": "execution", "quantile": 0.95, "bound": 3600.0},
        ],
        "reason": "",
    }
    assert data["suggestion"] == data["ranked"][0]
    assert data["speculative"] is None
    assert data["speculative_reason"] == "fewer than two configurations can meet the deadline"


@settings_hypothesis(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["default", "next_to_run"]),
                st.floats(min_value=0.0, max_value=1000.0),
                st.floats(min_value=1.0, max_value=4 * HOUR),
            ),
            min_size=1,
            max_size=40,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_asking_after_each_batch_answers_as_reading_everything_at_once(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[tuple[str, float, float]]]
) -> None:
    store = HistoryStore(tmp_path_factory.mktemp("h") / "advisor.db")
    flash(store)
    advisor = Advisor(store, settings())
    for batch in batches:
        store.add(
            Observation(phase="allocation", resource="hpc", policy=p, nodes=4, value=v, at=at,
                        source="csv")
            for p, at, v in batch
        )  # fmt: skip
        advisor.advise(6 * HOUR)
    got = advisor.advise(6 * HOUR)
    fresh = Advisor(store, settings()).advise(6 * HOUR)
    assert [
        (r.configuration, r.probability, r.bound, r.reason) for r in got.ranked + got.dropped
    ] == [(r.configuration, r.probability, r.bound, r.reason) for r in fresh.ranked + fresh.dropped]
