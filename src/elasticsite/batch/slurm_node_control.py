"""Slurm's nodes as :class:`~elasticsite.batch.slurm.SlurmBatch` changes them: dynamic
nodes created and deleted, drained and put back, and kept for one user by a
``MAGNETIC`` reservation.

Every node is asked about before it is changed: slurmctld 22.05 was seen to crash on
updates and deletes of dynamic nodes that were already gone.
"""

from __future__ import annotations

import logging
import time

from elasticsite import attributes
from elasticsite.attributes import NODES
from elasticsite.batch.base import BatchError, UnknownNode
from elasticsite.batch.identity import USER_NAME
from elasticsite.batch.slurm_commands import NAME, SlurmCommands

__all__ = ["RESERVATION_PREFIX", "SlurmNodeControl"]

log = logging.getLogger("elasticsite.batch.slurm")

RESERVATION_PREFIX = "elasticsite-"
"""A node kept for one user is in the reservation of this prefix and its name."""


class SlurmNodeControl(SlurmCommands):
    """The node methods of the batch contract, through ``scontrol``."""

    node_feature: str
    """The feature of every node :meth:`add_node` creates."""
    remove_timeout: float
    """Seconds :meth:`remove_node` waits for a node's jobs to leave."""

    def _node_exists(self, name: str) -> bool:
        ok, out = self._try("scontrol", "show", "node", name, "--oneliner")
        if ok:
            return f"NodeName={name} " in out
        if "not found" in out:
            return False
        raise BatchError(f"node {name}: cannot ask slurm about it: {out}")

    def add_node(self, name: str, cores: int, pool: str = "") -> None:
        """Create a dynamic node (powered down, DOWN) that a ``slurmd -Z`` will fill; its
        features are ``node_feature`` and the VM type ``pool`` (jobs ask for it with
        ``--constraint``)."""
        _check_name(name)
        if cores < 1:
            raise BatchError(f"add_node: cores must be >= 1, got {cores}")
        if pool and not NAME.fullmatch(pool):
            raise BatchError(f"add_node: {pool!r} is not a valid feature name")
        features = ",".join(f for f in (self.node_feature, pool) if f)
        ok, out = self._try(
            "scontrol", "create", f"nodename={name}", f"cpus={cores}",
            f"feature={features}", "state=cloud",
        )  # fmt: skip
        if not ok and not self._node_exists(name):
            raise BatchError(f"add_node {name}: scontrol create node failed: {out}")

    def drain(self, name: str, reason: str) -> None:
        """``state=drain``: running jobs go on, no new job starts there."""
        _check_name(name)
        reason = " ".join(reason.split()) or "drained by elasticsite"
        self._node_update(name, "state=drain", f"reason={reason}")

    def undrain(self, name: str) -> None:
        """``state=undrain``: clears the drain, leaves the rest (power, down) as it is."""
        _check_name(name)
        self._node_update(name, "state=undrain")

    def _node_update(self, name: str, *settings: str) -> None:
        # Ask first: slurmctld 22.05 was seen to crash (in slurm_conf_get_nodename) on
        # ``scontrol update nodename=X`` for an unknown X after dynamic nodes came and went.
        if not self._node_exists(name):
            raise UnknownNode(f"no node {name!r} in slurm")
        ok, out = self._try("scontrol", "update", f"nodename={name}", *settings)
        if not ok:
            if "Invalid node name" in out:
                raise UnknownNode(f"no node {name!r} in slurm")
            raise BatchError(f"node {name}: scontrol update {' '.join(settings)} failed: {out}")

    def set_owner(self, name: str, user: str) -> None:
        """A ``MAGNETIC`` reservation of the node for ``user`` (``elasticsite-NODE``):
        their jobs are drawn to it without asking for it, and no one else's starts
        there; handed to another user by updating it, deleted for ``""``."""
        _check_name(name)
        if not isinstance(user, str) or (user and not USER_NAME.fullmatch(user)):
            raise BatchError(f"set_owner: {user!r} is not a user name")
        held = f"reservationname={RESERVATION_PREFIX}{name}"
        if not user:
            self._unreserve(name)
            return
        ok, out = self._try("scontrol", "update", held, f"users={user}")
        if ok:
            return
        if "invalid" not in out.lower():
            raise BatchError(f"set_owner {name}: scontrol update reservation failed: {out}")
        if not self._node_exists(name):
            raise UnknownNode(f"no node {name!r} in slurm")
        ok, out = self._try(
            "scontrol", "create", "reservation", held, f"nodes={name}", f"users={user}",
            "starttime=now", "duration=infinite", "flags=magnetic",
        )  # fmt: skip
        if not ok:
            raise BatchError(f"set_owner {name}: scontrol create reservation failed: {out}")

    def _unreserve(self, name: str, requeue: bool = False) -> None:
        """Delete the node's reservation, if any. Slurm refuses while a job runs in it
        (``in use``): with ``requeue``, that job is requeued and the delete retried
        until ``remove_timeout``; else a BatchError."""
        deadline = time.monotonic() + self.remove_timeout
        while True:
            held = f"reservationname={RESERVATION_PREFIX}{name}"
            ok, out = self._try("scontrol", "delete", held)
            if ok or "invalid" in out.lower():
                return
            if not (requeue and "in use" in out) or time.monotonic() > deadline:
                raise BatchError(f"node {name}: scontrol delete reservation failed: {out}")
            self._requeue_jobs_on(name)  # again: the reservation may draw a job back
            time.sleep(0.3)

    def remove_node(self, name: str) -> None:
        """Requeue what still runs there, delete its owner's reservation (Slurm keeps
        one naming a deleted node, and deletes no node in one), then ``scontrol
        delete``; an unknown node: no-op."""
        _check_name(name)
        self._unreserve(name, requeue=True)
        if not self._node_exists(name):  # already gone (and see _node_update)
            return
        deadline = time.monotonic() + self.remove_timeout
        requeued = False
        while True:
            # slurmctld 22.05 can crash (SIGSEGV in delete_nodes) deleting a dynamic node
            # that is already gone, so every retry asks first: someone may have beaten us
            if requeued and not self._node_exists(name):
                return
            ok, out = self._try("scontrol", "delete", f"nodename={name}")
            if ok or "Invalid node name" in out:
                return
            if "busy" not in out:
                raise BatchError(f"remove_node {name}: scontrol delete failed: {out}")
            if not requeued:
                self._requeue_jobs_on(name)
                requeued = True
            if time.monotonic() > deadline:
                raise BatchError(
                    f"remove_node {name}: still busy after {self.remove_timeout:g} s "
                    f"(jobs completing there?): {out}"
                )
            time.sleep(0.3)

    def _requeue_jobs_on(self, name: str) -> None:
        """``scontrol requeue`` the jobs running on node ``name``, if any."""
        _, running = self._read_jobs(include_held=True)
        jobs = [j.id for j in running if name in attributes.values(j.attributes, NODES)]
        if jobs:
            log.info("node %s removed: requeueing %s", name, ", ".join(jobs))
            self._try("scontrol", "requeue", ",".join(jobs))


def _check_name(name: str) -> None:
    if not NAME.fullmatch(name or ""):
        raise BatchError(f"slurm: {name!r} is not a valid node name")
