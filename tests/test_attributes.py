"""Job attributes: checking, selectors, and the snapshot's demand per group."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elasticsite.attributes import EMPTY, InvalidAttribute, Selector, check, parse_pairs, values
from elasticsite.model import CloudSpec, Job
from elasticsite.snapshot import Demand, SiteSnapshot


def test_pairs_are_parsed_and_checked() -> None:
    assert parse_pairs(["partition=cloud", "slurm.reason=a=b"]) == {
        "partition": "cloud",
        "slurm.reason": "a=b",
    }
    for bad, message in [
        (["partition"], "KEY=VALUE"),
        (["Partition=x"], "attribute name"),
        (["qos=a", "qos=b"], "given twice"),
        (["name=a\x1bb"], "control characters"),
        ([f"name={'x' * 1025}"], "longer than"),
    ]:
        with pytest.raises(InvalidAttribute, match=message):
            parse_pairs(bad)
    check("vm_memory", "2048")


def test_the_shared_empty_mapping_is_one_object_everywhere() -> None:
    job = Job("1", 1, 60.0, 0.0)
    assert job.attributes is EMPTY and job.attributes == {}
    assert pickle.loads(pickle.dumps(job)).attributes is EMPTY
    assert copy.deepcopy(job).attributes is EMPTY
    with pytest.raises(TypeError):
        job.attributes["partition"] = "x"  # type: ignore[index]


def test_selectors_match_any_of_several_values_and_need_every_term() -> None:
    sel = Selector.of({"partition": ["cloud"], "vm_type": ["small", "large"]})
    assert sel.matches({"partition": "debug,cloud", "vm_type": "large"})
    assert not sel.matches({"partition": "cloud"})
    assert not sel.matches({"partition": "debug", "vm_type": "small"})
    assert Selector().matches({}) and not Selector()
    assert values({"partition": " a, b ,,"}, "partition") == ("a", "b")
    with pytest.raises(InvalidAttribute, match="at least one"):
        Selector.of({"partition": []})


def _jobs(draw: st.DrawFn) -> list[Job]:
    parts = st.sampled_from(["", "a", "b", "a,b"])
    specs = draw(st.lists(st.tuples(parts, st.integers(1, 8), st.integers(1, 500)), max_size=30))
    return [
        Job(str(i), cores, float(wall), 0.0, attributes={"partition": p} if p else EMPTY)
        for i, (p, cores, wall) in enumerate(specs)
    ]


@given(st.composite(_jobs)())
def test_demand_per_group_adds_up_to_the_matching_jobs(jobs: list[Job]) -> None:
    cloud = CloudSpec("c", serves=Selector.of({"partition": ["a"]}))
    snap = SiteSnapshot(0.0, jobs, [], [], [cloud, CloudSpec("all")])
    groups = snap.demand("partition")
    for value in ("a", "b", ""):
        members = [
            j for j in jobs if value in (j.attributes.get("partition", "").split(",") or [""])
        ]
        expected = Demand(
            len(members), sum(j.cores for j in members), sum(j.walltime for j in members)
        )
        assert groups.get(value, Demand()) == expected
    in_a = [j for j in jobs if "a" in j.attributes.get("partition", "").split(",")]
    assert snap.served("c") == groups.get("a", Demand())
    assert snap.queued_matching(cloud.serves) == in_a
    assert (
        snap.served("all")
        == snap.queued_demand
        == Demand(len(jobs), snap.queued_cores, snap.queued_walltime)
    )
    assert snap.with_workers([]).demand("partition") is groups  # computed once per snapshot
