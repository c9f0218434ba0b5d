"""Tests of the Lublin99 workload generator: reproducibility, validation, and the model's
distributions and parameter directions checked on large samples."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from elasticsite.model import JobState
from elasticsite.traces import lublin
from elasticsite.traces.lublin import (
    BATCH,
    INTERACTIVE,
    TYPELESS,
    LublinMix,
    LublinParams,
    WalltimeModel,
    daily_cycle,
    generate,
)

LARGE = 200_000


def _fits(params: LublinParams, machine_size: int) -> LublinParams:
    """``params`` adjusted so its size bounds are valid on ``machine_size``."""
    uhi = math.log2(machine_size) - params.uhi_offset
    if uhi - params.ulow >= 0.0:
        return replace(params, umed=min(params.umed, uhi - params.ulow))
    return replace(params, serial_prob=1.0, pow2_prob=0.0)


def _truncated_mean_log_runtime(p: LublinParams, nodes: int) -> float:
    """E[log run time] for ``nodes``: the hyper-gamma mean, conditioned on <= the cap."""
    q = min(max(p.pa * nodes + p.pb, 0.0), 1.0)
    cap, cdf = 12.0, lublin._gamma_cdf
    mass = q * cdf(cap, p.a1, p.b1) + (1 - q) * cdf(cap, p.a2, p.b2)
    # E[X; X <= c] = k * theta * F(c; k + 1, theta) for X ~ gamma(k, theta)
    part1 = q * p.a1 * p.b1 * cdf(cap, p.a1 + 1, p.b1)
    part2 = (1 - q) * p.a2 * p.b2 * cdf(cap, p.a2 + 1, p.b2)
    return (part1 + part2) / mass


def _same(a: lublin.LublinWorkload, b: lublin.LublinWorkload) -> bool:
    return all(
        np.array_equal(getattr(a, f), getattr(b, f))
        for f in ("submit_time", "processors", "runtime", "requested_time", "job_type")
    )


# --- the published defaults and the gamma cdf they rely on -------------------------------


def test_defaults_are_the_reference_values() -> None:
    assert LublinParams() == TYPELESS
    assert (TYPELESS.serial_prob, TYPELESS.pow2_prob, TYPELESS.ulow, TYPELESS.uprob) == (
        0.244, 0.576, 0.8, 0.86,
    )  # fmt: skip
    assert TYPELESS.umed == 7 - 4.5 and TYPELESS.uhi_offset == 0.0  # UMED 4.5, UHI 7
    assert (TYPELESS.a1, TYPELESS.b1, TYPELESS.a2, TYPELESS.b2) == (4.2, 0.94, 312.0, 0.03)
    assert (TYPELESS.pa, TYPELESS.pb) == (-0.0054, 0.78)
    assert (TYPELESS.aarr, TYPELESS.barr, TYPELESS.anum, TYPELESS.bnum, TYPELESS.arar) == (
        10.2303, 0.4871, 8.1737, 3.9631, 1.0225,
    )  # fmt: skip
    assert (BATCH.umed, BATCH.pb, BATCH.barr, BATCH.a2) == (7 - 5, 0.6986, 0.8531, 639.1)
    assert (INTERACTIVE.umed, INTERACTIVE.uhi_offset) == (5.5 - 3, 7 - 5.5)
    assert (INTERACTIVE.pb, INTERACTIVE.barr, INTERACTIVE.arar) == (0.9156, 0.6621, 0.9797)
    assert LublinMix() == LublinMix(interactive=INTERACTIVE, batch=BATCH)


@pytest.mark.parametrize("x", [0.1, 1.0, 2.9, 3.1, 10.0, 40.0])
def test_gamma_cdf_matches_closed_forms(x: float) -> None:
    assert lublin._gamma_cdf(x, 1.0, 2.0) == pytest.approx(1 - math.exp(-x / 2), abs=1e-12)
    erlang3 = 1 - math.exp(-x) * (1 + x + x * x / 2)
    assert lublin._gamma_cdf(x, 3.0, 1.0) == pytest.approx(erlang3, abs=1e-12)
    assert lublin._gamma_cdf(-x, 3.0, 1.0) == 0.0


# --- reproducibility ------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**63), typed=st.booleans(), start=st.floats(0, 1e9))
def test_same_seed_same_jobs(seed: int, typed: bool, start: float) -> None:
    params = None if typed else TYPELESS
    first = generate(500, params, 128, seed, start)
    assert _same(first, generate(500, params, 128, seed, start))


@pytest.mark.parametrize("params", [None, TYPELESS])
def test_different_seeds_differ(params: LublinParams | None) -> None:
    a, b = generate(200, params, 128, 1), generate(200, params, 128, 2)
    assert not np.array_equal(a.submit_time, b.submit_time)
    assert not np.array_equal(a.processors, b.processors)
    assert not np.array_equal(a.runtime, b.runtime)


def test_walltime_model_changes_only_requested_time() -> None:
    exact = generate(5_000, TYPELESS, 128, 7)
    fuzzy = generate(5_000, TYPELESS, 128, 7, walltime=WalltimeModel.f_model(3.0))
    assert np.array_equal(exact.requested_time, exact.runtime)
    assert np.array_equal(exact.runtime, fuzzy.runtime)
    assert np.array_equal(exact.submit_time, fuzzy.submit_time)
    req, rt = fuzzy.requested_time, fuzzy.runtime
    assert np.all(req >= rt) and np.all(req % 60 == 0)
    assert np.all(req <= np.ceil(4 * rt / 60) * 60)
    ratio = np.median(req[rt > 3_600] / rt[rt > 3_600])  # rounding barely matters here
    assert ratio == pytest.approx(2.5, abs=0.1)  # median of U(1, 4)


def test_start_time_shifts_whole_days_exactly() -> None:
    base = generate(1_000, None, 128, 5)
    later = generate(1_000, None, 128, 5, start_time=3 * 86_400.0)
    assert np.allclose(later.submit_time, base.submit_time + 3 * 86_400.0, rtol=0, atol=1e-6)
    assert np.array_equal(later.processors, base.processors)
    assert np.all(base.submit_time > 0.0)


# --- validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("serial_prob", 1.2, "serial_prob must be in [0, 1]"),
        ("pow2_prob", -0.1, "pow2_prob must be in [0, 1]"),
        ("uprob", 2.0, "uprob must be in [0, 1]"),
        ("pow2_prob", 0.8, "serial_prob + pow2_prob must be <= 1"),
        ("umed", -1.0, "umed must be >= 0"),
        ("barr", 0.0, "barr must be > 0"),
        ("a1", -4.2, "a1 must be > 0"),
        ("pb", math.nan, "pb must be a finite number"),
        ("b2", 1.0, "gamma(a2, b2) has mean 312"),
        ("barr", 5.0, "gamma(aarr * arar, barr)"),
    ],
)
def test_bad_params_are_rejected_by_name(field: str, value: float, words: str) -> None:
    with pytest.raises(ValueError, match=f"LublinParams.*{re.escape(words)}"):
        replace(TYPELESS, **{field: value})


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"n_jobs": -1}, "n_jobs must be an integer >= 0"),
        ({"n_jobs": 2.5}, "n_jobs must be an integer >= 0"),
        ({"machine_size": 0}, "machine_size must be an integer >= 1"),
        ({"seed": -3}, "seed must be an integer >= 0"),
        ({"start_time": math.inf}, "start_time must be a finite number"),
        ({"machine_size": 8}, "breakpoint log2\\(8\\)"),
    ],
)
def test_bad_generate_arguments_are_rejected(kwargs: dict[str, object], words: str) -> None:
    args: dict[str, object] = {"n_jobs": 10, "params": TYPELESS, "machine_size": 128, "seed": 0}
    args.update(kwargs)
    with pytest.raises(ValueError, match=words):
        generate(**args)  # type: ignore[arg-type]


def test_small_machine_error_says_how_to_fix_it() -> None:
    with pytest.raises(ValueError, match=re.escape("lower umed to at most 2.2")):
        generate(10, TYPELESS, machine_size=8)
    ok = generate(2_000, replace(TYPELESS, umed=1.5), machine_size=8)
    assert ok.processors.max() <= 8


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"kind": "guess"}, "kind must be"),
        ({"f": -1.0}, "f must be"),
        ({"round_to": 0}, "round_to"),
    ],
)
def test_bad_walltime_models_are_rejected(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=f"WalltimeModel.{words}"):
        WalltimeModel(**kwargs)  # type: ignore[arg-type]


# --- invariants on any machine ---------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    machine_size=st.integers(1, 5_000),
    seed=st.integers(0, 2**32),
    which=st.sampled_from(["typeless", "batch", "interactive", "mix"]),
    f=st.floats(0.0, 20.0),
)
@example(machine_size=8, seed=0, which="typeless", f=0.0)  # umed exactly at its float limit
def test_generated_jobs_are_well_formed(machine_size: int, seed: int, which: str, f: float) -> None:
    params: LublinParams | LublinMix
    if which == "mix":
        params = LublinMix(_fits(INTERACTIVE, machine_size), _fits(BATCH, machine_size))
    else:
        params = _fits({"typeless": TYPELESS, "batch": BATCH}.get(which, INTERACTIVE), machine_size)
    w = generate(300, params, machine_size, seed, 1_000.0, walltime=WalltimeModel.f_model(f))
    assert len(w) == 300
    assert np.all((w.processors >= 1) & (w.processors <= machine_size))
    assert np.all(np.diff(w.submit_time) >= 0.0) and w.submit_time[0] > 1_000.0
    assert np.all((w.runtime >= 1.0) & (w.runtime <= math.exp(12.0)))
    assert np.all(w.runtime == np.floor(w.runtime))
    assert np.all(w.requested_time >= w.runtime)
    expected_types = {0, 1} if which == "mix" else {-1}
    assert set(np.unique(w.job_type)) <= expected_types
    with pytest.raises(ValueError, match="read-only"):
        w.processors[0] = 1


def test_no_jobs_and_non_power_of_two_machines() -> None:
    assert len(generate(0)) == 0
    w = generate(20_000, TYPELESS, 100, 3)
    assert w.processors.max() <= 100
    pow2 = w.processors[(w.processors & (w.processors - 1)) == 0]
    assert pow2.max() == 64  # power-of-two jobs are capped at the largest fitting power


# --- sizes ----------------------------------------------------------------------------


def _tsu_cdf(x: float, low: float, med: float, hi: float, prob: float) -> float:
    if x <= med:
        return prob * min(max((x - low) / (med - low), 0.0), 1.0)
    return prob + (1 - prob) * min((x - med) / (hi - med), 1.0)


@pytest.mark.parametrize("params", [TYPELESS, BATCH])
def test_serial_and_power_of_two_fractions_match(params: LublinParams) -> None:
    w = generate(LARGE, params, 128, 11)
    sizes = w.processors
    assert np.mean(sizes == 1) == pytest.approx(params.serial_prob, abs=0.005)
    # sizes drawn without rounding still land on a power of two when 2^par rounds to one
    low, med, hi = params.size_bounds(128)
    by_chance = sum(
        _tsu_cdf(math.log2(2**k + 0.5), low, med, hi, params.uprob)
        - _tsu_cdf(math.log2(2**k - 0.5), low, med, hi, params.uprob)
        for k in range(1, 8)
    )
    other = 1 - params.serial_prob - params.pow2_prob
    expected = params.pow2_prob + other * by_chance
    observed = np.mean((sizes > 1) & ((sizes & (sizes - 1)) == 0))
    assert observed == pytest.approx(expected, abs=0.006)


def test_larger_umed_gives_smaller_jobs() -> None:
    """Paper 002: the breakpoint sits at log2 m - umed, so larger umed means smaller jobs."""
    means = []
    for umed in (1.5, 2.5, 3.5):
        params = replace(TYPELESS, umed=umed, serial_prob=0.0, pow2_prob=0.0)
        w = generate(LARGE, params, 128, 4)
        log_size = np.log2(w.processors)
        means.append(log_size.mean())
        low, med, hi = params.size_bounds(128)  # E[tsu] of the reference's comment
        expected = (params.uprob * low + med + (1 - params.uprob) * hi) / 2
        assert log_size.mean() == pytest.approx(expected, abs=0.02)  # rounding to integers
    assert means[0] > means[1] > means[2]


# --- run times ------------------------------------------------------------------------


@pytest.mark.parametrize("params", [TYPELESS, BATCH, INTERACTIVE])
def test_mean_log_runtime_matches_the_hyper_gamma(params: LublinParams) -> None:
    w = generate(LARGE, params, 128, 21)
    nodes, counts = np.unique(w.processors, return_counts=True)
    expected = (
        sum(
            c * _truncated_mean_log_runtime(params, int(n))
            for n, c in zip(nodes, counts, strict=True)
        )
        / counts.sum()
    )
    log_rt = np.log(w.runtime + 0.5)  # undoes most of the reference's truncation to seconds
    tolerance = 4 * log_rt.std() / math.sqrt(LARGE) + 0.01
    assert log_rt.mean() == pytest.approx(expected, abs=tolerance)


def test_larger_pb_gives_shorter_jobs() -> None:
    """Paper 002: pb is the weight of the short gamma, so larger pb means shorter jobs."""
    means = [
        np.log(generate(LARGE, replace(TYPELESS, pb=pb), 128, 8).runtime).mean()
        for pb in (0.5, 0.75, 1.0)
    ]
    assert means[0] > means[1] + 0.5 > means[2] + 1.0


# --- arrivals -------------------------------------------------------------------------


def test_larger_barr_spaces_arrivals_out() -> None:
    """Paper 002: barr scales rush-hour inter-arrival times, so larger barr means fewer jobs."""
    gaps = [
        np.diff(generate(50_000, replace(TYPELESS, barr=barr), 128, 9).submit_time).mean()
        for barr in (0.45, 0.5, 0.55)
    ]
    assert gaps[0] * 1.2 < gaps[1] < gaps[2] / 1.2


def test_daily_cycle_shows_in_arrival_times() -> None:
    weights = daily_cycle(TYPELESS)
    assert weights.mean() == pytest.approx(1.0)
    assert int(np.argmin(weights)) == 10 and 26 <= int(np.argmax(weights)) <= 29  # 5:00, ~14:00
    w = generate(LARGE, TYPELESS, 128, 13)
    slots = ((w.submit_time % 86_400.0) // lublin.SECONDS_IN_BUCKET).astype(int)
    share = np.bincount(slots, minlength=48) / LARGE
    assert np.allclose(share, weights / 48, rtol=0.1, atol=0.0)
    hours = np.bincount(slots // 2, minlength=24)
    assert hours[14] > 5 * hours[5]


def _reference_walk(increments: list[float], weights: np.ndarray) -> list[float]:
    """The reference's calc_next_arrive, literally, from midnight, without its integer clock."""
    bucket, points, reminder, clock, out = 0, 0.0, 0.0, 0.0, []
    for extra in increments:
        points += extra
        step = 0.0
        while points > weights[bucket]:
            points -= weights[bucket]
            bucket = (bucket + 1) % 48
            step += lublin.SECONDS_IN_BUCKET
        new_reminder = points / weights[bucket]
        clock += step + lublin.SECONDS_IN_BUCKET * (new_reminder - reminder)
        reminder = new_reminder
        out.append(clock)
    return out


@settings(max_examples=50, deadline=None)
@given(
    increments=st.lists(st.floats(1e-6, 200.0), min_size=1, max_size=60),
    which=st.sampled_from([TYPELESS, BATCH, INTERACTIVE]),
)
def test_vectorised_clock_equals_the_bucket_walk(
    increments: list[float], which: LublinParams
) -> None:
    weights = daily_cycle(which)
    fast = lublin._arrival_clock(np.array(increments), weights, 0.0)
    assert np.allclose(fast, _reference_walk(increments, weights), rtol=1e-9, atol=1e-5)


# --- the mixed workload and the outputs --------------------------------------------------


def test_mix_interleaves_both_job_types() -> None:
    w = generate(LARGE, None, 128, 17)
    interactive = w.job_type == lublin.TYPE_INTERACTIVE
    batch = w.job_type == lublin.TYPE_BATCH
    assert interactive.sum() + batch.sum() == LARGE
    assert 0.05 < batch.mean() < 0.95
    # each class keeps its own run-time model: interactive jobs are the short ones
    assert np.median(w.runtime[interactive]) < np.median(w.runtime[batch])


def test_to_jobs_and_load() -> None:
    w = generate(50, TYPELESS, 128, 2, walltime=WalltimeModel.f_model(1.0))
    jobs = w.to_jobs("l99")
    assert [j.id for j in jobs[:2]] == ["l99-1", "l99-2"]
    assert all(j.state is JobState.QUEUED for j in jobs)
    assert [j.cores for j in jobs] == w.processors.tolist()
    assert [j.walltime for j in jobs] == w.requested_time.tolist()
    assert [j.submitted_at for j in jobs] == w.submit_time.tolist()
    work = float(np.sum(w.runtime * w.processors))
    span = float(w.submit_time[-1] - w.submit_time[0])
    assert w.load(128) == pytest.approx(work / (128 * span))
    with pytest.raises(ValueError, match="at least two jobs"):
        generate(1).load(128)
