"""Which queued jobs the clouds could serve, and the reasons given for the others."""

from __future__ import annotations

from dataclasses import replace

from elasticsite.attributes import EMPTY, Selector
from elasticsite.feasibility import Judge, judge, runs_on_site, why_unservable
from elasticsite.model import CloudSpec, Job, VMType, Worker, WorkerState
from elasticsite.servable import QueueVerdict
from elasticsite.servable import split as split_snapshot
from elasticsite.snapshot import SiteSnapshot

SMALL = VMType("small", 1, 2048)
M1 = VMType("m1.small", 1, 1740)
QUAD = VMType("quad", 4, 8192)
EIGHT = VMType("eight", 8, 16384)


def job(cores: int = 1, jid: str = "1", **attributes: str) -> Job:
    return Job(jid, cores, 600.0, 0.0, attributes=attributes or EMPTY)


def cloud(name: str = "private", *types: VMType, **over: object) -> CloudSpec:
    return replace(CloudSpec(name, vm_types=types or (SMALL,)), **over)


def split(queued: list[Job], workers: list[Worker], judged: Judge) -> QueueVerdict:
    return split_snapshot(SiteSnapshot(0.0, queued, [], workers, judged.clouds), judged)


LOCAL = [cloud("private", SMALL, max_instances=4), cloud("public", M1, max_instances=16)]
"""examples/local.toml's clouds."""


def test_a_job_some_type_fits_is_servable() -> None:
    assert why_unservable(job(1), LOCAL) is None
    assert why_unservable(job(8), [cloud("a", SMALL, EIGHT)]) is None


def test_too_many_cores_for_the_largest_type() -> None:
    assert why_unservable(job(64), LOCAL) == "needs 64 cores; the largest VM type offers 1"
    clouds = [cloud("a", SMALL, QUAD), cloud("b", EIGHT)]
    assert why_unservable(job(64), clouds) == "needs 64 cores; the largest VM type offers 8"


def test_a_multi_node_job_needs_its_share_per_node_and_that_many_workers() -> None:
    clouds = [cloud("a", QUAD, max_instances=4)]
    assert why_unservable(job(16, node_count="4"), clouds) is None
    assert why_unservable(job(32, node_count="4"), clouds) == (
        "needs 8 cores on each of 4 nodes; the largest VM type offers 4"
    )
    assert why_unservable(job(8, node_count="8"), clouds) == (
        "needs 8 nodes; the clouds that could run it may start at most 4 workers"
    )


def test_a_named_vm_type_must_be_offered() -> None:
    assert why_unservable(job(vm_type="gpu"), LOCAL) == (
        "asks for VM type 'gpu'; the clouds offer small, m1.small"
    )
    assert why_unservable(job(vm_type="m1.small"), LOCAL) is None
    # Named, offered, but too small for the job.
    assert why_unservable(job(4, vm_type="small"), [cloud("a", SMALL, QUAD)]) == (
        "needs 4 cores; the largest VM type offers 1"
    )


def test_vm_cores_and_memory() -> None:
    clouds = [cloud("a", SMALL, QUAD)]
    assert why_unservable(job(1, vm_cores="4"), clouds) is None
    assert why_unservable(job(1, vm_cores="16"), clouds) == (
        "asks for VMs of 16 cores; the largest VM type offers 4"
    )
    assert why_unservable(job(1, vm_memory="8192"), clouds) is None
    assert why_unservable(job(1, vm_memory="65536"), clouds) == (
        "asks for 65536 MiB of memory; the largest VM type offers 8192 MiB"
    )
    # Not a number: not judged.
    assert why_unservable(job(1, vm_memory="lots"), clouds) is None


def test_an_image_must_be_one_a_cloud_boots_when_clouds_say() -> None:
    ec2 = cloud("ec2", SMALL, QUAD, images=(("small", "ami-1"), ("quad", "ami-2")))
    assert why_unservable(job(4, vm_image="ami-2"), [ec2]) is None
    assert why_unservable(job(4, vm_image="ami-1"), [ec2]) == (
        "needs 4 cores; the largest VM type offers 1"
    )
    assert why_unservable(job(1, vm_image="ami-9"), [ec2]) == (
        "asks for image 'ami-9'; the clouds boot ami-1, ami-2"
    )
    # A cloud that does not say what it boots is not judged on images.
    assert why_unservable(job(1, vm_image="ami-9"), [ec2, cloud("local")]) is None


def test_partition_served_by_no_cloud() -> None:
    clouds = [cloud("a", serves=Selector.of({"partition": ["cloud"]}))]
    assert why_unservable(job(partition="site"), clouds) == "partition 'site' is served by no cloud"
    assert why_unservable(job(partition="cloud"), clouds) is None
    assert why_unservable(job(partition="site,cloud"), clouds) is None
    assert why_unservable(job(), clouds) == (
        "gives no partition, and the clouds serve partition cloud only"
    )
    two = [*clouds, cloud("b", serves=Selector.of({"qos": ["high"]}))]
    assert why_unservable(job(partition="site", qos="low"), two) == (
        "no cloud serves it (a: partition 'site'; b: qos 'low')"
    )


def test_a_redirecting_site_judges_a_job_where_it_could_be_sent() -> None:
    clouds = [cloud("a", SMALL, QUAD, serves=Selector.of({"partition": ["cloud"]}))]
    judged = judge(clouds, redirect_to="cloud")
    assert judged.verdict(judged.key(job(4, partition="site"))) is None
    assert judged.verdict(judged.key(job(8, partition="site"))) == (
        "needs 8 cores; the largest VM type offers 4"
    )


def test_closed_clouds_serve_nothing_until_they_reopen() -> None:
    clouds = [cloud("private", SMALL), cloud("public", EIGHT)]
    assert why_unservable(job(8), clouds, closed={"public"}) == (
        "only closed clouds could run it (public)"
    )
    assert why_unservable(job(1), clouds, closed={"public"}) is None
    assert why_unservable(job(8), clouds) is None  # reopened


def test_no_cloud_at_all() -> None:
    assert why_unservable(job(), []) == "no cloud is configured"
    assert why_unservable(job(), [cloud("a", max_instances=0)]) == (
        "the clouds that could run it may start no worker (max_instances 0)"
    )


def test_an_urgent_job_may_use_the_urgent_allowance_up_to_the_quota() -> None:
    clouds = [cloud("a", max_instances=2, quota=5)]
    urgent = job(4, node_count="4", urgency="red")
    assert judge(clouds).verdict(judge(clouds).key(urgent)) is not None
    generous = judge(clouds, urgent_extra=10)
    assert generous.verdict(generous.key(urgent)) is None
    huge = job(6, node_count="6", urgency="red")
    assert generous.verdict(generous.key(huge)) == (
        "needs 6 nodes; the clouds that could run it may start at most 5 workers"
    )


def test_the_site_own_nodes_are_named_in_the_mark() -> None:
    reason = why_unservable(job(64), LOCAL, site_cores=128)
    assert reason == (
        "no cloud can run it (needs 64 cores; the largest VM type offers 1); "
        "it waits for the site's own nodes"
    )
    assert reason is not None and runs_on_site(reason)
    # More cores than the site's nodes have up: nobody can run it.
    small_site = why_unservable(job(64), LOCAL, site_cores=16)
    assert small_site == "needs 64 cores; the largest VM type offers 1"
    assert not runs_on_site(small_site)


def test_split_keeps_queue_order_and_marks_the_rest() -> None:
    judged = judge(LOCAL)
    queue = [job(1, "1"), job(64, "2"), job(1, "3", vm_type="gpu"), job(1, "4")]
    verdict = split(queue, [], judged)
    assert [j.id for j in verdict.feasible] == ["1", "4"]
    assert verdict.unservable == {
        "2": "needs 64 cores; the largest VM type offers 1",
        "3": "asks for VM type 'gpu'; the clouds offer small, m1.small",
    }
    plain = [job(1, "1"), job(1, "2")]
    assert split(plain, [], judged).feasible is plain  # nothing copied


def test_split_plain_jobs_too_big_for_every_type() -> None:
    verdict = split([job(1, "1"), job(2, "2"), job(64, "3")], [], judge(LOCAL))
    assert [j.id for j in verdict.feasible] == ["1"]
    assert set(verdict.unservable) == {"2", "3"}


def test_a_job_a_worker_of_the_site_could_run_is_served_by_it() -> None:
    big = Worker("public-1", "public", "eight", 8, 0.0, WorkerState.IDLE)
    clouds = [cloud("private", SMALL), cloud("public", EIGHT)]
    judged = judge(clouds, frozenset({"public"}))
    verdict = split([job(8, "1")], [big], judged)
    assert [j.id for j in verdict.feasible] == ["1"] and not verdict.unservable
    assert verdict.usable(big)


def test_which_workers_a_queue_could_use() -> None:
    judged = judge([cloud("a", SMALL, EIGHT)])
    one = Worker("a-1", "a", "small", 1, 0.0, WorkerState.IDLE)
    eight = Worker("a-2", "a", "eight", 8, 0.0, WorkerState.IDLE)
    verdict = split([job(8, "1")], [], judged)
    assert not verdict.usable(one) and verdict.usable(eight)
    assert split([job(1, "1")], [], judged).usable(one)
    assert not split([job(64, "1")], [], judged).usable(eight)  # nothing servable


def test_jobs_with_attributes_are_judged_by_the_values_present() -> None:
    # Every combination of the values present is servable: no job is judged alone,
    # and a worker is usable only for a shape some job really has.
    cloud_a = cloud("a", EIGHT, serves=Selector.of({"partition": ["cloud"]}))
    cloud_b = cloud("b", SMALL, EIGHT, serves=Selector.of({"partition": ["gpu"]}))
    judged = judge([cloud_a, cloud_b])
    queue = [job(1, "1", partition="cloud"), job(8, "2", partition="gpu")]
    verdict = split(queue, [], judged)
    assert verdict.feasible is queue and not verdict.unservable
    small_b = Worker("b-1", "b", "small", 1, 0.0, WorkerState.IDLE)
    eight_a = Worker("a-1", "a", "eight", 8, 0.0, WorkerState.IDLE)
    assert not verdict.usable(small_b)  # (1 core, gpu) is no job's shape
    assert verdict.usable(eight_a)
    # One value no cloud takes: the jobs with it, and only those, are marked.
    queue.append(job(1, "3", partition="site"))
    verdict = split(queue, [], judged)
    assert [j.id for j in verdict.feasible] == ["1", "2"]
    assert verdict.unservable == {"3": "partition 'site' is served by no cloud"}
