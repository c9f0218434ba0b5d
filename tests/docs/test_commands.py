"""Every shell block of the README and docs/*.md keeps the promise its marker makes.

Each runnable block runs as a subprocess in its own temporary directory, which holds
the repository's examples, experiments, benchmarks and scripts (as links) and this
suite's virtual environment as ``.venv``: what a newcomer has after the set-up
command, with the site's state in a directory of its own. A block that cannot run
here is still checked for syntax: ``bash -n``, every ``elasticsite`` subcommand and
option it names (``--help`` of each), and every script of the repository it runs.
The marker grammar is in ``blocks.py``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from tests import forked_cli, ports
from tests.docs.blocks import DOCS, ROOT, Block, collect
from typer.testing import CliRunner

from elasticsite.cli import app

BLOCKS = collect()
RUNNABLE = [b for b in BLOCKS if b.check is not None and b.check.syntax_only is None]
CLI = typer.main.get_command(app)
LINKED = ("examples", "experiments", "benchmarks", "scripts", "tests", "docs")
HELPED: set[tuple[str, ...]] = set()  # subcommands whose --help this process has checked


def _param(block: Block) -> object:
    slow = block.check is not None and block.check.slow
    return pytest.param(block, id=block.id, marks=[pytest.mark.slow] if slow else [])


def test_every_shell_block_says_what_it_promises() -> None:
    assert BLOCKS, f"no shell blocks found in {[p.name for p in DOCS]}"
    missing = [b.id for b in BLOCKS if b.check is None and b.marker_error is None]
    wrong = [f"{b.id}: {b.marker_error}" for b in BLOCKS if b.marker_error]
    assert not missing, f"shell blocks without a <!-- check: ... --> marker: {missing}"
    assert not wrong, f"markers that do not parse: {wrong}"


def test_the_readme_opens_with_the_two_commands_ci_runs() -> None:
    first = next(b for b in BLOCKS if b.path.name == "README.md")
    assert first.text.split("\n")[:2] == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    assert 'elasticsite demo "$@"' in demo


def _elasticsite_args(argv: list[str]) -> list[str] | None:
    """The arguments of an ``elasticsite`` command (also under ``sudo -u USER``)."""
    for i, token in enumerate(argv):
        if i > 0 and (argv[0] != "sudo" or argv[i - 1].startswith("-")):
            continue
        if Path(token).name == "elasticsite":
            return argv[i + 1 :]
    return None


def _options(command: Any) -> dict[str, Any]:
    """The command's option names -> their parameter (None for --help)."""
    names: dict[str, Any] = {"--help": None}
    for p in command.params:
        for name in (*p.opts, *p.secondary_opts):
            if name.startswith("-"):
                names[name] = p
    return names


def _takes_value(param: Any) -> bool:
    return (
        param is not None
        and not getattr(param, "is_flag", False)
        and not getattr(param, "count", False)
    )


def _is_group(command: Any) -> bool:
    return isinstance(getattr(command, "commands", None), dict)


def _check_elasticsite(args: list[str], helped: set[tuple[str, ...]]) -> list[str]:
    """What is wrong with one ``elasticsite ARGS`` (unknown subcommands or options)."""
    problems: list[str] = []
    command: Any = CLI
    path: list[str] = []
    tokens = iter(args)
    for token in tokens:
        if token == "--":
            break
        if token.startswith("-") and not token[1:2].isdigit():
            name = token.split("=", 1)[0]
            options = _options(command)
            param = options.get(name)
            if name not in options:
                problems.append(f"elasticsite {' '.join(path)}: no option {name}")
            elif _is_group(command) and "=" not in token and _takes_value(param):
                next(tokens, None)  # the option's value, not a subcommand
            continue
        if _is_group(command):
            sub = command.commands.get(token)
            if sub is None:
                problems.append(f"elasticsite {' '.join(path)}: no command {token!r}")
                break
            command = sub
            path.append(token)
    if tuple(path) not in helped:
        helped.add(tuple(path))
        result = CliRunner().invoke(app, [*path, "--help"])
        if result.exit_code != 0:
            problems.append(f"elasticsite {' '.join(path)} --help: status {result.exit_code}")
    return problems


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_block_syntax(block: Block) -> None:
    shell = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True)
    assert shell.returncode == 0, f"{block.id}: bash -n: {shell.stderr}"
    problems: list[str] = []
    for argv in block.commands:
        args = _elasticsite_args(argv)
        if args is not None:
            problems += _check_elasticsite(args, HELPED)
        elif argv[0] in ("bash", "python", "python3") or argv[0].endswith("/python"):
            scripts = [a for a in argv[1:] if a.endswith((".sh", ".py"))]
            problems += [f"no script {s}" for s in scripts if not (ROOT / s).is_file()]
    assert not problems, f"{block.id}: " + "; ".join(problems)


def _workdir(tmp_path: Path) -> Path:
    work = tmp_path / "site"
    work.mkdir()
    _venv(work / ".venv")
    for name in LINKED:
        if name == "examples":  # copied: a site file's state goes beside it, so each
            # block's state stays in its own directory, never in the checkout
            shutil.copytree(ROOT / name, work / name,
                            ignore=shutil.ignore_patterns("elasticsite-state"))  # fmt: skip
        else:
            (work / name).symlink_to(ROOT / name)
    return work


def _venv(venv: Path) -> None:
    """This suite's virtual environment at ``venv``: its files as links, but for
    ``bin/elasticsite``, which forks each command from a process that imported the
    command line once (:func:`tests.forked_cli.write_shim`; the interpreter start it
    saves is most of a short block's CPU). ``ELASTICSITE_TEST_FORK=0``: the venv's own."""
    if not forked_cli.enabled():
        venv.symlink_to(Path(sys.prefix))
        return
    venv.mkdir()
    for entry in Path(sys.prefix).iterdir():
        if entry.name != "bin":
            (venv / entry.name).symlink_to(entry)
    (venv / "bin").mkdir()
    for entry in (Path(sys.prefix) / "bin").iterdir():
        if entry.name != "elasticsite":
            (venv / "bin" / entry.name).symlink_to(entry)
    forked_cli.write_shim(venv / "bin" / "elasticsite")


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTICSITE_")}
    env["PATH"] = f"{work / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    env["COLUMNS"] = "200"
    return env


def _stop(proc: subprocess.Popen[str], sig: int, wait: float) -> int | None:
    """Send ``sig`` to the process's group; its status, or None if it outlived ``wait``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        return proc.wait(wait)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def _script(block: Block, port: int | None) -> str:
    text = block.text
    assert block.check is not None
    if block.check.free_port is not None and port is not None:
        text = text.replace(str(block.check.free_port), str(port))
        text = text.replace("elasticsite broker ", f"elasticsite broker --port {port} ")
    return text


@pytest.mark.parametrize("block", [_param(b) for b in RUNNABLE])
def test_block_keeps_its_promise(block: Block, tmp_path: Path) -> None:
    check = block.check
    assert check is not None
    work = _workdir(tmp_path)
    env = _env(work)
    port = ports.free_port() if check.free_port is not None else None
    script = _script(block, port)
    deadline = time.monotonic() + check.within
    service: subprocess.Popen[str] | None = None
    service_log = tmp_path / "service.log"
    output = ""
    if check.serves_until is not None:
        first, _, script = script.partition("\n")
        with service_log.open("w") as log:
            service = subprocess.Popen(
                ["bash", "-c", f"exec {first}"],
                cwd=work,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        while check.serves_until not in service_log.read_text():
            assert service.poll() is None, (
                f"{block.id}: {first!r} stopped with status {service.returncode} before "
                f"printing {check.serves_until!r}:\n{service_log.read_text()}"
            )
            assert time.monotonic() < deadline, (
                f"{block.id}: {first!r} did not print {check.serves_until!r} within "
                f"{check.within:g} s:\n{service_log.read_text()}"
            )
            time.sleep(0.1)
    proc = subprocess.Popen(
        ["bash", "-eo", "pipefail", "-c", script],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
        status: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        status = _stop(proc, signal.SIGKILL, 10)
        output = proc.stdout.read() if proc.stdout else ""
        status = None
    finally:
        if service is not None:
            stopped = _stop(service, signal.SIGINT, 30)
            output = service_log.read_text() + output
            if check.then is not None:
                after = subprocess.run(
                    ["bash", "-c", check.then],
                    cwd=work,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                output += after.stdout + after.stderr
                assert after.returncode == 0, f"{block.id}: {check.then!r} failed:\n{output}"
            assert stopped is not None, f"{block.id}: the service ignored SIGINT"
    assert status is not None, (
        f"{block.id}: still running after its promised {check.within:g} s:\n{output[-3000:]}"
    )
    assert status == check.exit_status, (
        f"{block.id}: exit status {status}, promised {check.exit_status}:\n{output[-3000:]}"
    )
    for text in check.prints:
        assert text in output, f"{block.id}: does not print {text!r}:\n{output[-3000:]}"
    for pattern in check.writes:
        assert list(work.glob(pattern)), f"{block.id}: wrote no {pattern}:\n{output[-3000:]}"


def test_every_example_file_the_docs_name_ships() -> None:
    named = re.compile(r"\b((?:examples|experiments|benchmarks)/[\w.-]+\.\w+)")
    missing = sorted(
        {
            f"{path.relative_to(ROOT)}: {name}"
            for path in DOCS
            for name in named.findall(path.read_text())
            if not (ROOT / name).is_file()
        }
    )
    assert not missing, f"files the docs name that do not ship: {missing}"
