"""The embedded cloud's boots share its boot path (paper 000's contention), for real: the
same model as the simulator's (:mod:`elasticsite.boottime`), replayed from the registry."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from elasticsite.batch.local import LocalBatch
from elasticsite.boottime import BootPath
from elasticsite.clouds.base import WORKER_TAG, InstanceState, LaunchRequest
from elasticsite.clouds.local import LocalCloud, cloud_db
from elasticsite.clouds.local_registry import boot_end
from elasticsite.model import VMType

from .conftest import wait_for

SMALL = VMType("small", cores=1)


def rows(cloud: LocalCloud) -> dict[str, tuple[str, float, float, float | None]]:
    """name -> (id, created_at, boot_rest, boot_done)."""
    with cloud_db(cloud.db_path, write=False) as db:
        found = db.execute("SELECT name, id, created_at, boot_rest, boot_done FROM instances")
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in found.fetchall()}


def ends(cloud: LocalCloud) -> dict[str, float | None]:
    """When each instance's boot ends, as its worker reads it from the registry."""
    return {n: boot_end(cloud.db_path, r[0], cloud.boot_path) for n, r in rows(cloud).items()}


def test_boots_share_the_link_and_wait_for_a_place(
    make_cloud: Callable[..., LocalCloud], batch: LocalBatch
) -> None:
    # 30 s alone, 10 s of which move the image; three boots at once, the rest wait.
    cloud = make_cloud(boot_delay=30.0, image_transfer=10.0, parallel_boots=3)
    for name in ("a", "b"):
        cloud.launch(LaunchRequest(SMALL, [name], {}, {WORKER_TAG: name}))
    cloud.launch(LaunchRequest(SMALL, ["c", "d"], {}, {WORKER_TAG: "c"}))
    seen = rows(cloud)
    assert {r[2] for r in seen.values()} == {20.0} and all(r[3] is None for r in seen.values())
    t0, t2 = seen["a"][1], seen["c"][1]
    end = ends(cloud)
    # a, b and c move their images together: 3 x 10 s of link (a alone for the few ms
    # before b), then boot 20 s; d waits for the first place, then 10 s alone and 20 s.
    for name in ("a", "b", "c"):
        assert end[name] == pytest.approx(t0 + 30.0 + 20.0, abs=0.5)
    assert end["d"] == pytest.approx(min(end["a"], end["b"], end["c"]) + 10.0 + 20.0, abs=1e-6)
    assert t2 + 60.0 - 0.5 <= end["d"]
    assert {i.state for i in cloud.describe()} == {InstanceState.PENDING}


def test_a_cancelled_boot_frees_its_place_and_its_share(
    make_cloud: Callable[..., LocalCloud], batch: LocalBatch
) -> None:
    cloud = make_cloud(boot_delay=30.0, image_transfer=10.0, parallel_boots=1)
    cloud.launch(LaunchRequest(SMALL, ["a", "b"], {}, {WORKER_TAG: "a"}))
    before = ends(cloud)
    assert before["b"] == pytest.approx(before["a"] + 30.0)  # b waits for a's place
    cloud.terminate([rows(cloud)["a"][0]])
    after = ends(cloud)
    assert after["a"] is None  # off the path: the registry says when it left
    assert rows(cloud)["a"][3] is not None
    assert after["b"] is not None and after["b"] < before["b"] - 25.0


def test_boots_sharing_the_link_join_later_than_one_alone(
    make_cloud: Callable[..., LocalCloud], batch: LocalBatch
) -> None:
    # Alone a boot takes 0.6 s; two launched together move their 0.5 s images over
    # one link (1 s for both), then boot 0.1 s each.
    cloud = make_cloud(boot_delay=0.6, image_transfer=0.5, parallel_boots=2)
    started = time.monotonic()
    cloud.launch(LaunchRequest(SMALL, ["a", "b"], {}, {WORKER_TAG: "a"}))
    wait_for("a to join", lambda: "a" in {n.name for n in batch.snapshot().nodes})
    assert time.monotonic() - started >= 1.1
    wait_for("b to join", lambda: "b" in {n.name for n in batch.snapshot().nodes})
    done = rows(cloud)
    for name in ("a", "b"):  # each boot's end is on record, for later replays
        assert done[name][3] is not None and done[name][3] >= done[name][1] + 1.1


def test_a_cloud_without_contention_keeps_boots_apart(
    make_cloud: Callable[..., LocalCloud], batch: LocalBatch
) -> None:
    cloud = make_cloud(boot_delay=30.0)
    assert cloud.boot_path == BootPath()
    cloud.launch(LaunchRequest(SMALL, ["a", "b", "c"], {}, {WORKER_TAG: "a"}))
    assert {r[2] for r in rows(cloud).values()} == {30.0}


def test_an_image_transfer_longer_than_a_boot_is_refused(
    make_cloud: Callable[..., LocalCloud],
) -> None:
    with pytest.raises(ValueError, match=r"image_transfer \(40 s\) must not exceed"):
        make_cloud(boot_delay=30.0, boot_jitter=5.0, image_transfer=40.0)
