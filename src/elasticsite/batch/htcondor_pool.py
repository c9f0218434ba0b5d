"""How the HTCondor adapter reaches a pool: the :class:`CondorPool` interface, and
:class:`BindingsPool`, its implementation on the HTCondor Python bindings
(``htcondor2``/``classad2``, or the classic modules when those are installed). Tests
drive the adapter through a fake pool instead (``tests/batch/htcondor_fake.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from elasticsite.batch.htcondor_output import OWNER_ATTR, load_bindings
from elasticsite.batch.htcondor_submit import submit_as

__all__ = ["BindingsPool", "CondorPool"]


class CondorPool(Protocol):
    """What the adapter asks of a pool; one implementation per bindings, one fake for tests."""

    def jobs(self, constraint: str) -> list[Any]: ...

    def slots(self) -> list[Any]: ...

    def submit(self, description: Mapping[str, str]) -> int: ...

    def submit_as(self, user: str, description: Mapping[str, str]) -> int: ...

    def edit(self, job_ids: Sequence[str], attribute: str, value: str) -> None: ...

    def act(self, action: str, job_ids: Sequence[str], reason: str) -> Any: ...

    def history(self, constraint: str) -> list[Any]: ...

    def drain(self, machine: str, mode: str, reason: str) -> None: ...

    def cancel_drain(self, machine: str) -> None: ...

    def off_peaceful(self, machine: str) -> None: ...

    def set_owner(self, machine: str, user: str) -> None: ...


class BindingsPool:
    """A pool reached through the HTCondor Python bindings (``collector`` and ``schedd``: names
    of the daemons to use; ``None`` for the local configuration's)."""

    def __init__(self, collector: str | None = None, schedd: str | None = None) -> None:
        self.htcondor, self.classad = load_bindings()
        self.collector_name = collector
        self.schedd_name = schedd

    def _collector(self) -> Any:
        return (
            self.htcondor.Collector(self.collector_name)
            if self.collector_name
            else (self.htcondor.Collector())
        )

    def _schedd(self) -> Any:
        if self.schedd_name is None:
            return self.htcondor.Schedd()
        location = self._collector().locate(self.htcondor.DaemonTypes.Schedd, self.schedd_name)
        return self.htcondor.Schedd(location)

    def _startd(self, machine: str) -> Any:
        location = self._collector().locate(self.htcondor.DaemonTypes.Startd, machine)
        return self.htcondor.Startd(location)

    def jobs(self, constraint: str) -> list[Any]:
        return list(self._schedd().query(constraint))

    def slots(self) -> list[Any]:
        return list(self._collector().query(self.htcondor.AdTypes.Startd))

    def submit(self, description: Mapping[str, str]) -> int:
        result = self._schedd().submit(self.htcondor.Submit(dict(description)))
        return int(result.cluster())

    def submit_as(self, user: str, description: Mapping[str, str]) -> int:
        return submit_as(user, description, self.collector_name, self.schedd_name)

    def edit(self, job_ids: Sequence[str], attribute: str, value: str) -> None:
        self._schedd().edit(list(job_ids), attribute, value)

    def act(self, action: str, job_ids: Sequence[str], reason: str) -> Any:
        """The schedd's answer: an ad counting ``TotalSuccess``, ``TotalNotFound``,
        ``TotalPermissionDenied`` ..."""
        action_code = getattr(self.htcondor.JobAction, action)
        return self._schedd().act(action_code, list(job_ids), reason)

    def history(self, constraint: str) -> list[Any]:
        return list(self._schedd().history(constraint, [], 1))

    def drain(self, machine: str, mode: str, reason: str) -> None:
        how = getattr(self.htcondor.DrainTypes, mode.capitalize())
        startd = self._startd(machine)
        try:
            startd.drainJobs(how, reason=reason)
        except TypeError:  # the classic bindings have no reason argument
            startd.drainJobs(how)

    def cancel_drain(self, machine: str) -> None:
        self._startd(machine).cancelDrainJobs()

    def off_peaceful(self, machine: str) -> None:
        master = self._collector().locate(self.htcondor.DaemonTypes.Master, machine)
        self.htcondor.send_command(master, self.htcondor.DaemonCommands.DaemonsOffPeaceful)

    def set_owner(self, machine: str, user: str) -> None:
        # Runtime configuration of the startd (its ENABLE_RUNTIME_CONFIG and
        # SETTABLE_ATTRS_ADMINISTRATOR allow this one attribute), then a reconfig.
        startd = self._collector().locate(self.htcondor.DaemonTypes.Startd, machine)
        self.htcondor.RemoteParam(startd)[OWNER_ATTR] = f'"{user}"'
        self.htcondor.send_command(startd, self.htcondor.DaemonCommands.Reconfig)
