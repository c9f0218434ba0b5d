"""Small builders for policy tests: a job, a worker in a given state, a cloud, a snapshot.

Every test builds a snapshot with these, runs a policy (directly or through
``engine.evaluate``) and asserts on the exact :class:`Decision`. The default
cloud ``a`` has a waste time of 60 s (50 s boot + 10 s shutdown), so steady
stream's thresholds are 300 s / 180 s and bursts divides by 120 s.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

import pytest

from elasticsite.attributes import EMPTY
from elasticsite.model import CloudSpec, Decision, Job, VMType, Worker, WorkerState
from elasticsite.policies import base as registry
from elasticsite.policies import evaluate, get, settings_for
from elasticsite.snapshot import SiteSnapshot

S = WorkerState
NOW = 1000.0

_job_ids = itertools.count(1)


def job(
    walltime: float = 100.0, cores: int = 1, *, submitted_at: float = 0.0, nodes: int = 1
) -> Job:
    """A queued job asking for ``cores`` cores (over ``nodes`` nodes) for ``walltime`` s."""
    attributes = {"node_count": str(nodes)} if nodes > 1 else EMPTY
    return Job(
        f"j{next(_job_ids)}", cores=cores, walltime=walltime, submitted_at=submitted_at,
        attributes=attributes,
    )  # fmt: skip


def jobs(n: int, walltime: float = 100.0, cores: int = 1, nodes: int = 1) -> list[Job]:
    return [job(walltime, cores, nodes=nodes) for _ in range(n)]


def worker(
    wid: str,
    state: WorkerState = S.IDLE,
    cloud: str = "a",
    requested_at: float = 0.0,
    cores: int = 1,
    *,
    running: int | None = None,
    free: int | None = None,
) -> Worker:
    """A worker already in ``state``.

    Defaults follow the state: an idle worker runs nothing and has all its cores
    free, a busy or draining one runs one job and has no core free.
    """
    if running is None:
        running = 1 if state in (S.BUSY, S.DRAINING) else 0
    if free is None:
        free = cores if state is S.IDLE else 0
    return Worker(
        wid,
        cloud,
        "small",
        cores,
        requested_at=requested_at,
        state=state,
        running_jobs=running,
        free_cores=free,
    )


def cloud(
    name: str = "a",
    *,
    max_instances: int = 10,
    price: float = 0.0,
    billing: float = 1.0,
    boot: float = 50.0,
    shutdown: float = 10.0,
    cores: int = 1,
) -> CloudSpec:
    return CloudSpec(
        name,
        max_instances=max_instances,
        price_per_hour=price,
        billing_increment=billing,
        boot_time=boot,
        shutdown_time=shutdown,
        vm_types=(VMType("small", cores=cores),),
    )


def snap(
    queued: Iterable[Job] = (),
    workers: Iterable[Worker] = (),
    clouds: Iterable[CloudSpec] | None = None,
    *,
    now: float = NOW,
    running: Iterable[Job] = (),
) -> SiteSnapshot:
    return SiteSnapshot(
        now=now,
        queued=list(queued),
        running=list(running),
        workers=list(workers),
        clouds=list(clouds) if clouds is not None else [cloud()],
    )


def decide(policy: str, snapshot: SiteSnapshot, **settings: object) -> Decision:
    """Run one registered policy on ``snapshot`` (no engine lifecycle rules)."""
    return get(policy)(snapshot, settings_for(policy, **settings))


def run(policy: str, snapshot: SiteSnapshot, **settings: object) -> Decision:
    """One full evaluation, as the manager and the simulator do it."""
    return evaluate(get(policy), snapshot, settings_for(policy, **settings))


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Let a test register or load policies without leaking them into other tests."""
    registry.available()
    saved = dict(registry.registry._loaded)
    yield
    registry.registry._loaded.clear()
    registry.registry._loaded.update(saved)
