"""A warning that keeps coming: shown once, then at most one line a minute saying how
many times it came again (``logs.Repeats``), in the human and the JSON formats."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

from elasticsite.logs import EscapeControl, JsonFormatter, Repeats


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO, Clock]]:
    """A logger writing plain lines through EscapeControl and Repeats, on a test clock."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    clock = Clock()
    handler.addFilter(EscapeControl())
    handler.addFilter(Repeats(clock=clock))
    logger = logging.getLogger("test.repeats")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield logger, out, clock
    logger.removeHandler(handler)


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_a_repeated_warning_is_one_line_then_same_again_at_most_once_a_minute(
    logged: tuple[logging.Logger, io.StringIO, Clock],
) -> None:
    logger, out, clock = logged
    for _ in range(10):  # every 10 s, as a manager step would
        logger.warning("cloud %s: describe failed: %s", "public", "connection refused")
        clock.now += 10
    assert lines(out) == [
        "WARNING cloud public: describe failed: connection refused",
        "WARNING cloud public: describe failed: connection refused "
        "(same again 6 times in the last 60 s)",
    ]
    # Three copies were held back since; three more come, then one after a quiet spell:
    # it carries their count and its own.
    for _ in range(3):
        logger.warning("cloud %s: describe failed: %s", "public", "connection refused")
    clock.now += 300
    logger.warning("cloud %s: describe failed: %s", "public", "connection refused")
    assert lines(out)[2:] == [
        "WARNING cloud public: describe failed: connection refused "
        "(same again 7 times in the last 340 s)"
    ]
    # Once nothing was held back, a copy after a quiet minute is shown as it is.
    clock.now += 120
    logger.warning("cloud %s: describe failed: %s", "public", "connection refused")
    assert lines(out)[3:] == ["WARNING cloud public: describe failed: connection refused"]


def test_other_messages_levels_and_loggers_are_their_own_and_info_always_passes(
    logged: tuple[logging.Logger, io.StringIO, Clock],
) -> None:
    logger, out, _ = logged
    for _ in range(3):
        logger.warning("batch snapshot failed: slurmctld is down")
        logger.warning("batch snapshot failed: slurmctld timed out")
        logger.error("batch snapshot failed: slurmctld is down")
        logger.info("step")
        logging.getLogger("test.repeats.other").warning("batch snapshot failed: slurmctld is down")
    assert lines(out) == [
        "WARNING batch snapshot failed: slurmctld is down",
        "WARNING batch snapshot failed: slurmctld timed out",
        "ERROR batch snapshot failed: slurmctld is down",
        "INFO step",
        "WARNING batch snapshot failed: slurmctld is down",  # another logger's
        "INFO step",
        "INFO step",
    ]


def test_the_summary_leaves_the_repeated_traceback_out(
    logged: tuple[logging.Logger, io.StringIO, Clock],
) -> None:
    logger, out, clock = logged
    for _ in range(3):
        try:
            raise OSError("disk full")
        except OSError:
            logger.warning("cannot write the history", exc_info=True)
        clock.now += 30
    text = out.getvalue()
    assert text.count("Traceback") == 1 and text.count("OSError: disk full") == 1
    assert lines(out)[-1] == (
        "WARNING cannot write the history (same again 2 times in the last 60 s)"
    )


def test_it_forgets_the_oldest_message_beyond_what_it_remembers() -> None:
    clock = Clock()
    repeats = Repeats(clock=clock, remember=2)

    def shown(message: str) -> bool:
        record = logging.LogRecord("x", logging.WARNING, "", 0, message, None, None)
        return repeats.filter(record)

    assert [shown("a"), shown("b"), shown("a")] == [True, True, False]
    assert shown("c")  # "b", the oldest, is forgotten
    assert [shown("b"), shown("a")] == [True, True]  # so is "a" now, after "b" came back


def test_json_lines_carry_how_many_times_it_came_again() -> None:
    clock = Clock()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter("lab"))
    handler.addFilter(Repeats(clock=clock))
    logger = logging.getLogger("test.repeats.json")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        for _ in range(4):
            logger.warning("budget: refusing launches")
            clock.now += 20
    finally:
        logger.removeHandler(handler)
    first, summary = (json.loads(line) for line in out.getvalue().splitlines())
    assert "repeated" not in first
    assert summary["repeated"] == 3
    assert summary["message"] == "budget: refusing launches (same again 3 times in the last 60 s)"


def test_the_command_line_logging_holds_repeats_back() -> None:
    """Through ``logs.setup``, as every command sets its logging up: a warning logged a
    hundred times at once is one line."""
    code = (
        "import logging\n"
        "from elasticsite import logs\n"
        "logs.setup(logging.WARNING)\n"
        "for _ in range(100):\n"
        "    logging.getLogger('elasticsite.x').warning('cloud a: describe failed: refused')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stderr.splitlines() == ["cloud a: describe failed: refused"]
