"""The forked commands the tests run (tests/forked_cli.py) behave as real ones: same
output for the same terminal width, same exit status, same environment seen."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from pathlib import Path

import pytest
from tests import forked_cli
from tests.cli import MINIMAL_SITE, run_command
from tests.waiting import wait_for


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


# -- the shim a shell script runs (the docs' blocks) --------------------------------------


def _shim(tmp_path: Path) -> Path:
    return forked_cli.write_shim(tmp_path / "elasticsite")


def _in(directory: Path) -> list[int]:
    """The processes working in ``directory``."""
    pids = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and (proc / "cwd").resolve() == directory:
                pids.append(int(proc.name))
    return pids


def test_a_shim_in_a_script_says_and_exits_as_the_real_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _shim(tmp_path)
    env = {"COLUMNS": "100", "PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)}
    script = "elasticsite policies | head -n 3; elasticsite status -c none.toml"
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    monkeypatch.setenv("ELASTICSITE_TEST_FORK", "0")
    policies = run_command("policies", cwd=tmp_path, env=env)
    status = run_command("status", "-c", "none.toml", cwd=tmp_path, env=env)
    assert done.returncode == status.returncode != 0
    assert done.stdout == "".join(policies.stdout.splitlines(keepends=True)[:3]) + status.stdout
    assert done.stderr == status.stderr
    assert shim.stat().st_mode & 0o777 == 0o755


def test_a_shim_passes_sigint_on_and_a_killed_shim_takes_its_command_along(
    tmp_path: Path,
) -> None:
    (tmp_path / "site.toml").write_text(MINIMAL_SITE)
    shim = _shim(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    log = tmp_path / "run.log"

    def run() -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen(
                [shim, "run", "-c", "site.toml"], cwd=tmp_path, env=env, stdout=out, stderr=out
            )

    # SIGINT: the manager stops as it does on Ctrl-C, and the shim's status is its own.
    first = run()
    wait_for(lambda: "state in" in log.read_text() or None, 60, "the manager to start")
    first.send_signal(signal.SIGINT)
    assert first.wait(60) == 0, log.read_text()
    wait_for(lambda: not _in(tmp_path), 30, "the command to end")
    # SIGKILL, which a shim cannot pass on: its command is killed all the same.
    second = run()
    wait_for(lambda: len(_in(tmp_path)) == 2 or None, 60, "the shim and its command")
    second.kill()
    second.wait()
    wait_for(lambda: not _in(tmp_path), 30, "the command to be killed")
