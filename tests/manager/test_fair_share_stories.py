"""Cloud Scheduler mode's fair share between users who ask for the same VM type, on the
embedded site: the real manager, local cloud workers that boot and run the jobs as
their users, and jobs submitted with ``elasticsite submit --user`` as a person would.

* Three users, six VMs: ann queues 20 ``small`` jobs, bob 4 ``large``, cid 16
  ``small``. Each gets two VMs (cid's are cid's, not the oldest job's); once bob is
  done, ann and cid get three each.
* Two users, one type, four VMs: ann has every VM when cid arrives; cid's jobs start
  while ann's still wait (not first come, first served), on VMs ann hands over after
  her current jobs (graceful: no VM drained, none booted for it), or that replace the
  ones terminated for him (immediate).

The users are real (jobs run as whom they are for), so these tests run as root.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.cli import local_cloud, run_command, site_toml
from tests.users import real_users

from elasticsite.batch.local import LocalBatch
from elasticsite.config import load_config
from elasticsite.manager.site import open_site
from elasticsite.model import Cause, JobState

from .conftest import Running, kill_workers, wait_for

# Shares are read while some jobs still wait: timed jobs, so these run one at a time,
# beside the parallel part of the suite (scripts/test.sh), not on its workers.
pytestmark = pytest.mark.serial

SIZES = [{"name": "small", "cores": 1}, {"name": "large", "cores": 2}]


class Site:
    """A configuration file, the manager of its site on a thread, and the CLI."""

    def __init__(self, tmp_path: Path, limit: int, mode: str) -> None:
        self.config = tmp_path / "site.toml"
        self.config.write_text(
            site_toml(
                "fair",
                local_cloud("local", limit, jitter=None, vm_types=SIZES),
                state_dir=str(tmp_path / "state"),
                policy={"name": "cloud_scheduler", "rebalance": mode},
                stall_timeout=30.0,
                heartbeat_timeout=5.0,
                on_shutdown="drain",
                shutdown_timeout=30.0,
            )
        )
        self.site = open_site(load_config(self.config))
        self.running = Running(self.site, self.site.manager())
        batch = self.site.batch
        assert isinstance(batch, LocalBatch)
        self.batch = batch
        self.strays: list[str] = []
        self.seen: set[str] = set()

    def submit(
        self, user: str, vm_type: str, count: int, seconds: int = 3, walltime: int = 120
    ) -> None:
        """``count`` jobs of ``user`` sleeping ``seconds`` on a VM of ``vm_type`` each."""
        cores = "2" if vm_type == "large" else "1"
        done = run_command(
            "submit", "-c", str(self.config), "--user", user, "--attr", f"vm_type={vm_type}",
            "--cores", cores, "--walltime", str(walltime), "--count", str(count),
            "--", "sleep", str(seconds),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

    def running_per_user(self) -> Counter[str]:
        """Running jobs per user; a job seen starting on a node kept for someone else is
        noted (a job goes on where it runs when its VM is handed over)."""
        view = self.batch.snapshot()
        owner = {n.name: n.owner for n in view.nodes}
        for job in view.running:
            if job.id in self.seen:
                continue
            self.seen.add(job.id)
            if owner.get(job.node or "") not in ("", job.user):
                self.strays.append(f"{job.user}'s job {job.id} on {owner[job.node or '']}'s VM")
        return Counter(j.user for j in view.running)

    def queued_per_user(self) -> Counter[str]:
        return Counter(j.user for j in self.batch.jobs([JobState.QUEUED]))

    def shares(self, expected: dict[str, int], what: str, waiting: set[str] | None = None) -> None:
        """Wait until each user runs ``expected`` jobs (one per VM) while those
        ``waiting`` (all, by default) still have jobs queued."""

        def reached() -> bool:
            running, queued = self.running_per_user(), self.queued_per_user()
            wait = expected.keys() if waiting is None else waiting
            return dict(running) == expected and all(queued[u] for u in wait)

        wait_for(reached, 60, what)

    def all_done(self, count: int) -> list:  # type: ignore[type-arg]
        jobs = self.batch.jobs()
        wait_for(
            lambda: sum(j.state is JobState.DONE for j in self.batch.jobs()) == count,
            120,
            "every job to finish",
        )
        jobs = self.batch.jobs()
        assert [j.exit_code for j in jobs] == [0] * count
        return jobs

    def fair_share_moves(self) -> list[tuple[str, str, float, float]]:
        """(worker, to state, when, launched) of every fair-share drain or termination."""
        store = self.site.store
        moves = []
        for rec in store.load(include_done=True):
            for t in store.transitions(rec.worker.id):
                if t.cause == Cause.FAIR_SHARE:
                    moves.append((rec.worker.id, t.to_state.value, t.at, rec.worker.requested_at))
        return moves


@pytest.fixture
def make_site(tmp_path: Path) -> Iterator[Callable[[int, str], Site]]:
    made: list[Site] = []

    def make(limit: int, mode: str) -> Site:
        made.append(Site(tmp_path, limit, mode))
        return made[-1]

    yield make
    for s in made:
        s.running.manager.stop()
        if s.running.thread.is_alive():
            s.running.thread.join(30)
        kill_workers(s.site)


def test_three_users_two_asking_for_the_same_type_each_get_their_third(
    make_site: Callable[[int, str], Site],
) -> None:
    with real_users(3) as users:
        ann, bob, cid = (u.pw_name for u in users)
        site = make_site(6, "graceful")
        site.submit(ann, "small", 20)  # enough that both still wait once bob is done
        site.submit(bob, "large", 4)
        site.submit(cid, "small", 16)
        site.running.thread.start()
        site.shares({ann: 2, bob: 2, cid: 2}, "two VMs each, cid's running cid's jobs")
        wait_for(lambda: not site.running_per_user()[bob] and not site.queued_per_user()[bob],
                 60, "bob's jobs to finish")  # fmt: skip
        site.shares({ann: 3, cid: 3}, "ann and cid to share bob's VMs: three each")
        site.all_done(40)
        assert not site.strays, site.strays
        assert not site.fair_share_moves(), "a VM was taken back: churn"
        site.running.stop()


@pytest.mark.parametrize("mode", ["graceful", "immediate"])
def test_a_newcomer_for_the_same_type_gets_half_the_vms_before_the_first_user_is_done(
    make_site: Callable[[int, str], Site], mode: str
) -> None:
    with real_users(2) as users:
        ann, cid = (u.pw_name for u in users)
        site = make_site(4, mode)
        if mode == "graceful":
            site.submit(ann, "small", 8)
            site.running.thread.start()
            wait_for(lambda: site.running_per_user()[ann] == 4, 60, "ann to have every VM")
        else:  # a VM is never killed on its first job: cid comes during ann's second ones
            site.submit(ann, "small", 8, seconds=6, walltime=7)
            site.running.thread.start()
            wait_for(
                lambda: site.running_per_user()[ann] == 4 and not site.queued_per_user()[ann],
                60,
                "ann's second four jobs to run on every VM",
            )
        site.submit(cid, "small", 8)
        waiting = {ann, cid} if mode == "graceful" else {cid}  # ann's killed jobs run soon
        site.shares({ann: 2, cid: 2}, "two VMs each while cid waits", waiting)
        jobs = site.all_done(16)
        last_of_ann = max(j.started_at or 0 for j in jobs if j.user == ann)
        first_of_cid = min(j.started_at or 0 for j in jobs if j.user == cid)
        assert first_of_cid < last_of_ann, (
            "cid waited for all of ann's jobs: first come, first served"
        )
        assert not site.strays, site.strays
        moves = site.fair_share_moves()
        launched = len(site.site.store.load(include_done=True))
        if mode == "graceful":  # handed over after their jobs: nothing drained, nothing booted
            assert not moves and launched == 4, (moves, launched)
            assert site.site.store.counters().get("workers_reassigned", 0) >= 2
        else:  # two of ann's killed (her jobs requeued and done), two booted for cid
            assert [m[1] for m in moves] == ["terminating", "terminating"], moves
            assert launched == 6
        site.running.stop()
