"""Urgent jobs and the site's elastic capacity, on the embedded site with its cloud full:
a worker past ``max_instances`` within the urgent allowance, and room made at the quota."""

from __future__ import annotations

from pathlib import Path

from tests.manager.conftest import wait_for

from elasticsite.clouds.base import URGENCY_TAG, VOLUNTEER_TAG, WORKER_TAG
from elasticsite.model import Cause, JobState, WorkerState

from .test_embedded_site import carol_gate, carols, running_site, urgent


def _instances(site) -> list:  # type: ignore[no-untyped-def]
    return [i for c in site.clouds.values() for i in c.describe()]


def test_an_urgent_job_gets_a_worker_past_max_instances(tmp_path: Path) -> None:
    with running_site(tmp_path, policy={"urgent_extra_instances": 1}) as (site, _, cfg):
        done = urgent(cfg, "yellow", "sleep", "1")  # yellow: priority, nothing preempted
        assert done.returncode == 0, done.stderr
        job = done.stdout.strip()
        wait_for(lambda: site.batch.job(job).state is JobState.DONE, 60, "the urgent job")
        tagged = [i for i in _instances(site) if i.tags.get(URGENCY_TAG) == "yellow"]
        assert len(tagged) == 1  # the third worker, launched for it
        assert site.batch.job(job).node == tagged[0].tags[WORKER_TAG]
        assert all(j.state is JobState.RUNNING for j in carols(site))  # nobody was disturbed


def test_at_the_clouds_quota_a_non_urgent_worker_makes_room(tmp_path: Path) -> None:
    with running_site(tmp_path, policy={"urgent_extra_instances": 1}, cloud={"quota": 2}) as (
        site, _, cfg,
    ):  # fmt: skip
        done = urgent(cfg, "yellow", "sleep", "1")
        assert done.returncode == 0, done.stderr
        job = done.stdout.strip()
        wait_for(lambda: site.batch.job(job).state is JobState.DONE, 60, "the urgent job")
        moves = {t.to_state for t in site.store.transitions() if t.cause == Cause.URGENT}
        # A busy worker of carol's terminated for room; the worker that replaces it is
        # within max_instances again, so it is plain demand, and the urgent job goes first.
        assert moves == {WorkerState.TERMINATING}
        carol = carols(site)
        carol_gate(cfg).touch()
        wait_for(lambda: all(site.batch.job(j.id).state is JobState.DONE for j in carol),
                 90, "carol's jobs, one of them requeued")  # fmt: skip
        # One of carol's workers went (its job requeued, then run again); the urgent
        # job's worker came up in its place, within the quota of two.
        assert len(_instances(site)) >= 3


def test_a_site_can_volunteer_its_workers_as_targets(tmp_path: Path) -> None:
    with running_site(tmp_path, cloud={"volunteer": True}) as (site, _, _):
        found = _instances(site)
        assert found and all(i.tags.get(VOLUNTEER_TAG) == "yes" for i in found)
