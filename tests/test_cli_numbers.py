"""Every numeric option of every command refuses what none of them can mean.

The command tree is walked as typer builds it, so an option added later is held to
the same rule: inf, -inf, nan and negative numbers are refused by every numeric
option, ports outside 1-65535 by every port option, each as one line naming the
option, with exit status 2, before the command runs.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from tests.cli import run_command

from elasticsite.cli import app
from elasticsite.cli.common import (
    NonNegativeFloat,
    NonNegativeInt,
    Port,
    PositiveFloat,
    PositiveInt,
)
from elasticsite.sim.cloud import Durations

CHECKED = (Port, PositiveInt, NonNegativeInt, PositiveFloat, NonNegativeFloat)
BAD = ("inf", "-inf", "nan", "1e999", "-1")
BAD_PORTS = ("0", "65536", "70000")


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command and group of the tree, with the words that reach it."""
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from commands(sub, (*path, name))


ROOT = typer.main.get_command(app)  # built once: building it takes a second


def numeric_options() -> list[Any]:
    found = []
    for path, command in commands(ROOT):
        for param in command.params:
            annotation = param.type_descriptor.annotation
            if getattr(param, "count", False) or param.param_type_name != "option":
                continue
            if annotation in (int, float) or annotation in CHECKED:
                found.append(
                    pytest.param(path, command, param, id=" ".join((*path, param.opts[0])))
                )
    return found


NUMERIC = numeric_options()


def test_the_walk_finds_the_numeric_options() -> None:
    """The walk reaches subcommands and group options, not only top-level commands."""
    ids = {p.id for p in NUMERIC}
    assert {"broker --port", "broker --join-rate", "context create --join-rate"} <= ids
    assert {"urgent drill --every", "advise --threshold", "simulate --seed"} <= ids
    assert len(NUMERIC) > 60


def refusal(path: tuple[str, ...], command: Any, option: str, value: str) -> Exception | None:
    """What parsing ``option value`` alone raises (None if it is accepted); nothing is
    run, whatever the answer."""
    try:
        command.make_context(" ".join(("elasticsite", *path)), [option, value])
    except (typer.BadParameter, typer.Exit) as exc:
        return exc
    return None


@pytest.mark.parametrize(("path", "command", "param"), NUMERIC)
def test_every_numeric_option_refuses_nonsense(
    path: tuple[str, ...], command: Any, param: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    option = param.opts[0]
    annotation = param.type_descriptor.annotation
    if annotation in CHECKED:  # typer applies min/max to plain int and float only
        info = param.type_descriptor.parameter_info
        assert info.min is None and info.max is None, f"{option}: min/max would be ignored"
    bad = BAD + (BAD_PORTS if annotation is Port or option.endswith("port") else ())
    for value in bad:
        exc = refusal(path, command, option, value)
        assert isinstance(exc, typer.BadParameter), f"{option} {value} was accepted"
        assert type(exc).__name__ != "MissingParameter", f"{option} {value} was accepted"
        assert exc.param is param, f"{option} {value}: {exc.format_message()}"
    if annotation in (Port,) or option.endswith("port"):
        assert annotation is Port, f"{option} is a port: use cli.common.Port"

    with pytest.raises(SystemExit) as exited:  # as the command line would see it
        ROOT.main([*path, option, "nan"], prog_name="elasticsite")
    assert exited.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: Invalid value for '{option}'"), lines


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "ELASTICSITE_BROKER_TOKEN": ""}
    return run_command(*args, cwd=cwd, env=env, timeout=60)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--port", "70000"],
            "error: Invalid value for '--port': Input should be less than or equal to 65535 "
            "(see elasticsite broker --help)",
        ),
        (
            ["--join-rate", "inf"],
            "error: Invalid value for '--join-rate': Input should be a finite number, not inf "
            "(see elasticsite broker --help)",
        ),
    ],
)
def test_broker_says_which_option_is_wrong_before_creating_anything(
    tmp_path: Path, args: list[str], line: str
) -> None:
    """Today's bugs: --port 70000 was announced as :70000 while the broker listened
    elsewhere, and --join-rate inf was accepted."""
    state = tmp_path / "state"
    done = run_cli("broker", "--state-dir", str(state), *args, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr.splitlines()) == (2, "", [line])
    assert not state.exists()


def test_usage_errors_are_one_line_too(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        ROOT.main(["broker", "--no-such-option"], prog_name="elasticsite")
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: No such option: --no-such-option (see elasticsite broker --help)"
    ]
    with pytest.raises(SystemExit):  # no command at all: the help, as before
        ROOT.main([], prog_name="elasticsite")
    out = capsys.readouterr()
    assert "Usage: elasticsite" in out.out and out.err == ""


@pytest.mark.parametrize("value", ["inf", "nan", "1:inf", "60,nan", "-5"])
def test_simulated_boot_and_shutdown_times_are_finite(value: str) -> None:
    """--boot and --shutdown are numbers in a string: held to the same rule."""
    numbers = tuple(float(v) for v in value.replace(":", ",").split(","))
    with pytest.raises(ValueError) as refused:
        Durations.parse(value)
    assert str(refused.value) == (
        f"bad duration {value!r}: give seconds (60), a range (74:205) or a list (60,62,90); "
        f"durations must be finite, non-negative seconds, got {numbers}"
    )


def test_simulate_says_a_boot_time_is_not_finite(tmp_path: Path) -> None:
    done = run_cli("simulate", "--workload", "lublin", "--jobs", "5", "--boot", "inf",
                   "--out", str(tmp_path / "out"), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: bad duration 'inf': give seconds (60), a range (74:205) or a list (60,62,90); "
        "durations must be finite, non-negative seconds, got (inf,)"
    ]
