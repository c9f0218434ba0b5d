"""A snapshot's queue split by what the clouds can serve: the jobs a policy counts, the
jobs marked with why no cloud could run them, and which workers the first could use.

The rule is :mod:`elasticsite.feasibility`'s, applied per job shape: a queue of plain
jobs (no attributes) that all fit costs what :meth:`SiteSnapshot.plain_cores` costs,
one pass in C; otherwise each job's shape is read in C and each distinct shape judged
once. Pure: no clock, no I/O.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, product, repeat
from typing import Any

from elasticsite.attributes import EMPTY
from elasticsite.feasibility import Judge, Shape, on_site
from elasticsite.model import Job, Worker, WorkerState
from elasticsite.snapshot import SiteSnapshot

__all__ = ["QueueVerdict", "split"]

_ATTRS = operator.attrgetter("attributes")
_ID = operator.attrgetter("id")
_NONE: Mapping[str, str] = {}
"""No attributes, as a dict (whose ``get`` runs in C, unlike the shared empty mapping's)."""
_MAX_COMBINATIONS = 512
"""Combinations of attribute values judged at once before jobs are judged one by one."""
_SERVING = frozenset({WorkerState.REQUESTED, WorkerState.BOOTING, WorkerState.IDLE,
                      WorkerState.BUSY})  # fmt: skip


@dataclass(slots=True)
class QueueVerdict:
    """The queue split in two: the jobs the clouds could serve, and marks for the rest."""

    feasible: Sequence[Job]
    """The servable jobs, in queue order (the queue itself when every job is)."""
    unservable: dict[str, str]
    """Job id -> why no cloud could run it."""
    judge: Judge
    keys: set[Shape] | None
    """The shapes of the servable jobs; None: plain jobs only, all servable, or shapes
    not worked out yet (:attr:`later`)."""
    cores: Sequence[int] = ()
    """With plain jobs only, each one's cores."""
    later: Callable[[], set[Shape]] | None = None
    """Works out :attr:`keys` when a worker's use is first asked (one pass per job)."""
    _usable: dict[tuple[str, str, int], bool] = field(default_factory=dict)
    _smallest: int = 0

    def usable(self, worker: Worker) -> bool:
        """Whether some servable queued job could run on ``worker``."""
        if not self.feasible:
            return False
        memo = (worker.cloud, worker.vm_type, worker.cores)
        found = self._usable.get(memo)
        if found is None:
            fits = self.judge.fits_worker
            if self.later is not None:
                self.keys, self.later = self.later(), None
            if self.keys is None:
                if not self._smallest:
                    self._smallest = min(self.cores)
                found = fits(self.judge.plain_key(self._smallest), worker)
            else:
                found = any(fits(key, worker) for key in self.keys)
            self._usable[memo] = found
        return found


def split(snapshot: SiteSnapshot, judged: Judge) -> QueueVerdict:
    """The servable queued jobs of ``snapshot`` and why the others are not, by shape.

    A job that a worker of the site (pending or joined) could run is servable even when
    no open cloud could launch one for it. A queue of plain jobs that all fit costs
    what :meth:`SiteSnapshot.plain_cores` costs: one pass in C. Jobs with attributes
    cost a pass in C per attribute the rule reads; when every combination of the values
    present is servable, nothing more.
    """
    queued = snapshot.queued
    if not queued:
        return QueueVerdict(queued, {}, judged, None)
    cores = snapshot.queue_cores()
    top = snapshot.plain_cores()
    if top is not None:
        if top <= judged.plain_limit:
            return QueueVerdict(queued, {}, judged, None, cores)
        keys: list[Shape] = list(map(judged.plain_key, cores))
        full = {k: k for k in set(keys)}
    else:
        keys, full, exact = _shapes(queued, cores, judged)
        if not keys:  # every combination of the values present is servable
            return QueueVerdict(queued, {}, judged, None, later=exact)
    bad = {k: why for k, f in full.items() if (why := judged.verdict(f)) is not None}
    if bad:
        # A job a worker of the site could run is served by that worker.
        have = {(w.cloud, w.vm_type, w.cores): w for w in snapshot.workers if w.state in _SERVING}
        for k in list(bad):
            if any(judged.fits_worker(full[k], w) for w in have.values()):
                del bad[k]
    servable = {f for k, f in full.items() if k not in bad}
    if not bad:
        return QueueVerdict(queued, {}, judged, servable)
    site = snapshot.site_cores
    said = {k: on_site(why, full[k][0], site) if site else why for k, why in bad.items()}
    ok = list(map(operator.not_, map(said.__contains__, keys)))
    feasible = list(compress(queued, ok))
    left = list(map(operator.not_, ok))
    marks = dict(zip(map(_ID, compress(queued, left)), map(said.__getitem__, compress(keys, left)),
                     strict=True))  # fmt: skip
    return QueueVerdict(feasible, marks, judged, servable)


def _shapes(
    queued: Sequence[Job], cores: Sequence[int], judged: Judge
) -> tuple[list[Shape], dict[Shape, Shape], Callable[[], set[Shape]]]:
    """Each job's shape over the attributes some job has (a short key), the full shape
    of each distinct short key, and how to work out the jobs' full shapes. No keys when
    every combination of the values present is servable (no job needs its own)."""
    attrs: list[Mapping[str, str]] = list(map(_ATTRS, queued))
    if any(map(operator.is_, attrs, repeat(EMPTY))):  # some without: read those as {}
        attrs = [_NONE if a is EMPTY else a for a in attrs]
    names = judged.keys
    given = set().union(*attrs)  # every key some job has, in one pass in C
    present = [i for i, name in enumerate(names) if name in given]
    columns = [list(map(operator.methodcaller("get", names[i]), attrs)) for i in present]
    template = [None] * len(names)

    def widen(short: Shape) -> Shape:
        wide: list[object] = list(template)
        for i, value in zip(present, short[1:], strict=True):
            wide[i] = value
        return (short[0], *wide)

    def exact() -> set[Shape]:
        return {widen(short) for short in set(zip(cores, *columns, strict=True))}

    values: list[set[Any]] = [set(cores), *map(set, columns)]
    combos = 1
    for distinct in values:
        combos *= len(distinct)
    if combos <= _MAX_COMBINATIONS:
        every = {short: widen(short) for short in product(*values)}
        if all(judged.verdict(f) is None for f in every.values()):
            return [], every, exact
    keys: list[Shape] = list(zip(cores, *columns, strict=True))
    return keys, {short: widen(short) for short in set(keys)}, exact
