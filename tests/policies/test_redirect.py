"""Paper 002's redirection strategies as live policies: which queued jobs go to the cloud.

The site below has 4 cores of its own; cloud ``a`` has 3 one-core VMs (waste 60 s).
A "full" site runs one 4-core job until NOW + 990.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from elasticsite.attributes import Selector
from elasticsite.model import Cause, Decision, Job, JobState, Launch
from elasticsite.snapshot import SiteSnapshot

from .conftest import NOW, cloud, decide, job, snap, worker

SITE_CORES = 4


def site(
    queued: list[Job],
    *,
    full: bool = True,
    running: list[Job] | None = None,
    **kwargs: object,
) -> SiteSnapshot:
    busy = [Job("big", 4, 1000.0, NOW - 20, JobState.RUNNING, started_at=NOW - 10, node="site1")]
    view = snap(queued, running=(busy if full else []) + (running or []), **kwargs)  # type: ignore[arg-type]
    if "clouds" not in kwargs:
        view.clouds = [cloud(max_instances=3)]
    view.site_cores = SITE_CORES
    return view


def redirected(d: Decision) -> list[str]:
    assert all(r.target == "cloud" and r.cause == Cause.REDIRECTED for r in d.redirect)
    return [r.job_id for r in d.redirect]


@pytest.mark.parametrize("policy", ["naive", "shortest_queue", "weighted_queue", "selective"])
def test_a_site_with_free_cores_keeps_its_jobs_and_boots_nothing(policy: str) -> None:
    d = decide(policy, site([job(), job()], full=False))
    assert d == Decision()


def test_shortest_queue_moves_jobs_until_the_cloud_queue_is_no_shorter() -> None:
    queued = [job(), job(), job()]
    d = decide("shortest_queue", site(queued))
    assert redirected(d) == [j.id for j in queued]
    assert d.launch == [Launch("a", "small", 3, Cause.DEMAND)]


def test_shortest_queue_stops_once_the_cloud_queue_is_the_longer() -> None:
    queued = [job(cores=2) for _ in range(4)]
    d = decide("shortest_queue", site(queued))
    # ratios site/cloud: 8/4 vs 0 (the cloud starts the first), 6/4 vs 0, 4/4 vs 2/3,
    # then 2/4 vs 4/3: the fourth job stays
    assert redirected(d) == [j.id for j in queued[:3]]


def test_weighted_queue_fills_the_cloud_up_to_the_smaller_of_demand_and_its_size() -> None:
    queued = [job() for _ in range(6)]
    d = decide("weighted_queue", site(queued))
    assert redirected(d) == [j.id for j in queued[:3]]
    assert d.launch == [Launch("a", "small", 3, Cause.DEMAND)]


def test_selective_moves_only_jobs_that_waited_past_the_threshold() -> None:
    waited = job(walltime=100.0, submitted_at=NOW - 500)  # expansion factor 6
    fresh = job(walltime=100.0, submitted_at=NOW)  # expansion factor 1
    d = decide("selective", site([waited, fresh]))
    assert redirected(d) == [waited.id]
    d = decide("selective", site([waited, fresh]), params={"selective_threshold": 10.0})
    assert redirected(d) == []


def test_naive_sends_a_job_the_site_cannot_start_to_a_cloud_that_can() -> None:
    first, second = job(), job()
    d = decide("naive", site([first, second]))
    assert redirected(d) == [first.id, second.id]


def test_jobs_already_in_the_cloud_partition_get_workers_without_a_redirect() -> None:
    there = Job("c1", 1, 100.0, NOW, attributes={"partition": "cloud"})
    d = decide("shortest_queue", site([there], full=False))
    assert d == Decision(launch=[Launch("a", "small", 1, Cause.DEMAND)])


def test_a_job_too_large_for_the_site_goes_to_a_cloud_it_fits() -> None:
    wide = job(cores=SITE_CORES + 1)
    d = decide("shortest_queue", site([wide], full=False, clouds=[cloud(max_instances=8)]))
    assert redirected(d) == [wide.id]
    too_wide = job(cores=9)
    assert redirected(decide("shortest_queue", site([too_wide], full=False))) == []


def test_workers_running_cloud_jobs_are_the_clouds_not_the_sites() -> None:
    on_worker = Job("r1", 1, 500.0, NOW - 50, JobState.RUNNING, started_at=NOW - 40, node="w1")
    view = site([job()], running=[on_worker])
    view.workers = [worker("w1", cores=1, state=worker("x").state.BUSY)]
    d = decide("weighted_queue", view)
    # the cloud has 1 of 3 VMs busy; the site wants 1: budget min(1, 3) - 1 = 0
    assert redirected(d) == []


def test_no_cloud_serving_the_target_means_no_redirect() -> None:
    gpu_only = replace(cloud(max_instances=3), serves=Selector.of({"partition": ["gpu"]}))
    d = decide("shortest_queue", site([job()], clouds=[gpu_only]))
    assert d == Decision()


def test_another_target_partition_is_honoured() -> None:
    queued = [job()]
    d = decide("shortest_queue", site(queued), redirect_to="burst")
    assert [(r.job_id, r.target) for r in d.redirect] == [(queued[0].id, "burst")]


def test_provisioning_by_a_redirecting_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="provision"):
        decide("naive", site([job()]), provision="selective")


def test_selective_thresholds_set_per_category() -> None:
    """Short ``a`` (100 s) has waited 500 s: expansion factor 6; long ``b`` (7200 s) has
    waited 3600 s: 1.5. One threshold of 2 moves ``a`` only; per category (short
    narrow 10, long narrow 1.2) only ``b``; with a 50 s runtime cut both are long
    narrow (threshold 10) and neither moves. ``selective_global`` has one category
    whatever the cuts: one number (1.2) moves both, a list of two is refused."""
    a = job(walltime=100.0, submitted_at=NOW - 500)
    b = job(walltime=7200.0, submitted_at=NOW - 3600)
    assert redirected(decide("selective", site([a, b]), params={"selective_threshold": 2})) == [
        a.id
    ]
    per_category = {"selective_threshold": [10, 1, 1.2, 1]}
    assert redirected(decide("selective", site([a, b]), params=per_category)) == [b.id]
    cut = {"selective_threshold": [1, 1, 10, 1], "selective_categories": {"runtime_cuts": [50]}}
    assert redirected(decide("selective", site([a, b]), params=cut)) == []
    one = {"selective_threshold": 1.2, "selective_categories": {"runtime_cuts": [50]}}
    assert redirected(decide("selective_global", site([a, b]), params=one)) == [a.id, b.id]
    with pytest.raises(ValueError, match=r"one per category in this order: any run any w"):
        decide("selective_global", site([a, b]), params={"selective_threshold": [10, 1]})
