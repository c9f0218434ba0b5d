"""Paper 002's run metrics: hand-worked examples for each, deadlines, and properties.

The shared example run has four jobs (times in s):

    job  submit start finish procs runtime where  deadline  note
    j0     0      0    100     2     100   site      90     late (100 > 90)
    j1    10    100    150     4      50   cloud    150     on time (150 == 150)
    j2    20     20     25     1       5   site       -
    j3    30      -      -     8    1000   -         40     rejected
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.model import billed_cost
from elasticsite.sim.metrics import (
    CLOUD,
    SITE,
    STRINGENCY,
    JobRecords,
    assign_deadlines,
    awrt,
    bounded_slowdowns,
    deadline_violations,
    mean_bounded_slowdown,
    non_violation_cost,
    performance_cost,
    rejected_jobs,
    sim_metrics,
    site_utilisation,
    vm_bill,
)

NAN = math.nan


def example() -> JobRecords:
    return JobRecords(
        submit=[0, 10, 20, 30],
        start=[0, 100, 20, NAN],
        finish=[100, 150, 25, NAN],
        processors=[2, 4, 1, 8],
        runtime=[100, 50, 5, 1000],
        deadline=[90, 150, NAN, 40],
        where=[SITE, CLOUD, SITE, SITE],
        rejected=[False, False, False, True],
    )


# VMs of the example: j1's four VMs for 50 s each, and one VM up for 3601 s.
VM_START = [100, 100, 100, 100, 0]
VM_END = [150, 150, 150, 150, 3601]


def test_awrt_weights_response_by_processors_times_runtime() -> None:
    # weights p*m: j0 100*2 = 200, j1 50*4 = 200, j2 5*1 = 5 (j3 rejected: left out)
    # responses ct - st: 100, 140, 5
    # (200*100 + 200*140 + 5*5) / (200 + 200 + 5) = 48025 / 405
    assert awrt(example()) == pytest.approx(48025 / 405)


def test_awrt_undefined_without_completed_work() -> None:
    jobs = JobRecords(submit=[0], start=[NAN], finish=[NAN], processors=[1], runtime=[10])
    assert math.isnan(awrt(jobs))


def test_bounded_slowdown_uses_ten_second_bound_and_floor_of_one() -> None:
    # j0: 100 / max(100, 10) = 1; j1: 140 / 50 = 2.8; j2: 5 / max(5, 10) = 0.5 -> 1
    np.testing.assert_allclose(bounded_slowdowns(example()), [1.0, 2.8, 1.0])
    # mean (1 + 2.8 + 1) / 3 = 1.6
    assert mean_bounded_slowdown(example()) == pytest.approx(1.6)
    # with a 1 s bound j2 becomes 5 / 5 = 1 anyway; j1 unchanged
    np.testing.assert_allclose(bounded_slowdowns(example(), bound=1.0), [1.0, 2.8, 1.0])


def test_bounded_slowdown_short_job_that_waited() -> None:
    # runtime 2 s, waited 38 s: response 40 / max(2, 10) = 4 (unbounded it would be 20)
    jobs = JobRecords(submit=[0], start=[38], finish=[40], processors=[1], runtime=[2])
    assert mean_bounded_slowdown(jobs) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="bound"):
        bounded_slowdowns(jobs, bound=0)


def test_performance_cost_eq3() -> None:
    # 10 spent, AWRT 150 -> 100: 10 / (150 - 100) * 100 = 20
    assert performance_cost(10.0, 100.0, 150.0) == pytest.approx(20.0)
    # slower than the base: 10 / (150 - 200) * 200 = -40, as the equation gives
    assert performance_cost(10.0, 200.0, 150.0) == pytest.approx(-40.0)
    # money for no gain has no finite price
    assert performance_cost(10.0, 150.0, 150.0) == math.inf


def test_performance_cost_of_base_against_itself_is_undefined() -> None:
    # The base spends nothing on the cloud and gains nothing over itself: eq. 3 gives
    # 0 / 0 * AWRT_base, undefined.
    base = example()
    assert math.isnan(performance_cost(0.0, awrt(base), awrt(base)))
    metrics = sim_metrics(base, site_processors=4, base_awrt=awrt(base))
    assert math.isnan(metrics.performance_cost)
    assert ("performance cost", None, "money") in metrics.to_rows()


def test_non_violation_cost_eq4() -> None:
    # 30 spent, violations 5 -> 2: 30 / 3 = 10
    assert non_violation_cost(30.0, 2, 5) == pytest.approx(10.0)
    assert math.isnan(non_violation_cost(0.0, 5, 5))
    assert non_violation_cost(30.0, 5, 5) == math.inf


def test_deadline_violations_and_rejections() -> None:
    # j0 finishes at 100 after its deadline 90: late; j1 at 150 == 150: on time;
    # j2 has no deadline; j3 was rejected, so it is a rejection, not a violation.
    assert deadline_violations(example()) == (1, 2)
    assert rejected_jobs(example()) == 1


def test_unfinished_deadline_job_counts_as_violation() -> None:
    jobs = JobRecords(
        submit=[0], start=[5], finish=[NAN], processors=[1], runtime=[10], deadline=[50]
    )
    assert deadline_violations(jobs) == (1, 1)


def test_vm_bill_whole_hours_and_per_second() -> None:
    # hourly: four 50 s VMs pay 1 h each, the 3601 s VM pays 2 h: 6 h * 0.10 = 0.60
    bill = vm_bill(VM_START, VM_END, 0.10)
    assert bill.money == pytest.approx(0.60)
    assert bill.billed_hours == pytest.approx(6.0)
    # used: 4 * 50 + 3601 = 3801 s = 1.055833... h
    assert bill.used_hours == pytest.approx(3801 / 3600)
    # per second: 3801 s billed, 3801 / 3600 h * 0.10
    per_second = vm_bill(VM_START, VM_END, 0.10, billing_increment=1.0)
    assert per_second.money == pytest.approx(3801 / 3600 * 0.10)
    assert per_second.billed_hours == pytest.approx(3801 / 3600)


def test_vm_bill_per_vm_prices_and_empty() -> None:
    # 2 h at 0.10 and 1 h at 1.00: 0.20 + 1.00
    bill = vm_bill([0, 0], [3601, 10], [0.10, 1.00])
    assert bill.money == pytest.approx(1.20)
    assert vm_bill([], [], 0.10) == (0.0, 0.0, 0.0)


def test_site_utilisation() -> None:
    # window 0 .. 150 (first submission .. last completion); site jobs j0 2*100 and
    # j2 1*5 = 205 processor-seconds of 4 * 150 = 600
    assert site_utilisation(example(), 4) == pytest.approx(205 / 600)
    # clipped to 50 .. 100: only j0 ran then, 2 * 50 = 100 of 4 * 50 = 200
    assert site_utilisation(example(), 4, window=(50, 100)) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="site_processors"):
        site_utilisation(example(), 0)


def test_sim_metrics_rows() -> None:
    # base run: AWRT 200, 3 violations; money 0.60 (see the VM test)
    m = sim_metrics(
        example(),
        site_processors=4,
        vm_start=VM_START,
        vm_end=VM_END,
        base_awrt=200.0,
        base_violations=3,
    )
    rows = {label: (value, unit) for label, value, unit in m.to_rows()}
    assert rows["jobs"] == (4, "jobs")
    assert rows["jobs completed"] == (3, "jobs")
    assert rows["jobs on cloud"] == (1, "jobs")
    assert rows["jobs rejected"] == (1, "jobs")
    assert rows["deadline violations"] == (1, "jobs")
    assert rows["deadline violation fraction"] == (0.5, "fraction")
    assert rows["VM-hours billed"][0] == pytest.approx(6.0)
    a = 48025 / 405
    # eq. 3: 0.60 / (200 - a) * a ; eq. 4: 0.60 / (3 - 1) = 0.30
    assert rows["performance cost"][0] == pytest.approx(0.60 / (200 - a) * a)
    assert rows["non-violation cost"] == (pytest.approx(0.30), "money")
    assert rows["site utilisation"][0] == pytest.approx(205 / 600)
    # without a base run the costs are undefined
    bare = sim_metrics(example(), site_processors=4)
    assert {r[0]: r[1] for r in bare.to_rows()}["non-violation cost"] is None


def test_records_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="finish has 1 entries, expected 2"):
        JobRecords(submit=[0, 1], start=[0, 1], finish=[1], processors=[1, 1], runtime=[1, 1])
    with pytest.raises(ValueError, match="where holds 7 at job index 1"):
        JobRecords([0, 1], [0, 1], [1, 2], [1, 1], [1, 1], where=[SITE, 7])


def test_deadlines_eq5_as_printed() -> None:
    # st = 0, 100; base turnaround 100, 50 -> base completion 100, 150
    st_, ta = [0.0, 100.0], [100.0, 50.0]
    # sf 0.9: 0 + 90 = 90 < 100 and 100 + 45 = 145 < 150, so the scaled values
    np.testing.assert_allclose(assign_deadlines(st_, ta, 1.0, 0.9, seed=1), [90, 145])
    # sf 1.3: 130 >= 100 and 165 >= 150, so the base completions
    np.testing.assert_allclose(assign_deadlines(st_, ta, 1.0, 1.3, seed=1), [100, 150])
    # the later-of-the-two reading: 1.3 -> 130, 165; 0.9 -> 100, 150
    later = assign_deadlines(st_, ta, 1.0, 1.3, seed=1, floor_at_base_completion=True)
    np.testing.assert_allclose(later, [130, 165])
    later = assign_deadlines(st_, ta, 1.0, 0.9, seed=1, floor_at_base_completion=True)
    np.testing.assert_allclose(later, [100, 150])
    assert np.isnan(assign_deadlines(st_, ta, 0.0, 0.9, seed=1)).all()


def test_deadlines_reproducible_and_fraction() -> None:
    n = 100_000
    rng = np.random.default_rng(0)
    submit = np.cumsum(rng.exponential(60.0, n))
    response = rng.uniform(10.0, 5000.0, n)
    a = assign_deadlines(submit, response, 0.3, STRINGENCY["tight"], seed=42)
    b = assign_deadlines(submit, response, 0.3, STRINGENCY["tight"], seed=42)
    np.testing.assert_array_equal(a, b)
    c = assign_deadlines(submit, response, 0.3, STRINGENCY["tight"], seed=43)
    assert not np.array_equal(np.isnan(a), np.isnan(c))
    # Bernoulli(0.3): standard error sqrt(0.21 / 1e5) ~ 0.0015, tolerance ~7 of them
    assert np.isfinite(a).mean() == pytest.approx(0.3, abs=0.01)
    # one factor per experiment: every chosen job is at 0.9 of its base turnaround
    chosen = np.isfinite(a)
    np.testing.assert_allclose((a - submit)[chosen], 0.9 * response[chosen])


def test_deadlines_per_job_factor_option() -> None:
    n = 30_000
    submit = np.zeros(n)
    response = np.full(n, 100.0)
    factors = [0.5, 0.7, 0.9]
    d = assign_deadlines(submit, response, 1.0, factors, seed=7)
    values, counts = np.unique(np.round(d, 6), return_counts=True)
    np.testing.assert_allclose(values, [50, 70, 90])
    np.testing.assert_allclose(counts / n, [1 / 3] * 3, atol=0.02)


def test_deadlines_bad_input() -> None:
    with pytest.raises(ValueError, match="fraction"):
        assign_deadlines([0], [1], 1.5)
    with pytest.raises(ValueError, match="stringency"):
        assign_deadlines([0], [1], 0.5, 0.0)
    with pytest.raises(ValueError, match="base_response"):
        assign_deadlines([0], [NAN], 0.5)


job = st.tuples(
    st.floats(0, 1e6),  # submit
    st.floats(0, 1e5),  # wait
    st.floats(0, 1e5),  # runtime
    st.integers(1, 512),  # processors
    st.booleans(),  # rejected
)


@settings(max_examples=200, deadline=None)
@given(st.lists(job, min_size=1, max_size=40))
def test_awrt_matches_per_job_recomputation(
    jobs: list[tuple[float, float, float, int, bool]],
) -> None:
    records = JobRecords(
        submit=[j[0] for j in jobs],
        start=[NAN if j[4] else j[0] + j[1] for j in jobs],
        finish=[NAN if j[4] else j[0] + j[1] + j[2] for j in jobs],
        processors=[j[3] for j in jobs],
        runtime=[j[2] for j in jobs],
        rejected=[j[4] for j in jobs],
    )
    num = den = 0.0
    for submit, wait, runtime, procs, rejected in jobs:
        if not rejected:
            finish = submit + wait + runtime
            num += runtime * procs * (finish - submit)
            den += runtime * procs
    got = awrt(records)
    if den == 0:
        assert math.isnan(got)
    else:
        assert got == pytest.approx(num / den, rel=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1e5), st.floats(0, 2e5)), max_size=20),
    st.floats(0, 5),
    st.sampled_from([1.0, 60.0, 3600.0]),
)
def test_vm_bill_matches_billed_cost(
    lives: list[tuple[float, float]], price: float, increment: float
) -> None:
    start = [a for a, _ in lives]
    end = [a + d for a, d in lives]
    # Each life as vm_bill sees it (end - start), not d: a float round trip can turn a
    # duration just under a billing edge into one just over it.
    expected = sum(billed_cost(e - s, price, increment) for s, e in zip(start, end, strict=True))
    assert vm_bill(start, end, price, increment).money == pytest.approx(expected, abs=1e-9)
