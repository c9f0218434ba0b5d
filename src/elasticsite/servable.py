"""A snapshot's queue split by what the clouds can serve: the jobs a policy counts, the
jobs marked with why no cloud could run them, and which workers the first could use.

The rule is :mod:`elasticsite.feasibility`'s, applied per job shape: a queue of plain
jobs (no attributes) that all fit costs what :meth:`SiteSnapshot.plain_cores` costs,
one pass in C; otherwise each job's shape is read in C and each distinct shape judged
once. Pure: no clock, no I/O.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat

from elasticsite.attributes import EMPTY
from elasticsite.feasibility import Judge, Shape, on_site
from elasticsite.model import Job, Worker, WorkerState
from elasticsite.snapshot import SiteSnapshot

__all__ = ["QueueVerdict", "split"]

_ATTRS = operator.attrgetter("attributes")
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
    """The shapes of the servable jobs; None: plain jobs only, all servable."""
    cores: Sequence[int] = ()
    """With plain jobs only, each one's cores."""
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
    what :meth:`SiteSnapshot.plain_cores` costs: one pass in C.
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
    else:
        attrs = list(map(_ATTRS, queued))
        get = [operator.methodcaller("get", k) for k in judged.keys]
        blank = judged._blank
        if any(map(operator.is_, attrs, repeat(EMPTY))):
            keys = [
                (c, *blank) if a is EMPTY else (c, *[g(a) for g in get])
                for c, a in zip(cores, attrs, strict=True)
            ]
        else:
            keys = list(zip(cores, *[list(map(g, attrs)) for g in get], strict=True))
    shapes = set(keys)
    bad = {k: reason for k in shapes if (reason := judged.verdict(k)) is not None}
    if bad:
        # A job a worker of the site could run is served by that worker.
        have = {(w.cloud, w.vm_type, w.cores): w for w in snapshot.workers if w.state in _SERVING}
        for k in list(bad):
            if any(judged.fits_worker(k, w) for w in have.values()):
                del bad[k]
    if not bad:
        return QueueVerdict(queued, {}, judged, shapes)
    ok = [k not in bad for k in keys]
    feasible = list(compress(queued, ok))
    marks: dict[str, str] = {}
    for job, k in zip(compress(queued, map(operator.not_, ok)),
                      compress(keys, map(operator.not_, ok)), strict=True):  # fmt: skip
        reason = bad[k]
        site = snapshot.site_cores
        marks[job.id] = on_site(reason, job.cores, site) if site else reason
    return QueueVerdict(feasible, marks, judged, shapes - bad.keys())
