"""The embedded cloud's boots slow each other down (paper 000's contention), for real."""

from __future__ import annotations

import time
from collections.abc import Callable

from elasticsite.batch.local import LocalBatch
from elasticsite.clouds.base import WORKER_TAG, InstanceState
from elasticsite.clouds.local import LocalCloud, cloud_db
from elasticsite.model import VMType

from .conftest import wait_for

SMALL = VMType("small", cores=1)


def extras(cloud: LocalCloud) -> dict[str, float]:
    with cloud_db(cloud.db_path, write=False) as db:
        return dict(db.execute("SELECT name, boot_extra FROM instances").fetchall())


def test_each_later_boot_slows_the_ones_in_flight(
    make_cloud: Callable[..., LocalCloud], batch: LocalBatch
) -> None:
    cloud = make_cloud(boot_delay=30.0, boot_slowdown=5.0)
    for name in ("a", "b"):
        cloud.launch(SMALL, [name], {}, {WORKER_TAG: name})
    cloud.launch(SMALL, ["c", "d"], {}, {WORKER_TAG: "c"})
    # a was slowed by b, c and d; b by c and d; c by d; d started behind the other three.
    assert extras(cloud) == {"a": 15.0, "b": 10.0, "c": 5.0, "d": 0.0}
    assert {i.state for i in cloud.describe()} == {InstanceState.PENDING}


def test_a_slowed_boot_joins_later(
    make_cloud: Callable[..., LocalCloud], batch: LocalBatch
) -> None:
    cloud = make_cloud(boot_delay=0.3, boot_slowdown=0.8)
    started = time.monotonic()
    cloud.launch(SMALL, ["a"], {}, {WORKER_TAG: "a"})
    cloud.launch(SMALL, ["b"], {}, {WORKER_TAG: "b"})
    wait_for("a to join", lambda: "a" in {n.name for n in batch.snapshot().nodes})
    # a took its 0.3 s plus 0.8 s for b, which started while a booted.
    assert time.monotonic() - started >= 0.3 + 0.8
