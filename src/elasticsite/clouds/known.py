"""What a driver remembers of its site's instances between two ``describe()`` calls.

The manager describes every cloud at every step, so a driver has just seen the
site's instances when its launches and terminations come. :class:`Known` keeps
that listing (and what the driver launched since) so that

* a launch asks the cloud nothing more for the names it knows: once the site has been
  listed, a name the listing does not show and this driver did not launch has no
  instance (worker names are never reused, and one manager runs a site), unless this
  driver's launch of it failed (its answer may have been lost): such a name is looked
  up first, until a listing asked since tells. Launches stay remembered for
  ``known_for`` seconds, while listings may not show them yet; ``known_for = 0``
  looks every launch's names up first;
* a termination knows which ids carry the site's tag without listing them again.

Thread-safe: launches and terminations run on the manager's pool.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from elasticsite.clouds.base import Instance, InstanceState

__all__ = ["Known"]

_LIVE = (InstanceState.PENDING, InstanceState.RUNNING)


class Known:
    """The site's instances as of the last listing, plus those launched since."""

    def __init__(self, known_for: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.known_for = known_for
        self.clock = clock
        self._live: dict[str, Instance] = {}
        self._launched_at: dict[str, float] = {}
        self._ours: set[str] = set()
        self._doubtful: dict[str, float] = {}
        """Names whose launch failed here, and when: a lost answer may have started one."""
        self._described_at = -math.inf
        self._lock = threading.Lock()

    def now(self) -> float:
        return self.clock()

    def described(self, found: Iterable[Instance], asked: float) -> None:
        """A listing of every instance of the site, asked for at ``asked`` (:meth:`now`)."""
        found = list(found)
        keep = asked - self.known_for
        with self._lock:
            # recent launches stay known even if this listing does not show them yet
            since = {n: i for n, i in self._live.items() if self._launched_at.get(n, -1) >= keep}
            self._live = {**since, **{i.name: i for i in found if i.state in _LIVE}}
            self._launched_at = {n: t for n, t in self._launched_at.items() if t >= keep}
            self._ours = {i.id for i in found} | {i.id for i in since.values()}
            self._doubtful = {n: t for n, t in self._doubtful.items() if t >= asked}
            self._described_at = max(self._described_at, asked)

    def launched(self, instance: Instance) -> None:
        with self._lock:
            self._doubtful.pop(instance.name, None)
            self._live[instance.name] = instance
            self._launched_at[instance.name] = self.clock()
            self._ours.add(instance.id)

    def failed(self, names: Iterable[str]) -> None:
        """A launch of ``names`` failed: whether it started anything is not known."""
        with self._lock:
            now = self.clock()
            self._doubtful.update((n, now) for n in names)

    def live(self, names: Sequence[str]) -> dict[str, Instance] | None:
        """The live instances of ``names``, or None when the cloud must be asked: the
        site was never listed, or a launch of one of them failed since."""
        with self._lock:
            if self.known_for <= 0 or self._described_at == -math.inf:
                return None
            if any(n in self._doubtful for n in names):
                return None
            return {n: self._live[n] for n in names if n in self._live}

    def ours(self, ids: Iterable[str]) -> list[str]:
        """Those of ``ids`` seen carrying the site's tag."""
        with self._lock:
            return [i for i in ids if i in self._ours]

    def forget(self, ids: Iterable[str]) -> None:
        """These instances are going: no launch may take them for live ones."""
        gone = set(ids)
        with self._lock:
            self._live = {n: i for n, i in self._live.items() if i.id not in gone}
