"""Metrics of a simulated run of a site extended with a cloud (paper 002, section 5).

Everything is a pure, vectorised function of per-job records (:class:`JobRecords`) and
of the cloud VMs' lifetimes, so one experiment runner can score any strategy the same
way. Equation numbers refer to paper 002 (Assuncao, Costanzo and Buyya, HPDC 2009).
Undefined figures (an average over no job, a cost with no improvement) come out as NaN
here and as None in :meth:`SimMetrics.to_rows`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt

from elasticsite.metrics import Row

__all__ = [
    "CLOUD",
    "SITE",
    "SLOWDOWN_BOUND",
    "STRINGENCY",
    "JobRecords",
    "SimMetrics",
    "VMBill",
    "assign_deadlines",
    "awrt",
    "bounded_slowdowns",
    "deadline_violations",
    "mean_bounded_slowdown",
    "non_violation_cost",
    "performance_cost",
    "rejected_jobs",
    "sim_metrics",
    "site_utilisation",
    "vm_bill",
]

SITE: Final = 0
"""``where`` code of a job that ran on the site's own cluster."""
CLOUD: Final = 1
"""``where`` code of a job that ran on cloud VMs."""
SLOWDOWN_BOUND: Final = 10.0
"""Seconds below which a runtime counts as this bound in the bounded slowdown."""
STRINGENCY: Final = {"tight": 0.9, "normal": 1.3, "relaxed": 1.7}
"""The paper's deadline scenarios: one stringency factor per experiment."""

Floats = npt.NDArray[np.float64]


def _floats(name: str, values: npt.ArrayLike, n: int | None) -> Floats:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if n is not None and len(arr) != n:
        raise ValueError(f"{name} has {len(arr)} entries, expected {n} (one per job)")
    return arr


@dataclass(frozen=True, slots=True, eq=False)
class JobRecords:
    """What a simulated run did with each job, one array entry per job (times in s).

    ``start`` and ``finish`` are NaN for a job that never ran (rejected, or still
    queued at the end); ``deadline`` is NaN for a job without one; ``where`` holds
    :data:`SITE` or :data:`CLOUD`. Omitted optional columns mean: requested time equal
    to runtime, no deadlines, everything on the site, nothing rejected.
    """

    submit: Floats
    start: Floats
    finish: Floats
    processors: Floats
    runtime: Floats
    requested: Floats
    deadline: Floats
    where: npt.NDArray[np.int64]
    rejected: npt.NDArray[np.bool_]

    def __init__(
        self,
        submit: npt.ArrayLike,
        start: npt.ArrayLike,
        finish: npt.ArrayLike,
        processors: npt.ArrayLike,
        runtime: npt.ArrayLike,
        requested: npt.ArrayLike | None = None,
        deadline: npt.ArrayLike | None = None,
        where: npt.ArrayLike | None = None,
        rejected: npt.ArrayLike | None = None,
    ) -> None:
        sub = _floats("submit", submit, None)
        n = len(sub)
        run = _floats("runtime", runtime, n)
        procs = _floats("processors", processors, n)
        if (procs < 0).any() or (run < 0).any():
            raise ValueError("processors and runtime must be >= 0 for every job")
        codes = np.zeros(n, np.int64) if where is None else np.asarray(where, dtype=np.int64)
        flags = np.zeros(n, np.bool_) if rejected is None else np.asarray(rejected, dtype=np.bool_)
        for name, arr in (("where", codes), ("rejected", flags)):
            if arr.shape != (n,):
                raise ValueError(f"{name} has shape {arr.shape}, expected ({n},) (one per job)")
        bad = ~np.isin(codes, (SITE, CLOUD))
        if bad.any():
            raise ValueError(
                f"where holds {codes[bad][0]} at job index {int(np.argmax(bad))}; "
                f"use SITE ({SITE}) or CLOUD ({CLOUD})"
            )
        columns: dict[str, npt.NDArray[np.generic]] = {
            "submit": sub,
            "start": _floats("start", start, n),
            "finish": _floats("finish", finish, n),
            "processors": procs,
            "runtime": run,
            "requested": run.copy() if requested is None else _floats("requested", requested, n),
            "deadline": np.full(n, np.nan)
            if deadline is None
            else _floats("deadline", deadline, n),
            "where": codes,
            "rejected": flags,
        }
        for name, value in columns.items():
            object.__setattr__(self, name, value)

    def __len__(self) -> int:
        return len(self.submit)

    @property
    def completed(self) -> npt.NDArray[np.bool_]:
        """Jobs that were accepted and finished: the set eq. 2 averages over."""
        return ~self.rejected & np.isfinite(self.finish)


def awrt(jobs: JobRecords) -> float:
    """Average weighted response time (eq. 2) over completed jobs, in seconds.

    Each job's response time, completion minus submission, is weighted by the resources
    it consumed: its runtime times its processor (VM) count. AWRT is the sum of the
    weighted response times over the sum of the weights; NaN when no weight is left.
    """
    done = jobs.completed
    weight = jobs.runtime[done] * jobs.processors[done]
    total = weight.sum()
    if total <= 0:
        return math.nan
    return float((weight * (jobs.finish[done] - jobs.submit[done])).sum() / total)


def bounded_slowdowns(jobs: JobRecords, bound: float = SLOWDOWN_BOUND) -> Floats:
    """Bounded slowdown of each completed job, in job order.

    A job's response time (completion minus submission) over its runtime, where
    runtimes shorter than ``bound`` seconds count as ``bound`` so that very short jobs
    do not dominate, and never below 1.
    """
    if bound <= 0:
        raise ValueError(f"bound must be > 0 seconds, got {bound}")
    done = jobs.completed
    response = jobs.finish[done] - jobs.submit[done]
    return np.maximum(response / np.maximum(jobs.runtime[done], bound), 1.0)


def mean_bounded_slowdown(jobs: JobRecords, bound: float = SLOWDOWN_BOUND) -> float:
    """Mean of :func:`bounded_slowdowns` (the paper's job slowdown); NaN with no job."""
    values = bounded_slowdowns(jobs, bound)
    return float(values.mean()) if len(values) else math.nan


def _ratio(amount: float, gain: float) -> float:
    """``amount / gain``, with 0/0 undefined (NaN) and money for no gain infinite."""
    if gain == 0:
        return math.nan if amount == 0 else math.inf
    return amount / gain


def performance_cost(amount_spent: float, awrt_strategy: float, awrt_base: float) -> float:
    """Performance cost of a strategy (eq. 3): lower means cheaper speed-up.

    The money spent on cloud VMs divided by the AWRT gained over the site-only base run
    (base AWRT minus strategy AWRT), times the strategy's AWRT. The base against itself
    gains nothing and spends nothing: 0/0, NaN. Money for no gain is infinite; a
    strategy slower than the base gets a negative value, as the equation gives.
    """
    return _ratio(amount_spent, awrt_base - awrt_strategy) * awrt_strategy


def non_violation_cost(
    amount_spent: float, violations_strategy: int, violations_base: int
) -> float:
    """Non-violation cost of a strategy (eq. 4): money per deadline violation avoided.

    The money spent on cloud VMs divided by how many fewer violations the strategy had
    than the base run; NaN for 0/0, infinite for money and no violation avoided.
    """
    return _ratio(amount_spent, float(violations_base - violations_strategy))


def assign_deadlines(
    submit: npt.ArrayLike,
    base_response: npt.ArrayLike,
    fraction: float,
    stringency: float | Sequence[float] = STRINGENCY["normal"],
    *,
    seed: int | np.random.Generator | None = None,
    floor_at_base_completion: bool = False,
) -> Floats:
    """Deadlines for a Bernoulli-chosen ``fraction`` of jobs (eq. 5); NaN for the rest.

    ``base_response`` is each job's turnaround (completion minus submission) in the
    site-only base run. Each job independently gets a deadline with probability
    ``fraction``; then, with stringency factor ``sf``, its deadline is submission plus
    ``sf`` times that turnaround when this falls before its base completion, and the
    base completion otherwise (eq. 5 as printed, which makes every ``sf >= 1`` give the
    base completion). ``floor_at_base_completion=True`` takes the other reading, the
    later of the two, so no deadline is tighter than the base schedule achieved.

    A single ``stringency`` is the paper's design (one factor per experiment, see
    :data:`STRINGENCY`); a sequence draws a factor per job, uniformly among its values.
    The same ``seed`` gives the same deadlines.
    """
    st = _floats("submit", submit, None)
    ta = _floats("base_response", base_response, len(st))
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be within [0, 1], got {fraction}")
    if not np.isfinite(ta).all() or (ta < 0).any():
        raise ValueError("base_response must be finite and >= 0 for every job")
    factors = np.atleast_1d(np.asarray(stringency, dtype=np.float64))
    if factors.ndim != 1 or len(factors) == 0 or not (factors > 0).all():
        raise ValueError(f"stringency must be one or more factors > 0, got {stringency!r}")
    rng = np.random.default_rng(seed)
    chosen = rng.random(len(st)) < fraction
    sf = factors[0] if len(factors) == 1 else rng.choice(factors, size=len(st))
    scaled = st + ta * sf
    completion = st + ta
    if floor_at_base_completion:
        deadline = np.maximum(scaled, completion)
    else:
        deadline = np.where(scaled < completion, scaled, completion)
    return np.where(chosen, deadline, np.nan)


def deadline_violations(jobs: JobRecords) -> tuple[int, int]:
    """(violations, deadline jobs): accepted jobs with a deadline, and those of them
    that completed after it or never completed. Rejected jobs are counted apart."""
    constrained = ~jobs.rejected & np.isfinite(jobs.deadline)
    late = ~(jobs.finish[constrained] <= jobs.deadline[constrained])  # NaN finish is late
    return int(late.sum()), int(constrained.sum())


def rejected_jobs(jobs: JobRecords) -> int:
    """How many jobs the strategy refused (e.g. because their deadline could not be met)."""
    return int(jobs.rejected.sum())


class VMBill(NamedTuple):
    """What a set of cloud VMs cost: money, billed VM-hours and VM-hours actually used."""

    money: float
    billed_hours: float
    used_hours: float


def vm_bill(
    start: npt.ArrayLike,
    end: npt.ArrayLike,
    price_per_hour: npt.ArrayLike,
    billing_increment: npt.ArrayLike = 3600.0,
) -> VMBill:
    """Money and VM-hours of VMs alive from ``start`` to ``end`` (seconds).

    Each VM pays every started billing increment (3600 s: whole hours, partial hours
    rounded up, as in the paper; 1 s: per second) at ``price_per_hour``, exactly as
    :func:`elasticsite.model.billed_cost`. Prices and increments may be one value or one
    per VM. Billed hours are the paid increments in hours (the paper's VM-hours).
    """
    begin = _floats("start", start, None)
    duration = _floats("end", end, len(begin)) - begin
    price = np.broadcast_to(np.asarray(price_per_hour, dtype=np.float64), duration.shape)
    step = np.maximum(
        np.broadcast_to(np.asarray(billing_increment, dtype=np.float64), duration.shape), 1e-9
    )
    alive = duration > 0
    billed = np.where(alive, np.ceil(duration / step - 1e-9) * step, 0.0)
    money = np.where(price > 0, billed * price / 3600.0, 0.0)
    return VMBill(
        money=float(money.sum()),
        billed_hours=float(billed.sum() / 3600.0),
        used_hours=float(duration[alive].sum() / 3600.0),
    )


def site_utilisation(
    jobs: JobRecords, site_processors: int, window: tuple[float, float] | None = None
) -> float:
    """Share of the site's processor-seconds that its jobs used over ``window``.

    Processor-seconds are each site job's processors times its run interval, clipped to
    the window; the capacity is ``site_processors`` times the window's length. The
    default window runs from the first submission to the last completion; NaN when it
    is empty.
    """
    if site_processors <= 0:
        raise ValueError(f"site_processors must be > 0, got {site_processors}")
    done = jobs.completed
    if window is None:
        if not done.any():
            return math.nan
        window = (float(jobs.submit.min()), float(jobs.finish[done].max()))
    lo, hi = window
    if hi <= lo:
        return math.nan
    ran = done & (jobs.where == SITE)
    busy = np.clip(np.minimum(jobs.finish[ran], hi) - np.maximum(jobs.start[ran], lo), 0.0, None)
    return float((jobs.processors[ran] * busy).sum() / (site_processors * (hi - lo)))


@dataclass(frozen=True, slots=True)
class SimMetrics:
    """Every figure paper 002 reports for one simulated run; seconds, money, hours.

    Floats are NaN where undefined; the two costs are NaN when no base run was given.
    """

    jobs_total: int
    jobs_completed: int
    jobs_on_cloud: int
    jobs_rejected: int
    awrt: float
    mean_bounded_slowdown: float
    deadline_jobs: int
    deadline_violations: int
    violation_fraction: float
    money_spent: float
    vm_hours_billed: float
    vm_hours_used: float
    site_utilisation: float
    performance_cost: float
    non_violation_cost: float

    def to_rows(self) -> list[Row]:
        """The figures as (label, value, unit) rows; NaN becomes None (undefined)."""
        rows: list[tuple[str, float | int, str]] = [
            ("jobs", self.jobs_total, "jobs"),
            ("jobs completed", self.jobs_completed, "jobs"),
            ("jobs on cloud", self.jobs_on_cloud, "jobs"),
            ("jobs rejected", self.jobs_rejected, "jobs"),
            ("AWRT", self.awrt, "s"),
            ("bounded slowdown mean", self.mean_bounded_slowdown, "ratio"),
            ("deadline jobs", self.deadline_jobs, "jobs"),
            ("deadline violations", self.deadline_violations, "jobs"),
            ("deadline violation fraction", self.violation_fraction, "fraction"),
            ("money spent", self.money_spent, "money"),
            ("VM-hours billed", self.vm_hours_billed, "h"),
            ("VM-hours used", self.vm_hours_used, "h"),
            ("site utilisation", self.site_utilisation, "fraction"),
            ("performance cost", self.performance_cost, "money"),
            ("non-violation cost", self.non_violation_cost, "money"),
        ]
        return [
            (label, None if isinstance(v, float) and math.isnan(v) else v, unit)
            for label, v, unit in rows
        ]


def sim_metrics(
    jobs: JobRecords,
    *,
    site_processors: int,
    vm_start: npt.ArrayLike = (),
    vm_end: npt.ArrayLike = (),
    price_per_hour: npt.ArrayLike = 0.10,
    billing_increment: npt.ArrayLike = 3600.0,
    base_awrt: float | None = None,
    base_violations: int | None = None,
    bound: float = SLOWDOWN_BOUND,
) -> SimMetrics:
    """All of a run's figures from its job records and its cloud VMs' lifetimes.

    ``base_awrt`` and ``base_violations`` come from the site-only base run and enable
    the performance cost (eq. 3) and the non-violation cost (eq. 4).
    """
    bill = vm_bill(vm_start, vm_end, price_per_hour, billing_increment)
    mean_awrt = awrt(jobs)
    late, constrained = deadline_violations(jobs)
    return SimMetrics(
        jobs_total=len(jobs),
        jobs_completed=int(jobs.completed.sum()),
        jobs_on_cloud=int((~jobs.rejected & (jobs.where == CLOUD)).sum()),
        jobs_rejected=rejected_jobs(jobs),
        awrt=mean_awrt,
        mean_bounded_slowdown=mean_bounded_slowdown(jobs, bound),
        deadline_jobs=constrained,
        deadline_violations=late,
        violation_fraction=late / constrained if constrained else math.nan,
        money_spent=bill.money,
        vm_hours_billed=bill.billed_hours,
        vm_hours_used=bill.used_hours,
        site_utilisation=site_utilisation(jobs, site_processors),
        performance_cost=(
            math.nan if base_awrt is None else performance_cost(bill.money, mean_awrt, base_awrt)
        ),
        non_violation_cost=(
            math.nan
            if base_violations is None
            else non_violation_cost(bill.money, late, base_violations)
        ),
    )
