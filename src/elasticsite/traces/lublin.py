"""The Lublin & Feitelson ("Lublin99") workload model as a seeded, vectorised generator.

Model and every default value: U. Lublin and D. G. Feitelson, "The workload on parallel
supercomputers: modeling the characteristics of rigid jobs", J. Parallel Distrib. Comput.
63(11):1105-1122, 2003, as encoded in the authors' reference program ``m_lublin99.c``
(Parallel Workloads Archive, cs.huji.ac.il/labs/parallel/workload/m_lublin99/; its header
cites Lublin's 1999 M.Sc. thesis); GridSim's ``WorkloadLublin99`` port has the same values.

A job is serial with ``serial_prob``; else log2 of its size is two-stage uniform on
``[ulow, umed_abs]`` (probability ``uprob``) or ``[umed_abs, uhi]``, rounded to an integer
(a power of two) with ``pow2_prob``. Log run time is hyper-gamma: gamma(a1, b1) with
probability ``clip(pa * size + pb, 0, 1)``, else gamma(a2, b2). Each arrival comes
``exp(gamma(aarr * arar, barr))`` seconds of average-rate time after the last; 48 half-hour
weights from gamma(anum, bnum) stretch that into clock time (the daily cycle). The mixed
workload, the reference's default, merges independent interactive and batch streams.

Deliberate deviations: ``umed`` is the breakpoint's distance below ``uhi`` (paper 002's
"log2 m - umed"; reference ``UMED = UHI - umed``) and ``uhi = log2(machine_size) -
uhi_offset``, so the defaults fit any machine; power-of-two sizes are capped at the largest
power of two <= machine_size; submit times are not truncated to whole seconds at each step
(the C clock drifts early); ``start_time``'s time of day (86,400 s multiples are midnights)
replaces ``START``.

The model has no requested walltime. ``WalltimeModel()`` (default) requests the run time
exactly; ``WalltimeModel.f_model(f)`` draws it uniformly in ``[r, (f + 1) r]``, the
"badness factor" model of Mu'alem & Feitelson (IEEE TPDS 12(6), 2001, as stated by Tsafrir
& Feitelson, IISWC 2006), rounded up to a whole minute as Slurm's ``--time`` is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

import numpy as np
import numpy.typing as npt

from elasticsite.model import Job

__all__ = [
    "BATCH",
    "INTERACTIVE",
    "TYPELESS",
    "LublinMix",
    "LublinParams",
    "LublinWorkload",
    "WalltimeModel",
    "daily_cycle",
    "generate",
]

FloatArray = npt.NDArray[np.float64]

BUCKETS = 48
"""Half-hour slots in the daily cycle."""
SECONDS_IN_BUCKET = 86_400 / BUCKETS
_CYCLE_START = 11  # the reference fits gamma(anum, bnum) to a day starting at slot 10
_MAX_LOG_RUNTIME = 12.0  # reference TOO_MUCH_TIME: runtimes above exp(12) s are redrawn
_MAX_LOG_INTERARRIVAL = 13.0  # reference TOO_MUCH_ARRIVE_TIME
_MIN_ACCEPTANCE = 0.01  # below this the redraw loops would crawl; the parameters are absurd
_MAX_REDRAWS = 10_000

_PROBABILITIES = frozenset({"serial_prob", "pow2_prob", "uprob"})
_LOG2_DISTANCES = frozenset({"ulow", "umed", "uhi_offset"})
_GAMMA_PARAMETERS = frozenset({"a1", "b1", "a2", "b2", "aarr", "barr", "anum", "bnum", "arar"})

TYPE_UNTYPED, TYPE_INTERACTIVE, TYPE_BATCH = -1, 0, 1
"""Values of ``LublinWorkload.job_type``; 0 and 1 are the reference's SWF queue codes."""


def _gamma_cdf(x: float, shape: float, scale: float) -> float:
    """P(X <= x) for X ~ gamma(shape, scale): series below shape + 1, continued fraction above."""
    z = x / scale
    if z <= 0.0:
        return 0.0
    log_front = -z + shape * math.log(z) - math.lgamma(shape)
    if z < shape + 1.0:
        term = total = 1.0 / shape
        a = shape
        for _ in range(100_000):
            a += 1.0
            term *= z / a
            total += term
            if term < total * 1e-16:
                break
        return min(1.0, total * math.exp(log_front))
    tiny = 1e-300
    b = z + 1.0 - shape
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 100_000):
        an = -i * (i - shape)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


@dataclass(frozen=True, slots=True)
class LublinParams:
    """One job class of the model; the defaults are the reference's type-less (all-jobs) fit.

    Sizes are in log2 units: ``ulow`` is absolute, ``umed`` and ``uhi_offset`` are distances
    below ``log2(machine_size)`` (see the module docstring). ``aarr`` is the rush-hour shape
    before the all-hours correction ``arar``; ``barr`` its scale (log seconds).
    """

    serial_prob: float = 0.244
    pow2_prob: float = 0.576
    ulow: float = 0.8
    umed: float = 2.5
    uhi_offset: float = 0.0
    uprob: float = 0.86
    a1: float = 4.2
    b1: float = 0.94
    a2: float = 312.0
    b2: float = 0.03
    pa: float = -0.0054
    pb: float = 0.78
    aarr: float = 10.2303
    barr: float = 0.4871
    anum: float = 8.1737
    bnum: float = 3.9631
    arar: float = 1.0225

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int | float) or not math.isfinite(value):
                rule = "a finite number"
            elif f.name in _PROBABILITIES and not 0.0 <= value <= 1.0:
                rule = "in [0, 1]"
            elif f.name in _LOG2_DISTANCES and value < 0.0:
                rule = ">= 0"
            elif f.name in _GAMMA_PARAMETERS and value <= 0.0:
                rule = "> 0"
            else:
                continue
            raise ValueError(f"LublinParams.{f.name} must be {rule}, got {value!r}")
        if self.serial_prob + self.pow2_prob > 1.0 + 1e-12:
            raise ValueError(
                f"LublinParams.serial_prob + pow2_prob must be <= 1, got "
                f"{self.serial_prob} + {self.pow2_prob}"
            )
        for label, shape, scale, cap in (
            ("a1, b1", self.a1, self.b1, _MAX_LOG_RUNTIME),
            ("a2, b2", self.a2, self.b2, _MAX_LOG_RUNTIME),
            ("aarr * arar, barr", self.aarr * self.arar, self.barr, _MAX_LOG_INTERARRIVAL),
        ):
            if _gamma_cdf(cap, shape, scale) < _MIN_ACCEPTANCE:
                raise ValueError(
                    f"LublinParams gamma({label}) has mean {shape * scale:.3g} and puts more "
                    f"than {1 - _MIN_ACCEPTANCE:.0%} of its mass above the model's cap {cap:g}; "
                    f"lower the shape or scale"
                )

    def size_bounds(self, machine_size: int) -> tuple[float, float, float]:
        """``(ulow, umed_abs, uhi)`` in log2 processors for a machine, validated."""
        uhi = math.log2(machine_size) - self.uhi_offset
        med = uhi - self.umed
        if self.serial_prob < 1.0 and not med >= self.ulow - 1e-9:  # 1e-9: float slack
            raise ValueError(
                f"LublinParams for machine_size={machine_size}: breakpoint log2({machine_size}) "
                f"- uhi_offset - umed = {med:.3g} is below ulow={self.ulow}; lower umed to at "
                f"most {uhi - self.ulow:.3g} or ulow, or set serial_prob=1"
            )
        return self.ulow, max(med, self.ulow), uhi


TYPELESS = LublinParams()
"""The reference's parameters for all jobs regardless of type (paper 002's setting)."""

BATCH = LublinParams(
    serial_prob=0.2927, pow2_prob=0.6686, ulow=1.2, umed=2.0, uprob=0.875,
    a1=6.57, b1=0.823, a2=639.1, b2=0.0156, pa=-0.003, pb=0.6986,
    aarr=6.0415, barr=0.8531, anum=6.1271, bnum=5.2740, arar=1.0519,
)  # fmt: skip
"""The reference's batch-job parameters (UMED 5, UHI 7 for 128 nodes)."""

INTERACTIVE = LublinParams(
    serial_prob=0.1541, pow2_prob=0.625, ulow=1.0, umed=2.5, uhi_offset=1.5, uprob=0.705,
    a1=3.8351, b1=0.6605, a2=7.073, b2=0.6856, pa=-0.0118, pb=0.9156,
    aarr=6.5510, barr=0.6621, anum=8.9186, bnum=3.6680, arar=0.9797,
)  # fmt: skip
"""The reference's interactive-job parameters (UMED 3, UHI 5.5 for 128 nodes)."""


@dataclass(frozen=True, slots=True)
class LublinMix:
    """Interactive and batch streams merged by arrival time: the reference's default output."""

    interactive: LublinParams = INTERACTIVE
    batch: LublinParams = BATCH


@dataclass(frozen=True, slots=True)
class WalltimeModel:
    """How the requested walltime a backfilling scheduler plans with is derived from run time.

    ``exact`` requests the run time itself; ``f-model`` requests
    ``ceil(r * U(1, f + 1) / round_to) * round_to`` (see the module docstring for the source).
    """

    kind: Literal["exact", "f-model"] = "exact"
    f: float = 0.0
    round_to: float = 60.0

    def __post_init__(self) -> None:
        if self.kind not in ("exact", "f-model"):
            raise ValueError(f"WalltimeModel.kind must be 'exact' or 'f-model', got {self.kind!r}")
        if not (math.isfinite(self.f) and self.f >= 0.0):
            raise ValueError(f"WalltimeModel.f must be a finite number >= 0, got {self.f}")
        if not (math.isfinite(self.round_to) and self.round_to > 0.0):
            raise ValueError(f"WalltimeModel.round_to must be > 0 seconds, got {self.round_to}")

    @classmethod
    def f_model(cls, f: float, round_to: float = 60.0) -> WalltimeModel:
        """Estimates uniformly in ``[r, (f + 1) r]``, rounded up to ``round_to`` seconds."""
        return cls(kind="f-model", f=f, round_to=round_to)

    def requested(self, runtime: FloatArray, rng: np.random.Generator) -> FloatArray:
        """Requested walltimes for ``runtime`` (seconds), never below the run time."""
        if self.kind == "exact":
            return runtime.copy()
        factor = 1.0 + self.f * rng.random(runtime.size)
        return np.ceil(runtime * factor / self.round_to) * self.round_to


@dataclass(frozen=True, slots=True)
class LublinWorkload:
    """Generated jobs in submission order, as read-only parallel arrays (seconds, processors).

    ``job_type`` is ``TYPE_INTERACTIVE`` or ``TYPE_BATCH`` for a ``LublinMix``, and
    ``TYPE_UNTYPED`` for a single parameter set.
    """

    submit_time: FloatArray
    processors: npt.NDArray[np.int64]
    runtime: FloatArray
    requested_time: FloatArray
    job_type: npt.NDArray[np.int8]

    def __len__(self) -> int:
        return int(self.submit_time.size)

    def load(self, machine_size: int) -> float:
        """Offered load: processor-seconds asked for over those available between first and
        last arrival (the reference's definition)."""
        span = float(self.submit_time[-1] - self.submit_time[0]) if len(self) > 1 else 0.0
        if span <= 0.0:
            raise ValueError("load needs at least two jobs submitted at different times")
        work = float(np.dot(self.runtime, self.processors.astype(np.float64)))
        return work / (machine_size * span)

    def to_jobs(self, id_prefix: str = "lublin") -> list[Job]:
        """The workload as queued ``model.Job`` objects numbered from 1, for the simulator."""
        return [
            Job(id=f"{id_prefix}-{i + 1}", cores=int(c), walltime=float(w),
                submitted_at=float(s), runtime=float(r))
            for i, (s, c, r, w) in enumerate(
                zip(self.submit_time, self.processors, self.runtime, self.requested_time,
                    strict=True)
            )
        ]  # fmt: skip


def daily_cycle(params: LublinParams) -> FloatArray:
    """Relative arrival rate in each half hour from midnight (48 values, mean 1)."""
    weights = np.empty(BUCKETS)
    for i in range(_CYCLE_START, _CYCLE_START + BUCKETS):
        upper, lower = (_gamma_cdf(i + d, params.anum, params.bnum) for d in (0.5, -0.5))
        weights[(i - 1) % BUCKETS] = upper - lower
    if not np.all(weights > 0.0):
        raise ValueError(
            f"LublinParams anum={params.anum}, bnum={params.bnum} leave a half hour with no "
            "arrivals at all; choose a gamma with mass over the whole day"
        )
    normalised: FloatArray = weights / weights.mean()
    return normalised


def _arrival_clock(points: FloatArray, weights: FloatArray, start_time: float) -> FloatArray:
    """Turn per-job average-rate increments (in bucket units) into clock times.

    Equivalent to the reference's bucket walk: a bucket of weight ``w`` takes ``w`` points
    to cross, so the clock is the inverse of the cumulative weight, periodic per day.
    """
    cum = np.concatenate(([0.0], np.cumsum(weights)))
    per_day = float(cum[-1])
    day0, into_day = divmod(start_time, 86_400.0)
    pos = into_day / SECONDS_IN_BUCKET
    b0 = min(int(pos), BUCKETS - 1)
    total = cum[b0] + (pos - b0) * weights[b0] + np.cumsum(points)
    days = np.floor(total / per_day)
    rest = total - days * per_day
    bucket = np.clip(np.searchsorted(cum, rest, side="right") - 1, 0, BUCKETS - 1)
    frac = np.clip((rest - cum[bucket]) / weights[bucket], 0.0, 1.0)
    clock: FloatArray = (day0 + days) * 86_400.0 + (bucket + frac) * SECONDS_IN_BUCKET
    return clock


def _truncated_gamma(
    rng: np.random.Generator, shape: float, scale: float, cap: float, n: int
) -> FloatArray:
    """Gamma draws redrawn while above ``cap``, as the reference does."""
    out = rng.gamma(shape, scale, n)
    bad = np.flatnonzero(out > cap)
    for _ in range(_MAX_REDRAWS):
        if bad.size == 0:
            return out
        out[bad] = rng.gamma(shape, scale, bad.size)
        bad = bad[out[bad] > cap]
    raise RuntimeError(f"gamma({shape}, {scale}) keeps exceeding {cap}")  # pragma: no cover


def _arrivals(rng: np.random.Generator, p: LublinParams, n: int, start: float) -> FloatArray:
    gam = _truncated_gamma(rng, p.aarr * p.arar, p.barr, _MAX_LOG_INTERARRIVAL, n)
    return _arrival_clock(np.exp(gam) / SECONDS_IN_BUCKET, daily_cycle(p), start)


def _sizes(
    rng: np.random.Generator, p: LublinParams, n: int, machine_size: int
) -> npt.NDArray[np.int64]:
    low, med, hi = p.size_bounds(machine_size)
    u = rng.random((n, 3))  # one row per job keeps the draws in job order
    serial = u[:, 0] <= p.serial_prob
    pow2 = ~serial & (u[:, 0] <= p.serial_prob + p.pow2_prob)
    first = u[:, 1] <= p.uprob
    a = np.where(first, low, med)
    b = np.where(first, med, hi)
    par = a + u[:, 2] * (b - a)
    par = np.where(pow2, np.minimum(np.floor(par + 0.5), machine_size.bit_length() - 1), par)
    nodes = np.floor(np.exp2(par) + 0.5).astype(np.int64)
    return np.clip(np.where(serial, 1, nodes), 1, machine_size)


def _runtimes(
    choose: np.random.Generator, draw: np.random.Generator, p: LublinParams,
    nodes: npt.NDArray[np.int64],
) -> FloatArray:  # fmt: skip
    prob = np.clip(p.pa * nodes + p.pb, 0.0, 1.0)
    log_rt = np.empty(nodes.size)
    todo = np.arange(nodes.size)
    for _ in range(_MAX_REDRAWS):
        if todo.size == 0:
            return np.floor(np.exp(log_rt))  # the reference truncates to whole seconds
        first = choose.random(todo.size) <= prob[todo]
        hg = draw.gamma(np.where(first, p.a1, p.a2), np.where(first, p.b1, p.b2))
        ok = hg <= _MAX_LOG_RUNTIME
        log_rt[todo[ok]] = hg[ok]
        todo = todo[~ok]
    raise RuntimeError("hyper-gamma keeps exceeding the run-time cap")  # pragma: no cover


def _jobs(
    seq: np.random.SeedSequence, p: LublinParams, count: int, machine_size: int
) -> tuple[npt.NDArray[np.int64], FloatArray]:
    size_rng, choose_rng, draw_rng = (np.random.default_rng(s) for s in seq.spawn(3))
    nodes = _sizes(size_rng, p, count, machine_size)
    return nodes, _runtimes(choose_rng, draw_rng, p, nodes)


def generate(
    n_jobs: int,
    params: LublinParams | LublinMix | None = None,
    machine_size: int = 128,
    seed: int = 0,
    start_time: float = 0.0,
    *,
    walltime: WalltimeModel | None = None,
) -> LublinWorkload:
    """``n_jobs`` jobs of the model on a ``machine_size``-processor machine, reproducibly.

    ``params`` defaults to ``LublinMix()`` (interactive and batch, as the reference does);
    pass one ``LublinParams`` (e.g. ``TYPELESS``) for a single class. Submit times start
    after ``start_time`` (seconds; multiples of 86,400 are midnights). The same arguments
    always give the same jobs; ``walltime`` (default exact) changes only ``requested_time``.
    """
    for name, value, least in (("n_jobs", n_jobs, 0), ("machine_size", machine_size, 1),
                               ("seed", seed, 0)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    if not math.isfinite(start_time):
        raise ValueError(f"start_time must be a finite number of seconds, got {start_time!r}")
    mix = LublinMix() if params is None else params
    streams = (
        ((TYPE_INTERACTIVE, mix.interactive), (TYPE_BATCH, mix.batch))
        if isinstance(mix, LublinMix)
        else ((TYPE_UNTYPED, mix),)
    )
    for _, p in streams:
        p.size_bounds(machine_size)  # fail before any work on a bad machine size
    *stream_seqs, wall_seq = np.random.SeedSequence(seed).spawn(len(streams) + 1)
    seqs = [s.spawn(2) for s in stream_seqs]  # (arrivals, jobs) per stream

    # Each stream draws n_jobs arrivals, enough for any interleaving; merging them and
    # keeping the first n_jobs is the reference's "whichever type arrives next" rule.
    times = np.concatenate(
        [_arrivals(np.random.default_rng(a), p, n_jobs, start_time)
         for (a, _), (_, p) in zip(seqs, streams, strict=True)]
    )  # fmt: skip
    kinds = np.repeat(np.array([k for k, _ in streams], dtype=np.int8), n_jobs)
    # a single stream is already in order; for two, ties go to interactive, as in C
    order = np.argsort(times, kind="stable")[:n_jobs] if len(streams) > 1 else slice(None)
    submit, job_type = times[order], kinds[order]
    processors = np.empty(n_jobs, dtype=np.int64)
    runtime = np.empty(n_jobs)
    for (kind, p), (_, job_seq) in zip(streams, seqs, strict=True):
        mask = job_type == kind  # this stream's first jobs, in arrival order
        processors[mask], runtime[mask] = _jobs(job_seq, p, int(mask.sum()), machine_size)

    wall = WalltimeModel() if walltime is None else walltime
    requested = wall.requested(runtime, np.random.default_rng(wall_seq))
    arrays = (submit, processors, runtime, requested, job_type)
    for arr in arrays:
        arr.flags.writeable = False
    return LublinWorkload(*arrays)
