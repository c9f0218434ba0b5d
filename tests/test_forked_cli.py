"""The forked commands the tests run (tests/forked_cli.py) behave as real ones: same
output for the same terminal width, same exit status, same environment seen."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests import forked_cli
from tests.cli import MINIMAL_SITE, run_command


@pytest.mark.parametrize(
    ("args", "columns"),
    [
        (("--help",), "60"),
        (("--help",), "150"),
        (("policies",), "100"),
        (("status", "-c", "no-such-site.toml"), "100"),
        (("submit", "--cores", "0", "--", "true"), "100"),
    ],
)
def test_a_forked_command_says_and_exits_as_a_real_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], columns: str
) -> None:
    env = {"COLUMNS": columns, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    forked = forked_cli.run(list(args), cwd=tmp_path, env=env, timeout=120)
    monkeypatch.setenv("ELASTICSITE_TEST_FORK", "0")  # a real interpreter
    expected = run_command(*args, cwd=tmp_path, env=env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        expected.returncode,
        expected.stdout,
        expected.stderr,
    )


def test_a_forked_command_that_outlives_its_timeout_is_killed(tmp_path: Path) -> None:
    (tmp_path / "site.toml").write_text(MINIMAL_SITE)  # a site with no job: it runs on
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    with pytest.raises(subprocess.TimeoutExpired):
        forked_cli.run(["run", "-c", "site.toml"], cwd=tmp_path, env=env, timeout=0.5)
