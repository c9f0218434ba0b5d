"""Running the core's commands against the site's batch system, clouds and broker.

:class:`CommandRunner` turns one :class:`~elasticsite.core.Command` into the calls it
stands for and returns its :class:`~elasticsite.core.Outcome`, dated when the cloud
or batch system answered. A step's terminations on one cloud go together
(:meth:`CommandRunner.batches`): one ``terminate(ids)`` call for as many ids as the
driver's ``terminate_batch`` says, each command keeping its own outcome. It runs on
the manager's thread pool and never raises: a failure, whatever it is, is an outcome
the core settles (retry, back off, give up; a departure the broker could not take stays
pending). A departure with no broker to tell (the simulator, a site without
``[context]``) succeeds at once. It touches no state store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from elasticsite.batch.base import BatchError, BatchSystem, UnknownJob
from elasticsite.clouds.base import (
    SITE_TAG,
    TERMINATE_BATCH,
    URGENCY_TAG,
    VOLUNTEER_TAG,
    WORKER_TAG,
    CloudDriver,
    CloudError,
    LaunchRequest,
)
from elasticsite.core import (
    AddAndLaunch,
    Command,
    DrainNode,
    ForgetNode,
    HoldJob,
    Outcome,
    OwnNode,
    RedirectJob,
    ReleaseJob,
    RemoveNode,
    TerminateInstance,
    UndrainNode,
)
from elasticsite.model import CloudSpec

__all__ = ["CommandRunner", "Departures"]

log = logging.getLogger(__name__)


class Departures(Protocol):
    """Where a node that left is told to the broker (the manager's broker link)."""

    def send(self, host: str) -> None:
        """Tell the broker ``host`` left; raises when the broker cannot be told."""


class CommandRunner:
    """Carries commands out; one instance per manager, called from its pool."""

    def __init__(
        self,
        *,
        batch: BatchSystem,
        clouds: Mapping[str, CloudDriver],
        specs: Sequence[CloudSpec],
        site_id: str,
        userdata: Mapping[str, str],
        clock: Callable[[], float],
        context: Departures | None = None,
    ) -> None:
        self.batch = batch
        self.clouds = clouds
        self.specs = {s.name: s for s in specs}
        self.site_id = site_id
        self.userdata = dict(userdata)
        self.clock = clock
        self.context = context

    def batches(self, commands: Sequence[Command]) -> list[list[Command]]:
        """``commands`` as the pool runs them: the terminations on one cloud in groups
        of the driver's ``terminate_batch``, every other command on its own."""
        out: list[list[Command]] = []
        grouped: dict[str, list[Command]] = {}
        for command in commands:
            if isinstance(command, TerminateInstance) and command.cloud in self.clouds:
                grouped.setdefault(command.cloud, []).append(command)
            else:
                out.append([command])
        for cloud, group in grouped.items():
            size = getattr(self.clouds[cloud], "terminate_batch", TERMINATE_BATCH)
            size = max(1, int(size))
            out.extend(group[i : i + size] for i in range(0, len(group), size))
        return out

    def run_all(self, commands: Sequence[Command]) -> list[Outcome]:
        """Carry out a group made by :meth:`batches`: terminations in one driver call."""
        first = commands[0] if commands else None
        if len(commands) < 2 or not isinstance(first, TerminateInstance):
            return [self.run(c) for c in commands]
        ids = [c.instance_id for c in commands if isinstance(c, TerminateInstance)]
        try:
            self.clouds[first.cloud].terminate(ids)
        except Exception as exc:
            failed = self._failed(first, exc)
            return [replace(failed, command=c) for c in commands]
        at = self.clock()
        return [Outcome(c, at) for c in commands]

    def run(self, command: Command) -> Outcome:
        """Carry ``command`` out; its outcome, success or failure."""
        try:
            instance_id = self._execute(command)
        except Exception as exc:
            return self._failed(command, exc)
        return Outcome(command, self.clock(), instance_id=instance_id)

    def _failed(self, command: Command, exc: Exception) -> Outcome:
        """The outcome of ``command`` that raised ``exc``."""
        if isinstance(exc, CloudError):
            return Outcome(
                command, self.clock(), error=str(exc) or type(exc).__name__,
                error_kind=str(exc.kind), call=exc.call or None,
            )  # fmt: skip
        if isinstance(exc, BatchError):
            why = "unknown_job" if isinstance(exc, UnknownJob) else None
            return Outcome(command, self.clock(), error=str(exc) or type(exc).__name__,
                           error_kind=why)  # fmt: skip
        log.error("%s failed unexpectedly", command, exc_info=exc)  # a driver's bug
        return Outcome(command, self.clock(), error=f"{type(exc).__name__}: {exc}")

    def _execute(self, command: Command) -> str | None:
        if isinstance(command, AddAndLaunch):
            return self._launch(command)
        if isinstance(command, TerminateInstance):
            self.clouds[command.cloud].terminate([command.instance_id])
        elif isinstance(command, DrainNode):
            self.batch.drain(command.node, f"elasticsite: {command.reason}")
        elif isinstance(command, UndrainNode):
            self.batch.undrain(command.node)
        elif isinstance(command, RemoveNode):
            self.batch.remove_node(command.node)
        elif isinstance(command, OwnNode):
            self.batch.set_owner(command.node, command.user)
        elif isinstance(command, RedirectJob):
            self.batch.redirect(command.job_id, command.target)
        elif isinstance(command, HoldJob):
            self.batch.hold(command.job.id)
        elif isinstance(command, ReleaseJob):
            self.batch.release(command.job_id)
        elif isinstance(command, ForgetNode) and self.context is not None:
            self._forget(command.node)
        return None

    def _launch(self, c: AddAndLaunch) -> str | None:
        spec = self.specs[c.cloud]
        vm = next((v for v in spec.vm_types if v.name == c.vm_type), spec.default_vm)
        userdata = {
            **self.userdata,
            "site_id": self.site_id,
            "worker_id": c.worker_id,
            "node": c.node,
            "cloud": c.cloud,
            "cores": str(c.cores),
            "vm_type": vm.name,
        }
        if c.owner:  # a worker that joins by itself (HTCondor's startd) starts owned
            userdata["owner"] = c.owner
        tags = {SITE_TAG: self.site_id, WORKER_TAG: c.worker_id}
        if c.urgency:
            tags[URGENCY_TAG] = c.urgency
        elif spec.volunteer:
            tags[VOLUNTEER_TAG] = "yes"
        if c.add_node and c.pool:
            self.batch.add_node(c.node, c.cores, c.pool)
        elif c.add_node:
            self.batch.add_node(c.node, c.cores)
        if c.add_node and c.owner:  # before it can join: no other user's job starts there
            self.batch.set_owner(c.node, c.owner)
        found = self.clouds[c.cloud].launch(LaunchRequest(vm, [c.worker_id], userdata, tags))
        return found[0].id if found else None

    def _forget(self, host: str) -> None:
        assert self.context is not None
        try:
            self.context.send(host)
        except Exception as exc:  # the broker's refusal or silence: an outcome like a cloud's
            raise CloudError(f"broker: {exc}") from exc
