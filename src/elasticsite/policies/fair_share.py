"""Fair shares of a site's VMs among its users, counted as paper 003's Cloud Scheduler
counts them: pure functions of a snapshot, for :mod:`.cloud_scheduler`.

* **Who holds a VM.** The user it serves: its owner (the user whose share booted it,
  or to whom it was handed since), else the user whose job it runs. Every live VM
  counts against its holder, booting, idle, busy and draining alike; only one the
  cloud is already taking back (terminating) does not.
* **Demand.** A user's running jobs and their queued and held ones, each wanting one
  VM of the type it names.
* **Shares.** The site's VMs divided evenly among the users with demand or VMs, none
  getting more than their demand (what one leaves goes to the others).
* **Wants.** Per user and VM type, the queued jobs their own spare VMs (requested,
  booting, idle) will not take: what a launch or a hand-over must supply. Which VM
  can take which job, and which cloud may launch one for it, is the clouds' to say
  (:class:`Fit`: the job's cores and memory, and each cloud's ``serves`` selector).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from elasticsite.feasibility import Judge
from elasticsite.model import CloudSpec, Job, Worker, WorkerState

__all__ = ["Book", "Fit", "by_user", "fair_shares"]

S = WorkerState
SPARE = (S.REQUESTED, S.BOOTING, S.IDLE)
"""A holder's workers that take their next queued job of the type without a launch."""
FIRST_JOB = 5.0
"""Seconds after a worker joins within which the job it starts is its first."""


def fair_shares(
    capacity: int, demand: dict[str, int], held: Mapping[str, int] | None = None
) -> dict[str, int]:
    """VMs per user: ``capacity`` divided evenly among the users with demand, none
    getting more than they need (what one leaves goes to the others). When the
    division leaves a remainder, one more goes to each user holding the most VMs now
    (``held``: so no VM changes hands for a remainder), then in name order."""
    held = held or {}
    share = dict.fromkeys(demand, 0)
    left = max(0, capacity)
    pending = sorted((d, u) for u, d in demand.items() if d > 0)
    while pending:
        each = left // len(pending)
        need, user = pending[0]
        if need <= each:  # the smallest demand is met in full; the rest share what is left
            share[user] = need
            left -= need
            pending.pop(0)
            continue
        extra = left - each * len(pending)
        for i, name in enumerate(
            sorted((u for _, u in pending), key=lambda u: (-held.get(u, 0), u))
        ):
            share[name] = each + (1 if i < extra else 0)
        break
    return share


class Fit:
    """Which worker may take which job, and which cloud may launch a VM for it: a VM
    of the type the job names (``types``), with the cores and memory it needs, on a
    cloud that serves it (its ``serves`` selector), as ``judge`` decides."""

    def __init__(self, judge: Judge, types: Mapping[str, str]) -> None:
        self.judge = judge
        self.types = types
        self._launches: dict[tuple[str, Hashable], bool] = {}

    def shape(self, job: Job) -> Hashable:
        return (self.types[job.id], self.judge.key(job))

    def takes(self, w: Worker, job: Job) -> bool:
        """Whether worker ``w`` can run ``job``."""
        return w.vm_type == self.types[job.id] and self.judge.fits_worker(self.judge.key(job), w)

    def launches(self, cloud: CloudSpec, job: Job) -> bool:
        """Whether a VM launched on ``cloud`` for ``job`` could run it."""
        memo = (cloud.name, self.shape(job))
        found = self._launches.get(memo)
        if found is None:
            named = self.types[job.id]
            vm = next((v for v in cloud.vm_types if v.name == named), None)
            key = self.judge.key(job)
            found = vm is not None and self.judge.fits(self.judge.need(key), cloud, vm)
            self._launches[memo] = found
        return found


@dataclass
class Book:
    """Who holds which worker, each user's share, and what each still wants; the
    policy moves workers between holders on it as it decides."""

    workers: dict[str, Worker]
    """The workers that count: live and not terminating, by id."""
    holder: dict[str, str]
    """Worker id -> the user it serves (``""``: nobody yet)."""
    shares: dict[str, int]
    wants: dict[str, Counter[str]] = field(default_factory=dict)
    """User -> VM type -> VMs more their queued jobs need."""
    waiting: dict[tuple[str, str], list[Job]] = field(default_factory=dict)
    """(user, VM type) -> the queued jobs making up their wants, in queue order."""
    started: dict[str, float] = field(default_factory=dict)
    """Worker id -> when the oldest job running there started."""
    next_walltime: dict[tuple[str, str], float] = field(default_factory=dict)
    """(user, VM type) -> the shortest walltime of their jobs waiting for one."""
    planned: Counter[str] = field(default_factory=Counter)
    """User -> VMs launched for them by this decision."""

    @classmethod
    def of(
        cls,
        workers: Iterable[Worker],
        running: Sequence[Job],
        queued: Sequence[Job],
        held: Sequence[Job],
        types: dict[str, str],
        capacity: int,
        fit: Fit,
    ) -> Book:
        """Count ``workers`` against their holders; ``queued`` are the jobs that may
        start (not held), ``types`` each typed job's VM type by id; a holder's spare
        worker takes the first of their queued jobs it can run (``fit``)."""
        on_node: dict[str, Job] = {}
        for job in running:
            if job.node and job.node not in on_node:
                on_node[job.node] = job
        counted = {w.id: w for w in workers if w.state.live and w.state is not S.TERMINATING}
        holder: dict[str, str] = {}
        started: dict[str, float] = {}
        for w in counted.values():
            there = on_node.get(w.node or w.id)
            holder[w.id] = w.owner or (there.user if there is not None else "")
            if there is not None:
                started[w.id] = there.started_at if there.started_at is not None else 0.0
        demand: Counter[str] = Counter()
        for job in (*running, *queued, *held):
            if job.id in types:
                demand[job.user] += 1
        for user in holder.values():
            if user:
                demand[user] += 0  # a holder without demand has a share of none
        holds = Counter(u for u in holder.values() if u)
        shares = fair_shares(capacity, dict(demand), holds)
        book = cls(counted, holder, shares, started=started)
        spare: defaultdict[tuple[str, str], list[Worker]] = defaultdict(list)
        for w in counted.values():
            if w.state in SPARE:
                spare[holder[w.id], w.vm_type].append(w)
        for job in (*queued, *held):
            key = (job.user, types[job.id])
            book.next_walltime[key] = min(job.walltime, book.next_walltime.get(key, job.walltime))
        none_take: set[tuple[tuple[str, str], Hashable]] = set()  # the pool only shrinks
        for job in queued:
            key = (job.user, types[job.id])
            pool = spare.get(key)
            taker = None
            if pool and (key, fit.shape(job)) not in none_take:
                taker = next((w for w in pool if fit.takes(w, job)), None)
                if taker is None:
                    none_take.add((key, fit.shape(job)))
            if taker is not None:
                pool.remove(taker)  # type: ignore[union-attr]
            else:
                book.wants.setdefault(job.user, Counter())[key[1]] += 1
                book.waiting.setdefault(key, []).append(job)
        return book

    def holds(self, user: str) -> int:
        return sum(1 for u in self.holder.values() if u == user) + self.planned[user]

    def first(self, user: str, vm_type: str, ok: Callable[[Job], bool]) -> Job | None:
        """The first of ``user``'s jobs wanting a VM of ``vm_type`` that ``ok`` takes."""
        return next((j for j in self.waiting.get((user, vm_type), ()) if ok(j)), None)

    def meet(self, user: str, vm_type: str, job: Job) -> None:
        """One of ``user``'s wants met: ``job`` has a VM coming."""
        self.wants[user][vm_type] -= 1
        self.waiting[user, vm_type].remove(job)

    def plan(self, user: str, vm_type: str, job: Job) -> None:
        """Count a VM launched for ``user`` now, for ``job``."""
        self.planned[user] += 1
        self.meet(user, vm_type, job)

    def room(self, user: str) -> int:
        """VMs ``user`` may still gain (negative: how many they hold beyond their share)."""
        return self.shares.get(user, 0) - self.holds(user)

    def over(self) -> dict[str, int]:
        """Users holding more than their share, and by how many."""
        held: Counter[str] = Counter(u for u in self.holder.values() if u)
        held.update(self.planned)
        return {u: n - self.shares.get(u, 0) for u, n in held.items() if n > self.shares.get(u, 0)}

    def takers(self) -> list[str]:
        """Users below their share who want a VM, the furthest below first."""
        found = [u for u, w in self.wants.items() if +w and self.room(u) > 0]
        return sorted(found, key=lambda u: (-self.room(u), u))

    def hand(self, worker_id: str, user: str, vm_type: str, job: Job) -> None:
        """Count ``worker_id`` as ``user``'s from now on, for ``job``."""
        self.holder[worker_id] = user
        self.meet(user, vm_type, job)

    def unmet(self) -> Counter[tuple[str, str]]:
        """(user, VM type) -> VMs still wanted by users below their share."""
        out: Counter[tuple[str, str]] = Counter()
        for user, wanted in self.wants.items():
            room = self.room(user)
            for vm_type, n in sorted(wanted.items()):
                take = min(n, room)
                if take > 0:
                    out[user, vm_type] = take
                    room -= take
        return out

    def startable(self, moved: set[str]) -> set[tuple[str, str]]:
        """(holder, VM type) of every worker that may still start a job (coming, idle
        or busy) and is not being taken back: where a held job could run if released."""
        return {
            (self.holder[wid], w.vm_type)
            for wid, w in self.workers.items()
            if wid not in moved and w.state in (*SPARE, S.BUSY)
        }

    def of_user(self, user: str) -> list[Worker]:
        return [self.workers[wid] for wid, u in self.holder.items() if u == user]

    def young(self, w: Worker, now: float, killing: bool) -> bool:
        """Whether taking ``w`` back for another user's share now would waste its boot:
        it has been idle since it joined (for no longer than the shortest walltime its
        holder waits with, so it cannot be kept forever), or, when ``killing``, it runs
        the job it took when it joined. (Drained, a busy VM finishes its job first.)"""
        joined = w.joined_at if w.joined_at is not None else w.requested_at
        started = self.started.get(w.id)
        if started is not None:
            return killing and started - joined <= FIRST_JOB
        return w.state is S.IDLE and w.state_since == joined and now - joined < self.wait(w)

    def wait(self, w: Worker) -> float:
        """The shortest walltime of the jobs ``w``'s holder waits with for its type."""
        return self.next_walltime.get((self.holder[w.id], w.vm_type), 0.0)

    def unused(self, user: str, now: float, moved: set[str]) -> bool:
        """Whether ``user`` has a VM that is coming (requested, booting) or has not run a
        job yet, not being taken back: holding their jobs would leave it idle."""
        for w in self.of_user(user):
            if w.id in moved:
                continue
            if w.state in (S.REQUESTED, S.BOOTING) or self.young(w, now, killing=False):
                return True
        return False


def by_user(jobs: Iterable[Job], types: dict[str, str]) -> defaultdict[tuple[str, str], int]:
    """(user, VM type) -> how many of ``jobs`` there are."""
    out: defaultdict[tuple[str, str], int] = defaultdict(int)
    for job in jobs:
        out[job.user, types[job.id]] += 1
    return out
