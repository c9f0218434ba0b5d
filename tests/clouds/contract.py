"""The shared contract every :class:`~elasticsite.clouds.base.CloudDriver` passes.

A concrete test class inherits :class:`CloudContract` and provides a ``harness``
fixture: a :class:`CloudHarness` holding a fresh driver for one site, and saying how
time passes for it. A real cloud waits by sleeping; the simulated cloud runs its
:class:`~elasticsite.sim.engine.Simulation` forward. Every wait is bounded by the
harness's ``patience``, in the driver's own seconds.

Every rule here is one :mod:`elasticsite.clouds.base` states in its docstring; the
tests use only the contract's three methods, never a driver's extras.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TypeVar

import pytest

from elasticsite.clouds.base import (
    SITE_TAG,
    WORKER_TAG,
    CloudDriver,
    CloudError,
    Instance,
    InstanceState,
    LaunchRequest,
)
from elasticsite.model import VMType

__all__ = ["CloudContract", "CloudHarness"]

T = TypeVar("T")

UNKNOWN_ID = "i-not-an-instance-of-this-cloud"
"""An instance id no fresh cloud knows."""


class CloudHarness(ABC):
    """One driver under test, for site :attr:`site_id`, and its clock."""

    driver: CloudDriver
    site_id: str
    vm_type: VMType = VMType("small", cores=1)
    step: float = 0.05
    """Seconds each :meth:`settle` lets pass while a test waits."""
    patience: float = 15.0
    """Seconds a state change may take to show in ``describe()`` (boot, shutdown, lag)."""

    @abstractmethod
    def settle(self, seconds: float) -> None:
        """Let ``seconds`` of the driver's time pass."""

    def neighbour(self) -> CloudDriver | None:
        """A driver for another site on the same cloud (same account, same registry),
        or None for a cloud that serves a single site."""
        return None

    @abstractmethod
    def refusing(self) -> tuple[CloudDriver, list[str]]:
        """A driver of this kind, and names whose launch it must refuse (past its quota,
        or told to fail)."""


def tags_for(site_id: str, name: str) -> dict[str, str]:
    """The tags the manager launches a worker's instance with, and one of a caller's own."""
    return {SITE_TAG: site_id, WORKER_TAG: name, "purpose": "contract"}


def gone(instance: Instance | None) -> bool:
    """Whether ``describe()`` shows an instance as over: absent, or terminated."""
    return instance is None or instance.state is InstanceState.TERMINATED


class CloudContract:
    """Tests inherited by ``TestXxxContract`` classes; see the module docstring."""

    # -- helpers -------------------------------------------------------------------------

    @staticmethod
    def eventually(harness: CloudHarness, what: str, check: Callable[[], T | None]) -> T:
        """The first truthy ``check()``, letting time pass between looks; fails naming
        ``what`` after the harness's patience."""
        waited = 0.0
        while True:
            found = check()
            if found:
                return found
            if waited >= harness.patience:
                pytest.fail(f"{what}: still not so after {harness.patience:g} s")
            harness.settle(harness.step)
            waited += harness.step

    @staticmethod
    def described(driver: CloudDriver, name: str) -> Instance | None:
        """The instance named ``name`` in one ``describe()``; listed once at most."""
        found = [i for i in driver.describe() if i.name == name]
        assert len(found) <= 1, f"{name} described {len(found)} times: {found}"
        return found[0] if found else None

    def launch(self, harness: CloudHarness, *names: str) -> list[Instance]:
        return harness.driver.launch(
            LaunchRequest(
                harness.vm_type, names, {"role": "worker"}, tags_for(harness.site_id, names[0])
            )
        )

    def shown(self, harness: CloudHarness, name: str) -> Instance:
        """``name``'s instance, once ``describe()`` shows it."""
        return self.eventually(
            harness, f"{name} shown by describe()", lambda: self.described(harness.driver, name)
        )

    # -- what any driver promises --------------------------------------------------------

    def test_is_a_cloud_driver(self, harness: CloudHarness) -> None:
        assert isinstance(harness.driver, CloudDriver)
        assert isinstance(harness.driver.name, str) and harness.driver.name

    def test_a_fresh_cloud_describes_nothing_of_ours(self, harness: CloudHarness) -> None:
        assert harness.driver.describe() == []

    def test_launch_starts_one_instance_per_name(self, harness: CloudHarness) -> None:
        found = self.launch(harness, "w1", "w2")
        assert [i.name for i in found] == ["w1", "w2"]
        assert len({i.id for i in found}) == 2 and all(i.id for i in found)
        assert {i.state for i in found} <= {InstanceState.PENDING, InstanceState.RUNNING}

    def test_launch_is_idempotent_by_name(self, harness: CloudHarness) -> None:
        (first,) = self.launch(harness, "w1")
        again = self.launch(harness, "w1", "w2")
        assert [i.name for i in again] == ["w1", "w2"]
        assert again[0].id == first.id, "a second launch of w1 started another instance"
        self.shown(harness, "w2")
        assert self.shown(harness, "w1").id == first.id
        (third,) = self.launch(harness, "w1")  # also once the cloud shows it
        assert third.id == first.id

    def test_every_instance_carries_its_launch_tags(self, harness: CloudHarness) -> None:
        tags = tags_for(harness.site_id, "w1")
        (launched,) = self.launch(harness, "w1")
        assert tags.items() <= launched.tags.items(), launched.tags
        shown = self.shown(harness, "w1")
        assert tags.items() <= shown.tags.items(), shown.tags
        assert shown.tags[WORKER_TAG] == "w1" and shown.tags[SITE_TAG] == harness.site_id

    def test_a_launched_instance_comes_up(self, harness: CloudHarness) -> None:
        (launched,) = self.launch(harness, "w1")

        def running() -> Instance | None:
            found = self.described(harness.driver, "w1")
            return found if found and found.state is InstanceState.RUNNING else None

        assert self.eventually(harness, "w1 running", running).id == launched.id

    def test_describe_shows_only_this_sites_instances(self, harness: CloudHarness) -> None:
        self.launch(harness, "ours")
        self.shown(harness, "ours")
        assert all(i.tags.get(SITE_TAG) == harness.site_id for i in harness.driver.describe())
        neighbour = harness.neighbour()
        if neighbour is None:
            pytest.skip(f"{type(harness.driver).__name__}: the cloud serves one site")
        neighbour.launch(
            LaunchRequest(harness.vm_type, ["theirs"], {}, tags_for("another-site", "theirs"))
        )
        self.eventually(
            harness, "theirs shown to its own site", lambda: self.described(neighbour, "theirs")
        )
        assert [i.name for i in harness.driver.describe()] == ["ours"]
        assert "ours" not in [i.name for i in neighbour.describe()]

    def test_a_launch_tagged_for_another_site_starts_nothing(self, harness: CloudHarness) -> None:
        if harness.neighbour() is None:
            pytest.skip(f"{type(harness.driver).__name__}: the cloud serves one site")
        request = LaunchRequest(harness.vm_type, ["w1"], {}, tags_for("another-site", "w1"))
        with pytest.raises(CloudError, match="another site"):
            harness.driver.launch(request)
        assert self.described(harness.driver, "w1") is None

    def test_a_terminated_instance_goes(self, harness: CloudHarness) -> None:
        (launched,) = self.launch(harness, "w1")
        self.shown(harness, "w1")
        harness.driver.terminate([launched.id])
        self.eventually(
            harness, "w1 gone after terminate", lambda: gone(self.described(harness.driver, "w1"))
        )
        harness.driver.terminate([launched.id])  # again, once gone: ignored

    def test_an_instance_still_booting_can_be_terminated(self, harness: CloudHarness) -> None:
        (launched,) = self.launch(harness, "w1")
        harness.driver.terminate([launched.id])
        self.eventually(
            harness, "w1 gone after terminate", lambda: gone(self.described(harness.driver, "w1"))
        )

    def test_many_instances_go_in_one_terminate_call(self, harness: CloudHarness) -> None:
        names = ("w1", "w2", "w3")
        launched = self.launch(harness, *names)
        for name in names:
            self.shown(harness, name)
        # the manager gives a driver a step's terminations at once, unknown ids among them
        harness.driver.terminate([UNKNOWN_ID, *(i.id for i in launched)])

        def all_gone() -> bool:
            shown = {i.name: i for i in harness.driver.describe()}
            return all(gone(shown.get(name)) for name in names)

        self.eventually(harness, "w1, w2 and w3 gone after one terminate", all_gone)

    def test_terminate_ignores_unknown_ids(self, harness: CloudHarness) -> None:
        (launched,) = self.launch(harness, "w1")
        harness.driver.terminate([UNKNOWN_ID])
        harness.driver.terminate([])
        shown = self.shown(harness, "w1")
        assert shown.id == launched.id and not gone(shown)

    def test_a_refused_launch_is_a_cloud_error(self, harness: CloudHarness) -> None:
        driver, names = harness.refusing()
        with pytest.raises(CloudError) as caught:
            driver.launch(
                LaunchRequest(harness.vm_type, names, {}, tags_for(harness.site_id, names[-1]))
            )
        assert str(caught.value), "a CloudError says what failed"
        assert names[-1] not in [i.name for i in driver.describe()]
