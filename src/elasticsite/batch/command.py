"""Running a batch system's own commands: one place that spawns, times out and reports.

Every adapter that drives command-line tools (``squeue``, ``qstat``, ``scontrol`` ...)
goes through :func:`run`, so each failure reads the same way: the command as typed,
its exit code and what it printed.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from elasticsite.batch.base import BatchError

__all__ = ["CommandError", "CommandResult", "Runner", "run"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 60.0
"""Seconds a batch command may take before it is killed and reported."""
_SHOWN = 2000
"""Characters of a failed command's output kept in the error message."""


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What one finished command printed, and how it exited."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


class CommandError(BatchError):
    """A batch command could not run, timed out or exited non-zero."""

    def __init__(self, argv: Sequence[str], message: str, result: CommandResult | None = None):
        self.argv = tuple(argv)
        self.result = result
        super().__init__(f"`{shlex.join(self.argv)}` {message}")

    @property
    def returncode(self) -> int | None:
        return None if self.result is None else self.result.returncode

    @property
    def output(self) -> str:
        """stderr and stdout of the failed command (empty if it never ran)."""
        if self.result is None:
            return ""
        return (self.result.stderr + self.result.stdout).strip()


Runner = Callable[[Sequence[str]], CommandResult]
"""How an adapter runs a command; tests pass one that replays recorded output."""


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SHOWN else text[:_SHOWN] + " [...]"


def run(
    argv: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
) -> CommandResult:
    """Run ``argv`` (a list, never a shell string) and return what it printed.

    Raises :class:`CommandError` naming the command, its exit code and its output when
    it cannot be started, runs past ``timeout`` seconds or (with ``check``) exits
    non-zero.
    """
    args = [str(a) for a in argv]
    if not args:
        raise ValueError("empty command")
    start = time.monotonic()
    try:
        proc = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=None if env is None else dict(env),
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError as exc:
        raise CommandError(args, f"cannot run: {args[0]} not found on PATH") from exc
    except PermissionError as exc:
        raise CommandError(args, f"cannot run: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandError(args, f"timed out after {timeout:g} s") from exc
    result = CommandResult(
        tuple(args), proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start
    )
    log.debug("%s -> %d in %.3f s", shlex.join(args), proc.returncode, result.seconds)
    if check and proc.returncode != 0:
        shown = _clip(proc.stderr + proc.stdout) or "(no output)"
        raise CommandError(args, f"exited with code {proc.returncode}: {shown}", result)
    return result
