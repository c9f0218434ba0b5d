"""Cloud Scheduler mode's decisions: demand per VM type, fair shares, re-balancing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from elasticsite.model import (
    Assign,
    Cause,
    CloudSpec,
    Decision,
    Job,
    JobState,
    Launch,
    VMType,
    Worker,
    WorkerState,
)
from elasticsite.policies import PolicySettings, get, settings_for
from elasticsite.policies.cloud_scheduler import fair_shares
from elasticsite.snapshot import SiteSnapshot

CLOUD = CloudSpec("c", max_instances=4, vm_types=(VMType("small"), VMType("large", 2)))


LATER = 1000.0
"""A time when the workers of these tests have run longer than a job's walltime."""


def job(i: int, user: str, vm_type: str | None, *, node: str | None = None) -> Job:
    attrs = {"vm_type": vm_type} if vm_type else {}
    state = JobState.RUNNING if node else JobState.QUEUED
    return Job(f"{user}{i}", 1, 600.0, float(i), state, node=node, user=user, attributes=attrs)


def busy(i: int, vm_type: str = "small", owner: str = "") -> Worker:
    w = Worker(f"c-{i:05d}", "c", vm_type, 1, float(i), WorkerState.BUSY, owner=owner)
    w.running_jobs = 1
    return w


def worker(i: int, state: WorkerState, owner: str, vm_type: str = "small") -> Worker:
    return Worker(f"c-{i:05d}", "c", vm_type, 1, float(i), state, owner=owner)


def decide(snap: SiteSnapshot, rebalance: str = "graceful") -> Decision:
    return get("cloud_scheduler")(snap, settings_for("cloud_scheduler", rebalance=rebalance))


def full_of(user: str, n: int = 4, started: float = 100.0) -> tuple[list[Worker], list[Job]]:
    """``n`` busy small VMs of ``user``, each running one of their jobs (not their first)."""
    workers = [busy(i, owner=user) for i in range(1, n + 1)]
    running = [job(i, user, "small", node=w.id) for i, w in enumerate(workers, 1)]
    for i, j in enumerate(running):
        j.started_at = started + i
    return workers, running


@given(st.integers(0, 50), st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 30)))
def test_fair_shares_are_even_capped_by_need_and_use_what_is_there(
    capacity: int, demand: dict[str, int]
) -> None:
    shares = fair_shares(capacity, demand)
    assert all(0 <= shares[u] <= demand[u] for u in demand)
    assert sum(shares.values()) == min(capacity, sum(demand.values()))
    short = [u for u in demand if shares[u] < demand[u]]
    for u in short:  # whoever still wants more has at least as much as anyone, less one
        assert all(shares[u] >= shares[v] - 1 for v in demand)


def test_demand_is_counted_per_vm_type_and_unknown_types_are_not_served() -> None:
    queued = [job(1, "a", "small"), job(2, "a", "large"), job(3, "a", "large"),
              job(4, "a", "gpu"), job(5, "a", None)]  # fmt: skip
    snap = SiteSnapshot(0.0, queued, [], [], [CLOUD])
    d = get("cloud_scheduler")(snap, PolicySettings())
    assert sorted((x.vm_type, x.count) for x in d.launch) == [("large", 2), ("small", 1)]


def test_a_newcomer_makes_the_user_over_share_hold_and_drain_gracefully() -> None:
    workers = [busy(i) for i in range(1, 5)]
    running = [job(i, "alice", "small", node=w.id) for i, w in enumerate(workers, 1)]
    for j in running:
        j.started_at = 100.0 + float(j.submitted_at)  # each VM's second job, at least
    queued = [job(9, "alice", "small"), job(1, "bob", "large"), job(2, "bob", "large")]
    snap = SiteSnapshot(LATER, queued, running, workers, [CLOUD])
    d = get("cloud_scheduler")(snap, PolicySettings())
    assert [j.id for j in d.hold] == ["alice9"]
    assert len(d.drain) == 2 and all(x.cause == Cause.FAIR_SHARE for x in d.drain)
    assert not d.launch and not d.terminate  # the site is full until those retire
    d = get("cloud_scheduler")(snap, settings_for("cloud_scheduler", rebalance="immediate"))
    assert len(d.terminate) == 2 and not d.drain


def test_held_jobs_are_released_once_their_user_is_back_within_share() -> None:
    held = [job(9, "alice", "small")]
    snap = SiteSnapshot(0.0, [], [], [], [CLOUD])
    snap.held = held
    d = get("cloud_scheduler")(snap, PolicySettings())
    assert d.release == ["alice9"]


def test_a_slurm_or_torque_job_names_its_vm_type_by_a_node_feature() -> None:
    from elasticsite.policies.cloud_scheduler import vm_type_of

    offered = {"small", "large"}
    slurm = Job("1", 1, 60.0, 0.0, attributes={"features": "ib&large"})
    assert vm_type_of(slurm, offered) == "large"
    condor = Job("2", 1, 60.0, 0.0, attributes={"vm_type": "gpu", "features": "small"})
    assert vm_type_of(condor, offered) is None  # named one, not offered: not served
    assert vm_type_of(Job("3", 1, 60.0, 0.0), offered) is None


def test_a_vm_in_error_is_shut_down_and_replaced_while_its_job_waits() -> None:
    from elasticsite import core
    from elasticsite.clouds.base import Instance, InstanceState

    config = core.CoreConfig("site", (CLOUD,), typed_nodes=True)
    state = core.CoreState()
    queued = [job(1, "alice", "small")]
    policy = get("cloud_scheduler")

    def step(now: float, outcomes: list, instances: dict) -> core.Plan:  # type: ignore[type-arg]
        plan = core.Plan()
        snap = core.observe(state, plan, config, now, outcomes, {}, {"c": instances}, queued)
        from elasticsite.policies import evaluate

        decision = evaluate(policy, snap, PolicySettings())
        ids = [f"c-{n:05d}" for n in range(len(state.known) + 1, len(state.known) + 9)]
        core.apply(state, plan, config, now, decision, {"c": ids})
        return plan

    first = step(0.0, [], {})
    [launch] = [c for c in first.commands if isinstance(c, core.AddAndLaunch)]
    assert launch.vm_type == "small" and launch.pool == "small"  # its node serves "small"
    done = [core.Outcome(launch, 1.0, instance_id="i-1")]
    broken = Instance("i-1", launch.worker_id, InstanceState.ERROR)
    second = step(10.0, done, {launch.worker_id: broken})
    assert state.records[launch.worker_id].worker.state is WorkerState.FAILED
    assert any(
        isinstance(c, core.TerminateInstance) and c.instance_id == "i-1" for c in second.commands
    ), "the VM in error was not shut down"
    again = [c for c in second.commands if isinstance(c, core.AddAndLaunch)]
    assert [c.vm_type for c in again] == ["small"], "no replacement for the waiting job"


def test_each_vm_is_launched_for_the_user_whose_share_it_serves() -> None:
    queued = [job(i, "ann", "small") for i in range(6)] + [job(9, "cid", "small")]
    d = decide(SiteSnapshot(0.0, queued, [], [], [CLOUD]))
    assert sorted(d.launch, key=lambda x: x.user) == [
        Launch("c", "small", 3, Cause.DEMAND, user="ann"),
        Launch("c", "small", 1, Cause.DEMAND, user="cid"),
    ]


def test_a_newcomer_for_the_same_type_is_handed_busy_vms_gracefully_not_new_ones() -> None:
    workers, running = full_of("ann")
    queued = [job(9, "ann", "small")] + [job(i, "cid", "small") for i in range(1, 5)]
    d = decide(SiteSnapshot(0.0, queued, running, workers, [CLOUD]))
    # the two whose jobs started first change hands; they run cid's jobs after ann's
    assert d.assign == [Assign("c-00001", "cid", Cause.FAIR_SHARE),
                        Assign("c-00002", "cid", Cause.FAIR_SHARE)]  # fmt: skip
    assert not (d.drain or d.terminate or d.launch or d.hold)


def test_immediate_takes_the_vms_back_at_once_and_holds_the_users_jobs() -> None:
    workers, running = full_of("ann")
    queued = [job(9, "ann", "small")] + [job(i, "cid", "small") for i in range(1, 5)]
    d = decide(SiteSnapshot(LATER, queued, running, workers, [CLOUD]), "immediate")
    assert [t.worker_id for t in d.terminate] == ["c-00001", "c-00002"]
    assert all(t.cause == Cause.FAIR_SHARE for t in d.terminate)
    assert [j.id for j in d.hold] == ["ann9"] and not d.assign


def test_a_user_with_no_more_jobs_lends_an_idle_vm_and_gets_it_back_when_needed() -> None:
    workers = [worker(1, WorkerState.IDLE, "ann"), busy(2, owner="cid")]
    running = [job(2, "cid", "small", node="c-00002")]
    queued = [job(3, "cid", "small"), job(4, "cid", "small")]
    cloud = CloudSpec("c", max_instances=2, vm_types=(VMType("small"),))
    d = decide(SiteSnapshot(0.0, queued, running, workers, [cloud]))
    assert d.assign == [Assign("c-00001", "cid", Cause.FAIR_SHARE)] and not d.drain
    # ann is back: the lent VM (now busy with cid's job) is hers again after that job
    workers = [busy(1, owner="cid"), busy(2, owner="cid")]
    running = [job(1, "cid", "small", node="c-00001"), job(2, "cid", "small", node="c-00002")]
    running[0].started_at, running[1].started_at = 5.0, 1.0
    queued = [job(4, "cid", "small"), job(5, "ann", "small")]
    d = decide(SiteSnapshot(10.0, queued, running, workers, [cloud]))
    assert d.assign == [Assign("c-00002", "ann", Cause.FAIR_SHARE)]
    assert not (d.drain or d.terminate or d.launch or d.hold)


def test_draining_vms_count_against_their_user_so_held_jobs_stay_held() -> None:
    workers = [busy(i, "small", "ann") for i in (1, 2, 3)] + [busy(4, "small", "bob")]
    workers[0].state = workers[1].state = WorkerState.DRAINING  # going, for bob's share
    running = [job(i, "ann", "small", node=w.id) for i, w in enumerate(workers[:3], 1)]
    running.append(job(1, "bob", "large", node="c-00004"))
    held = [job(9, "ann", "small")]
    queued = [job(2, "bob", "large"), job(3, "bob", "large")]
    snap = SiteSnapshot(0.0, queued, running, workers, [CLOUD])
    snap.held = held
    d = decide(snap)
    assert not d.release, "released while ann still holds more than her share"
    assert not d.drain and not d.terminate, "more drained than the waiting user needs"


def test_a_vm_of_a_user_below_their_share_is_never_taken() -> None:
    workers = [busy(1, owner="ann"), busy(2, owner="ann"), worker(3, WorkerState.IDLE, "cid")]
    workers += [worker(4, WorkerState.BOOTING, "cid")]
    running = [job(1, "ann", "small", node="c-00001"), job(2, "ann", "small", node="c-00002")]
    queued = [job(i, "ann", "small") for i in range(3, 9)] + [job(1, "cid", "small")]
    queued += [job(2, "cid", "small")]
    d = decide(SiteSnapshot(0.0, queued, running, workers, [CLOUD]))
    assert not (d.assign or d.drain or d.terminate or d.launch), d.summary()


def test_a_vm_on_its_first_job_is_not_killed_for_another_share() -> None:
    workers, running = full_of("ann")
    for w, j in zip(workers[:2], running, strict=False):
        w.joined_at = j.started_at  # still on the job it took when it joined: its first
    queued = [job(9, "ann", "small"), job(1, "bob", "large"), job(2, "bob", "large")]
    d = decide(SiteSnapshot(LATER, queued, running, workers, [CLOUD]), "immediate")
    assert {x.worker_id for x in d.terminate} == {"c-00003", "c-00004"}
    # drained, a VM finishes its job first: its boot is not wasted, any one may go
    d = decide(SiteSnapshot(LATER, queued, running, workers, [CLOUD]))
    assert len(d.drain) == 2 and not d.terminate


def test_a_vm_idle_since_it_joined_is_kept_and_its_users_jobs_are_not_held() -> None:
    workers, running = full_of("ann", 3)
    fresh = worker(4, WorkerState.IDLE, "ann")
    fresh.joined_at = fresh.state_since = LATER - 5.0  # joined just now, no job yet
    queued = [job(9, "ann", "small"), job(1, "bob", "large")]
    d = decide(SiteSnapshot(LATER, queued, running, [*workers, fresh], [CLOUD]))
    assert "c-00004" not in {x.worker_id for x in d.drain}
    assert not d.hold, "ann's jobs held: her new VM would sit idle"


def test_a_vm_is_launched_only_on_a_cloud_that_serves_its_job() -> None:
    from elasticsite.attributes import Selector

    gpu = VMType("gpu", 8)
    cloud_only = CloudSpec("c", max_instances=4, vm_types=(gpu,),
                           serves=Selector.of({"partition": ["cloud"]}))  # fmt: skip
    anywhere = CloudSpec("d", max_instances=4, vm_types=(gpu,))
    # a gpu worker of a cloud no longer configured could run it: it is servable, yet
    # the one cloud offering gpu does not serve it
    retired = Worker("old-1", "retired", "gpu", 8, 0.0, WorkerState.BUSY)
    retired.running_jobs = 1
    queued = [Job("j1", 1, 600.0, 0.0, user="ann", attributes={"vm_type": "gpu"})]
    d = decide(SiteSnapshot(0.0, queued, [], [retired], [cloud_only]))
    assert not d.launch, d.launch
    # a job of the partition it serves goes there; the rest to the cloud serving anyone
    queued.append(Job("j2", 1, 600.0, 1.0, user="bob",
                      attributes={"vm_type": "gpu", "partition": "cloud"}))  # fmt: skip
    d = decide(SiteSnapshot(0.0, queued, [], [], [cloud_only, anywhere]))
    assert sorted((x.cloud, x.user) for x in d.launch) == [("c", "bob"), ("d", "ann")]
    # nor is a job handed a VM its cores do not fit
    big = [Job("j3", 16, 600.0, 0.0, user="ann", attributes={"vm_type": "gpu"})]
    assert not decide(SiteSnapshot(0.0, big, [], [], [anywhere])).launch


def test_a_busy_vm_whose_job_just_ended_goes_as_an_idle_one_not_for_the_share() -> None:
    from elasticsite.model import Drain

    workers, running = full_of("ann", 2)
    bobs = [busy(3, "large", "bob"), busy(4, "large", "bob")]  # c-00004's job just ended
    running.append(job(1, "bob", "large", node="c-00003"))
    queued = [job(i, "ann", "small") for i in range(5, 9)]
    for mode in ("graceful", "immediate"):
        d = decide(SiteSnapshot(LATER, queued, running, [*workers, *bobs], [CLOUD]), mode)
        assert d.drain == [Drain("c-00004", Cause.IDLE)] and not d.terminate, (mode, d)
