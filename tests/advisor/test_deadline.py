"""Deadlines as people type them, and the one-line refusal of everything else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elasticsite.advisor.deadline import (
    MAX_DEADLINE,
    DeadlineError,
    format_duration,
    parse_deadline,
)

HINT = "write it like 6h, 90m, 1h30m, 2d or 3600 (seconds)"
ORDER = "give each unit once, largest first (d, h, m, s)"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("6h", 21_600.0),
        ("90m", 5_400.0),
        ("1h30m", 5_400.0),
        ("1h 30m", 5_400.0),
        ("2d4h", 187_200.0),
        ("45s", 45.0),
        ("1.5h", 5_400.0),
        ("3600", 3_600.0),
        (" 3600 ", 3_600.0),
        ("6H", 21_600.0),
        (3600, 3_600.0),
        (0.5, 0.5),
    ],
)
def test_durations_people_write(text: str | float, seconds: float) -> None:
    assert parse_deadline(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "6x",
            f"deadline '6x' is not a duration; {HINT}",
        ),
        ("", f"deadline '' is not a duration; {HINT}"),
        ("h", f"deadline 'h' is not a duration; {HINT}"),
        (
            "-1h",
            f"deadline '-1h' is not a duration; {HINT}",
        ),
        ("30m1h", f"deadline '30m1h': {ORDER}; {HINT}"),
        ("1h1h", f"deadline '1h1h': {ORDER}; {HINT}"),
        (
            "0",
            f"deadline '0' must be more than 0 seconds; {HINT}",
        ),
        (
            "0h0m",
            f"deadline '0h0m' must be more than 0 seconds; {HINT}",
        ),
        (
            -5,
            f"deadline -5 must be more than 0 seconds; {HINT}",
        ),
        (
            float("nan"),
            f"deadline nan must be more than 0 seconds; {HINT}",
        ),
        (
            "400d",
            f"deadline '400d' is more than a year; {HINT}",
        ),
        (
            True,
            f"deadline True is not a duration; {HINT}",
        ),
    ],
)
def test_anything_else_is_refused_in_one_line(text: str | float, message: str) -> None:
    with pytest.raises(DeadlineError) as caught:
        parse_deadline(text)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (19_800.0, "5h30m"),
        (45.0, "45s"),
        (90_000.0, "1d1h"),
        (3_600.4, "1h"),
        (0.0, "0s"),
        (0.3, "0.3s"),
    ],
)
def test_durations_are_shown_as_they_are_written(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown


@given(st.integers(min_value=1, max_value=int(MAX_DEADLINE)))
def test_a_shown_duration_reads_back_as_itself(seconds: int) -> None:
    assert parse_deadline(format_duration(seconds)) == seconds
