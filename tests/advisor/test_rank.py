"""Ranking configurations, suggesting the least disruptive likely one, independent
speculative sets, and size classes."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.advisor import (
    Configuration,
    Overlap,
    Phase,
    Ranked,
    SizeClasses,
    composite,
    rank,
    speculative,
    suggest,
)
from elasticsite.advisor.rank import LEAST_DISRUPTIVE, independent, speculative_choice

HOUR = 3600.0


def phases(allocation: dict[float, float], execution: float = HOUR) -> list[Phase | Overlap]:
    return [Phase("allocation", allocation), Phase("execution", {0.95: execution})]


def config(resource: str, policy: str = "default", repository: str | None = None) -> Configuration:
    return Configuration(resource, 4, repository, policy)


def test_configurations_are_ranked_by_probability_then_bound() -> None:
    candidates = [
        (config("a"), phases({0.5: 1 * HOUR, 0.9: 6 * HOUR})),  # 0.5 * 0.95
        (config("b"), phases({0.9: 2 * HOUR})),  # 0.9 * 0.95 at 3 h
        (config("c"), phases({0.9: 1 * HOUR})),  # 0.9 * 0.95 at 2 h: ahead of b
        (config("d"), phases({0.99: 9 * HOUR})),  # nothing fits
        (
            config("e"),
            [Phase("allocation", {}, "needs at least 59 observations ..."), Phase("x", {0.5: 1.0})],
        ),
    ]
    ranked = rank(candidates, deadline=4 * HOUR, quantiles=[0.5, 0.9, 0.95, 0.99])
    assert [r.configuration.resource for r in ranked] == ["c", "b", "a", "d", "e"]
    assert ranked[0].probability == pytest.approx(0.855) and ranked[0].bound == 2 * HOUR
    assert ranked[3].composite is None and ranked[3].probability == 0.0
    assert ranked[3].reason == "even the shortest bound, 10h00m, is past the deadline of 4h00m"
    assert ranked[4].reason == "allocation: needs at least 59 observations ..."
    # A threshold drops the unlikely ones, unless asked to keep them with the reason.
    kept = rank(candidates, 4 * HOUR, None, threshold=0.6)
    assert [r.configuration.resource for r in kept] == ["c", "b"]
    shown = rank(candidates, 4 * HOUR, None, threshold=0.6, keep_below=True)
    assert len(shown) == 5
    assert shown[2].reason == "probability 0.475 is below the threshold 0.6"


def test_the_least_disruptive_likely_policy_is_suggested() -> None:
    candidates = [
        (config("hpc", "preemption"), phases({0.99: HOUR})),
        (config("hpc", "next_to_run"), phases({0.9: 2 * HOUR})),
        (config("hpc", "default"), phases({0.5: 2 * HOUR})),
    ]
    ranked = rank(candidates, 4 * HOUR, None)
    assert ranked[0].configuration.policy == "preemption"
    choice = suggest(ranked, threshold=0.8)
    assert choice is not None and choice.configuration.policy == "next_to_run"
    # If next-to-run is not likely enough, preemption is what is left.
    choice = suggest(ranked, threshold=0.9)
    assert choice is not None and choice.configuration.policy == "preemption"
    assert suggest(ranked, threshold=0.99) is None
    assert suggest(ranked, threshold=0.0) == ranked[-1]  # default disturbs nobody


def test_policy_order_and_validation() -> None:
    assert LEAST_DISRUPTIVE.index("next_to_run") < LEAST_DISRUPTIVE.index("preemption")
    assert config("x", "suspension").disruption > config("x", "qos").disruption
    with pytest.raises(ValueError, match="policy 'urgent' is not one of default, next_to_run"):
        Configuration("hpc", 4, None, "urgent")
    with pytest.raises(ValueError, match="nodes must be a whole number >= 1, got 0"):
        Configuration("hpc", 0, None, "default")
    with pytest.raises(ValueError, match="resource name"):
        Configuration("", 1, None, "default")
    assert Configuration("hpc", 1, "ucar", "qos").label == "hpc, 1 node, qos, input from ucar"
    assert Configuration("hpc", 8, None, "default").label == "hpc, 8 nodes, default"
    with pytest.raises(ValueError, match="threshold must be between 0 and 1"):
        rank([], HOUR, None, threshold=1.5)


def test_independence_needs_distinct_resources_and_repositories() -> None:
    assert independent(config("a", repository="r1"), config("b", repository="r2"))
    assert independent(config("a"), config("b"))
    assert not independent(config("a", repository="r1"), config("a", repository="r2"))
    assert not independent(config("a", repository="r1"), config("b", repository="r1"))


def ranked_set(*entries: tuple[Configuration, float]) -> list[Ranked]:
    return rank([(c, [Phase("run", {p: 1.0})]) for c, p in entries], 10.0, None)


def test_speculative_pair_of_075_and_070() -> None:
    ranked = ranked_set(
        (config("a", repository="r1"), 0.75),
        (config("b", repository="r2"), 0.70),
        (config("c", repository="r3"), 0.5),
    )
    choice = speculative_choice(ranked)
    assert [m.configuration.resource for m in choice.members] == ["a", "b"]
    assert choice.probability == pytest.approx(0.925)
    assert choice.reason == ""


def test_shared_resource_or_repository_is_named() -> None:
    ranked = ranked_set(
        (config("a", "preemption", "r1"), 0.8),
        (config("a", "next_to_run", "r1"), 0.75),
        (config("b", "default", "r1"), 0.7),
        (config("c", "default", "r2"), 0.6),
    )
    choice = speculative_choice(ranked)
    assert [m.configuration.resource for m in choice.members] == ["a", "c"]
    assert choice.probability == pytest.approx(1 - 0.2 * 0.4)
    assert choice.reason == (
        "a, 4 nodes, preemption, input from r1 and a, 4 nodes, next_to_run, input from r1 "
        "share the resource a"
    )
    alone = speculative_choice(
        ranked_set((config("a", repository="r"), 0.8), (config("b", repository="r"), 0.7))
    )
    assert len(alone.members) == 1 and alone.probability == 0.8
    assert "share the repository r" in alone.reason
    assert "no other configuration" in alone.reason
    assert speculative_choice([]).reason == "no configuration can meet the deadline"


@settings(max_examples=80, deadline=None)
@given(
    entries=st.lists(
        st.tuples(
            st.sampled_from("abcd"), st.sampled_from(["r1", "r2", "r3", None]), st.integers(1, 99)
        ),
        min_size=1,
        max_size=9,
    ),
    k=st.integers(1, 3),
)
def test_speculative_choice_is_the_best_independent_set(
    entries: list[tuple[str, str | None, int]], k: int
) -> None:
    ranked = ranked_set(
        *(
            (Configuration(r, 1 + i, repo, "default"), p / 100)
            for i, (r, repo, p) in enumerate(entries)
        )
    )
    choice = speculative_choice(ranked, k)
    members = [m.configuration for m in choice.members]
    assert all(independent(a, b) for a, b in itertools.combinations(members, 2))
    best = max(
        speculative(m.probability for m in subset)
        for size in range(1, k + 1)
        for subset in itertools.combinations(ranked, size)
        if all(
            independent(a.configuration, b.configuration)
            for a, b in itertools.combinations(subset, 2)
        )
    )
    assert choice.probability == pytest.approx(best, abs=1e-12)


def test_rank_agrees_with_composite() -> None:
    candidates = [
        (config(r), phases({0.5: h * HOUR, 0.9: 2 * h * HOUR}))
        for r, h in zip("abc", (1, 1.5, 3), strict=True)
    ]
    for entry in rank(candidates, 5 * HOUR, None):
        expected = composite(dict(candidates)[entry.configuration], 5 * HOUR)
        assert entry.composite == expected


# -- size classes -------------------------------------------------------------------------


def test_default_size_classes_double() -> None:
    sizes = SizeClasses()
    labels = [sizes.label(n) for n in (1, 2, 3, 4, 5, 8, 9, 16, 17, 512, 513)]
    assert labels == [
        "1",
        "2",
        "3-4",
        "3-4",
        "5-8",
        "5-8",
        "9-16",
        "9-16",
        "17-32",
        "257-512",
        "513-1024",
    ]
    # a 4-node job is bounded from 3-4-node history, not 512-node history
    assert sizes.label(4) != sizes.label(512)
    assert sizes.bounds("3-4") == (3, 4)
    assert str(sizes) == "powers of two"


def test_configured_size_classes() -> None:
    sizes = SizeClasses.parse("1, 4, 16, 64")
    assert [sizes.label(n) for n in (1, 2, 4, 5, 64, 65, 1000)] == [
        "1",
        "2-4",
        "2-4",
        "5-16",
        "17-64",
        "65+",
        "65+",
    ]
    assert sizes.bounds("65+") == (65, None)
    assert SizeClasses.parse([1, 4, 16, 64]) == sizes
    assert SizeClasses.parse("") == SizeClasses() == SizeClasses.parse(None)
    with pytest.raises(ValueError, match="size class '3-4' is not one of these classes"):
        sizes.bounds("3-4")
    with pytest.raises(ValueError, match="size class edges must increase, got 4, 2"):
        SizeClasses((4, 2))
    with pytest.raises(ValueError, match="'x' is not a node count"):
        SizeClasses.parse("1, x")
    with pytest.raises(ValueError, match="a node count must be a whole number >= 1, got 0"):
        sizes.label(0)


@given(
    nodes=st.integers(1, 10**6),
    edges=st.lists(st.integers(1, 5000), min_size=1, max_size=8, unique=True),
)
def test_every_node_count_is_in_the_class_it_is_labelled(nodes: int, edges: list[int]) -> None:
    for sizes in (SizeClasses(), SizeClasses(tuple(sorted(edges)))):
        low, high = sizes.bounds(sizes.label(nodes))
        assert low <= nodes and (high is None or nodes <= high)
