"""The evaluation harness: each delay bounded from what was known when its run started."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.advisor.bmbp import bmbp_bound
from elasticsite.advisor.evaluate import Evaluation, Row, evaluate
from elasticsite.advisor.forecast import z_for
from elasticsite.advisor.sources import read_swf_waits
from elasticsite.history.observations import Observation

RICC = Path(__file__).parent / "data" / "RICC-2010-2-first3000.swf.gz"
SPACING = 1e6
"""Seconds between submissions in the crafted histories: every run ends before the next."""


def waits(values: list[float], **kw: object) -> list[Observation]:
    """One queue wait per value, each job submitted after the previous one started."""
    fields: dict[str, object] = {"phase": "allocation", "resource": "hpc", "source": "csv"}
    fields.update(kw)
    return [
        Observation(value=v, at=i * SPACING + v, **fields)  # type: ignore[arg-type]
        for i, v in enumerate(values)
    ]


def row(result: Evaluation, resource: str = "hpc", policy: str = "default") -> Row:
    (found,) = [r for r in result.rows if (r.resource, r.policy) == (resource, policy)]
    return found


def test_the_first_bound_comes_with_enough_history_and_its_figures_are_exact() -> None:
    result = evaluate(waits([float(v) for v in range(1, 60)] + [50.0]))
    cell = row(result).cells["allocation"]
    # 59 waits: the bound on the 0.95 quantile at 0.95 confidence is the largest, 59
    assert (cell.predicted, cell.correct, cell.not_predicted) == (1, 1, 59)
    assert cell.correctness == 1.0
    assert cell.accuracy == pytest.approx(100 * (59 - 50) / 50)
    assert result.predicted == 1 and result.not_predicted == 59
    (short,) = result.unpredicted
    assert (short.phase, short.resource, short.policy, short.size, short.count) == (
        "allocation",
        "hpc",
        "default",
        "1",
        59,
    )
    assert short.reason == (
        "needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 58"
    )


def test_a_bound_exceeded_counts_against_correctness_and_accuracy_can_be_negative() -> None:
    result = evaluate(waits([10.0] * 59 + [40.0, 25.0]))
    cell = row(result).cells["allocation"]
    # bounds: 10 (the largest of 59) for the 40, then 40 (the largest of 60) for the 25
    assert (cell.predicted, cell.correct) == (2, 1)
    assert cell.accuracy == pytest.approx(100 * ((10 + 40) - (40 + 25)) / (40 + 25))


def test_a_prediction_sees_only_runs_that_ended_before_its_own_started() -> None:
    early = [
        Observation(phase="allocation", resource="hpc", value=v, at=v, source="csv")
        for v in range(1, 60)  # 59 jobs submitted at 0, started after 1 .. 59 s
    ]
    late = Observation(phase="allocation", resource="hpc", value=100, at=130, source="csv")
    result = evaluate([*early, late])
    assert row(result).cells["allocation"].predicted == 0
    reasons = {u.reason for u in result.unpredicted}
    # when the late job was submitted (at 30 s) 29 waits had ended; the one ending at
    # exactly 30 s is not yet known
    assert "needs at least 59 observations for the 0.95 quantile at 0.95 confidence; has 29" in (
        reasons
    )


def test_seeding_only_adds_the_first_observations_of_each_key() -> None:
    rng = np.random.default_rng(4)
    values = rng.lognormal(5, 1, 200).tolist()
    result = evaluate(waits(values) + waits(values[:70], nodes=64), seed=100)
    assert result.seeded == 100 + 70
    cell = row(result).cells["allocation"]
    assert cell.predicted == 100 and cell.not_predicted == 0
    assert result.observations == 270


def test_correctness_on_stationary_delays_meets_the_target() -> None:
    rng = np.random.default_rng(7)
    values = rng.lognormal(6, 1.2, 2000).tolist()
    cell = row(evaluate(waits(values))).cells["allocation"]
    assert cell.predicted == 2000 - 59
    # BMBP promises >= 0.95 of delays under the bound; allow 3 binomial standard errors
    assert cell.correctness is not None
    assert cell.correctness >= 0.95 - 3 * (0.95 * 0.05 / cell.predicted) ** 0.5


def trial(number: int, queued: float, ran: float, staged: float | None = None) -> list[Observation]:
    start = number * SPACING
    common: dict[str, object] = {"resource": "hpc", "source": "drill", "trial": f"t{number}"}
    phases = []
    if staged is not None:
        phases.append(
            Observation(
                phase="input",
                value=staged,
                at=start + staged,
                repository="archive",
                nbytes=10**9,
                **common,  # type: ignore[arg-type]
            )
        )
        start += staged
    phases.append(Observation(phase="allocation", value=queued, at=start + queued, **common))  # type: ignore[arg-type]
    phases.append(
        Observation(phase="execution", value=ran, at=start + queued + ran, app="flash", **common)  # type: ignore[arg-type]
    )
    return phases


def test_trials_are_bounded_whole_by_the_sum_of_their_phases() -> None:
    rng = random.Random(3)
    queued = [rng.uniform(0, 600) for _ in range(80)]
    ran = [rng.uniform(3000, 3600) for _ in range(80)]
    history = [obs for n in range(80) for obs in trial(n, queued[n], ran[n])]
    result = evaluate(history, detect_changes=False)
    r = row(result)
    assert r.trials == 80
    overall = r.cells["overall"]
    assert overall.predicted == 80 - 59 and overall.not_predicted == 59
    assert r.cells["allocation"].predicted == r.cells["execution"].predicted == 21
    fits = [
        queued[n] + ran[n] <= bmbp_bound(queued[:n], 0.95) + bmbp_bound(ran[:n], 0.95)
        for n in range(59, 80)
    ]
    assert overall.correct == sum(fits)
    assert overall.observed == pytest.approx(sum(queued[59:]) + sum(ran[59:]))


def probes(at: float, seconds_per_byte: float, count: int) -> list[Observation]:
    return [
        Observation(
            phase="probe",
            resource="hpc",
            repository="archive",
            value=seconds_per_byte,
            nbytes=2**24,
            at=at + i,
            source="probe",
        )
        for i in range(count)
    ]


def test_staging_is_bounded_from_the_repositorys_probes_times_the_bytes() -> None:
    history = [*trial(0, 10, 100, staged=9.0), *probes(2 * SPACING - 100, 1e-8, 5)]
    history += trial(2, 10, 100, staged=9.0) + trial(3, 10, 100, staged=12.0)
    result = evaluate(history)
    staging = row(result).cells["input"]
    # constant probes: the forecast is exact (MSE 0), so 1e9 bytes are bounded by 10 s
    assert (staging.predicted, staging.correct, staging.not_predicted) == (2, 1, 1)
    assert staging.bounded == pytest.approx(20.0)
    assert staging.accuracy == pytest.approx(100 * (20 - 21) / 21)
    (first,) = [u for u in result.unpredicted if u.phase == "input"]
    assert first.detail == "archive" and first.reason == "no probe of archive yet"
    assert z_for(0.95) == pytest.approx(1.645, abs=1e-3)


def test_queue_waits_of_a_real_trace() -> None:
    result = evaluate(read_swf_waits(RICC, resource="ricc"))
    assert result.observations == 3000
    assert result.predicted + result.not_predicted == 3000
    q1, q2 = row(result, "ricc:q1"), row(result, "ricc:q2")
    assert q2.cells["allocation"].predicted == 0 and q2.cells["allocation"].not_predicted == 9
    cell = q1.cells["allocation"]
    assert cell.predicted > 2000 and cell.correctness is not None
    assert 0.5 < cell.correctness <= 1.0
    assert result.sizes[:3] == ["1", "2", "3-4"]
    by_size = q1.sizes["allocation"]
    assert sum(c.predicted for c in by_size.values()) == cell.predicted


def test_a_negative_seed_is_refused() -> None:
    with pytest.raises(ValueError, match=r"seed must be >= 0 \(got -1\)"):
        evaluate([], seed=-1)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.sampled_from([1, 2, 16]),
            st.floats(0, 1e4, allow_nan=False),
            st.floats(0, 1e6, allow_nan=False),
        ),
        max_size=150,
    ),
    st.integers(0, 30),
    st.randoms(use_true_random=False),
)
def test_every_observation_is_counted_once_whatever_the_input_order(
    rows: list[tuple[str, int, float, float]], seed: int, rng: random.Random
) -> None:
    history = [
        Observation(phase="allocation", resource=r, nodes=n, value=v, at=t + v, source="csv")
        for r, n, v, t in rows
    ]
    result = evaluate(history, seed=seed)
    assert result.predicted + result.not_predicted + result.seeded == len(history)
    for r in result.rows:
        c = r.cells["allocation"]
        assert c.correctness is None or 0 <= c.correctness <= 1
    shuffled = history[:]
    rng.shuffle(shuffled)
    assert evaluate(shuffled, seed=seed).to_dict() == result.to_dict()
