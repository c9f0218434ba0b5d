"""The embedded cloud with hosts: one scenario per urgent cloud policy, on real workers.

Another tenant of the cloud fills it; this site then launches an urgent instance.
What the other tenant sees (its instances' states, tags and processes) is what its
owner would see on a finite cloud that honours urgent sessions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from elasticsite.clouds.base import WORKER_TAG, CloudError, InstanceState, LaunchRequest
from elasticsite.clouds.capacity import Host
from elasticsite.clouds.capacity_policy import BREADBOARD_TYPES as T
from elasticsite.clouds.capacity_policy import CloudPolicy
from elasticsite.clouds.errors import ErrorKind
from elasticsite.clouds.local import LocalCloud
from elasticsite.clouds.local_capacity import (
    PREEMPTED_TAG,
    QOS_TAG,
    SUSPENDED_TAG,
    URGENCY_TAG,
    VOLUNTEER_TAG,
    HostCapacity,
)

from .conftest import wait_for

MakeCloud = Callable[..., LocalCloud]
XL = T["c1.xlarge"]


def tenants(
    make_cloud: MakeCloud, policy: CloudPolicy, hosts: int = 1
) -> tuple[LocalCloud, LocalCloud]:
    """(another tenant, this site) on one cloud of ``hosts`` Breadboard nodes."""
    cap = HostCapacity([Host(f"node{k}", 8, 16384) for k in range(hosts)], {"red": policy})
    other = make_cloud(site_id="other-tenant", capacity=cap, boot_delay=30.0)
    ours = make_cloud(capacity=cap)
    return other, ours


def start(cloud: LocalCloud, name: str, vm=XL, **tags: str) -> str:  # type: ignore[no-untyped-def]
    (inst,) = cloud.launch(
        LaunchRequest(vm, [name], {"role": "worker"}, {WORKER_TAG: name, **tags})
    )
    return inst.id


def by_name(cloud: LocalCloud) -> dict[str, object]:
    return {i.name: i for i in cloud.describe()}


def pid_of(cloud: LocalCloud, instance_id: str) -> int:
    import sqlite3

    with sqlite3.connect(cloud.db_path) as db:
        return db.execute("SELECT pid FROM instances WHERE id = ?", (instance_id,)).fetchone()[0]


def proc_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]


def host_of(cloud: LocalCloud, instance_id: str) -> str:
    import sqlite3

    with sqlite3.connect(cloud.db_path) as db:
        return db.execute("SELECT host FROM slots WHERE instance = ?", (instance_id,)).fetchone()[0]


def test_a_full_cloud_refuses_a_launch_as_out_of_capacity(make_cloud: MakeCloud) -> None:
    other, ours = tenants(make_cloud, CloudPolicy.PREEMPTION)
    start(other, "o1")
    start(other, "o2")
    with pytest.raises(CloudError, match=r"no host has room for a c1\.xlarge") as err:
        start(ours, "w1")
    assert err.value.kind is ErrorKind.CAPACITY
    assert "w1" not in by_name(ours)  # nothing half-created
    with pytest.raises(CloudError, match="bad elasticsite:urgency tag 'purple'"):
        start(ours, "w2", **{URGENCY_TAG: "purple"})


def test_preemption_terminates_the_fewest_and_says_why(make_cloud: MakeCloud) -> None:
    other, ours = tenants(make_cloud, CloudPolicy.PREEMPTION)
    start(other, "o1")
    start(other, "o2", **{VOLUNTEER_TAG: "yes"})
    start(ours, "urgent", **{URGENCY_TAG: "red"})
    o2 = wait_for("o2 preempted", lambda: by_name(other)["o2"].state  # type: ignore[attr-defined]
                  is InstanceState.TERMINATED and by_name(other)["o2"])  # fmt: skip
    assert o2.tags[PREEMPTED_TAG] == "urgent"  # the volunteer went, and its owner is told
    assert by_name(other)["o1"].state is InstanceState.PENDING  # type: ignore[attr-defined]


def test_suspended_instances_stop_and_resume_when_room_returns(make_cloud: MakeCloud) -> None:
    other, ours = tenants(make_cloud, CloudPolicy.SUSPENSION)
    o1 = start(other, "o1")
    start(other, "o2")
    pid = pid_of(other, o1)
    urgent = start(ours, "urgent", **{URGENCY_TAG: "red"})
    victim = next(i for i in other.describe() if SUSPENDED_TAG in i.tags)
    vpid = pid_of(other, victim.id)
    assert wait_for("the victim stopped", lambda: proc_state(vpid) == "T")
    assert pid in (vpid, pid_of(other, next(i.id for i in other.describe() if i.id != victim.id)))
    ours.terminate([urgent])
    wait_for("the urgent worker gone", lambda: ours.describe()[0].state
             is InstanceState.TERMINATED)  # fmt: skip
    wait_for("the victim resumed", lambda: (other.describe(), proc_state(vpid) != "T")[1])
    assert SUSPENDED_TAG not in by_name(other)[victim.name].tags  # type: ignore[attr-defined]


def test_migration_moves_a_small_instance_and_it_keeps_running(make_cloud: MakeCloud) -> None:
    other, ours = tenants(make_cloud, CloudPolicy.MIGRATION, hosts=2)
    small = T["m1.small"]
    ids = [start(other, f"s{k}", vm=small) for k in range(16)]
    on0 = [i for i in ids if host_of(other, i) == "node0"]
    on1 = [i for i in ids if host_of(other, i) == "node1"]
    gone = on0[:3] + on1[:2]  # 3 cores free on one host, 2 on the other: no room for 4
    other.terminate(gone)
    ids = [i for i in ids if i not in gone]
    before = {i: host_of(other, i) for i in ids}
    start(ours, "urgent", **{URGENCY_TAG: "red"})
    moved = [i for i in ids if host_of(other, i) != before[i]]
    assert len(moved) == 1
    assert all(i.state is not InstanceState.TERMINATED for i in other.describe() if i.id in ids)
    pid = pid_of(other, moved[0])
    wait_for("the moved instance to run again", lambda: proc_state(pid) != "T")


def test_qos_shrinks_volunteers_and_gives_back_afterwards(make_cloud: MakeCloud) -> None:
    other, ours = tenants(make_cloud, CloudPolicy.QOS)
    start(other, "o1", **{VOLUNTEER_TAG: "yes"})
    start(other, "o2")
    with pytest.raises(CloudError, match="even under the qos policy"):
        start(ours, "urgent", **{URGENCY_TAG: "red"})  # one volunteer gives only 2 cores
    other.terminate([i.id for i in other.describe() if i.name == "o2"])
    start(other, "o4", **{VOLUNTEER_TAG: "yes"})
    urgent = start(ours, "urgent", **{URGENCY_TAG: "red"})
    shrunk = {i.name: i.tags.get(QOS_TAG) for i in other.describe() if i.name in ("o1", "o4")}
    assert shrunk == {"o1": "2", "o4": "2"}
    ours.terminate([urgent])
    wait_for("the volunteers' cores back", lambda: all(
        QOS_TAG not in i.tags for i in other.describe()))  # fmt: skip


def test_urgent_only_refuses_others_while_the_urgent_instance_runs(make_cloud: MakeCloud) -> None:
    other, ours = tenants(make_cloud, CloudPolicy.URGENT_ONLY)
    urgent = start(ours, "urgent", **{URGENCY_TAG: "red"})
    with pytest.raises(CloudError, match="urgent requests only"):
        start(other, "o1")  # room for it, but not for it now
    ours.terminate([urgent])
    wait_for("the cloud open again", lambda: _launches(other, "o1"))


def _launches(cloud: LocalCloud, name: str) -> bool:
    try:
        start(cloud, name)
    except CloudError:
        return False
    return True


def test_the_options_build_a_finite_cloud_and_reject_nonsense() -> None:
    from pydantic import ValidationError

    from elasticsite.clouds.local_plugin import LocalCloudOptions

    opts = LocalCloudOptions.model_validate(
        {"hosts": [{"name": "n1", "cores": 8}], "urgent_policies": {"red": "preemption"}}
    )
    assert opts.hosts and opts.hosts[0].memory_mb == 16384
    for bad in (
        {"hosts": [{"name": "n1", "cores": 0}]},
        {"hosts": [{"name": "../etc"}]},
        {"urgent_policies": {"purple": "preemption"}},
        {"urgent_policies": {"red": "nuke"}},
    ):
        with pytest.raises(ValidationError):
            LocalCloudOptions.model_validate(bad)
