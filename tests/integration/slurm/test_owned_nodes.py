"""A node kept for one user on the real Slurm (Cloud Scheduler mode's fair share): a
magnetic reservation draws that user's jobs to it without their asking, keeps everyone
else's off, changes hands, and goes with the node."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.integration.slurm.conftest import fresh_node_name, node, tracked, wait_for
from tests.users import real_users

from elasticsite.batch.base import JobRequest, NodeState
from elasticsite.batch.slurm import RESERVATION_PREFIX, SlurmBatch

pytestmark = pytest.mark.slow


def reservation(name: str) -> str:
    done = subprocess.run(
        ["scontrol", "show", "reservation", f"{RESERVATION_PREFIX}{name}", "--oneliner"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout if done.returncode == 0 else ""


def test_a_reserved_node_runs_its_users_jobs_only_and_changes_hands(
    slurm: SlurmBatch, slurm_cluster: Path
) -> None:
    with real_users(2) as users:
        ann, bob = (u.pw_name for u in users)
        name = fresh_node_name("own")
        slurm.add_node(name, 1)
        slurm.set_owner(name, ann)  # before it boots, as the manager does
        slurm.set_owner(name, ann)  # no-op
        assert f"Users={ann}" in reservation(name) and "MAGNETIC" in reservation(name)
        started = subprocess.run(
            ["bash", str(slurm_cluster / "dynnode.sh"), "start", name, "elastic", "1"],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
        assert started.returncode == 0, started.stderr
        wait_for(
            lambda: getattr(node(slurm.snapshot(), name), "state", None) is NodeState.IDLE,
            what=f"{name} to register",
        )
        elastic = tracked("elastic")
        bobs = elastic.submit(JobRequest(["sleep", "60"], 1, 120, bob))
        anns = elastic.submit(JobRequest(["sleep", "60"], 1, 120, ann))  # later, yet first
        wait_for(
            lambda: any(j.id == anns and j.node == name for j in slurm.snapshot().running),
            what="ann's job to be drawn to her node",
        )
        assert bobs in {j.id for j in slurm.snapshot().queued}, "bob's job ran on ann's node"

        slurm.set_owner(name, bob)  # handed over: ann's job goes on, then bob's
        assert f"Users={bob}" in reservation(name)
        assert any(j.id == anns for j in slurm.snapshot().running)
        subprocess.run(["scancel", anns], check=True)
        wait_for(
            lambda: any(j.id == bobs and j.node == name for j in slurm.snapshot().running),
            what="bob's job to run on the node handed to him",
        )
        slurm.remove_node(name)
        assert not reservation(name), "the reservation outlived its node"
