"""A status line on stderr while a long command runs (simulate, experiment, reproduce).

Shown on a terminal, or wherever ``--progress`` asks for it; never in captured output
otherwise, so scripts and tests read only the command's results. On a terminal
nothing appears during the first second (a short run stays silent), then one line is
redrawn at most four times a second and erased at the end. Asked for with
``--progress``, the status shows from the first report; into a pipe or a file, as a
plain line every few seconds. A command whose work reports
rarely (a sweep's runs in other processes) keeps its line :meth:`StatusLine.ticking`.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Annotated, TextIO

import typer

__all__ = ["ProgressOpt", "StatusLine"]

ProgressOpt = Annotated[
    bool | None,
    typer.Option(
        "--progress/--no-progress",
        help="A status line on stderr (simulated time, jobs, workers). Default: on a terminal.",
        show_default=False,
    ),
]

QUIET_FOR = 1.0
"""Seconds a command runs before its status first shows on a terminal."""
REDRAW = 0.25
"""Seconds between two redraws on a terminal."""
PLAIN_EVERY = 5.0
"""Seconds between two plain status lines (not a terminal)."""


class StatusLine:
    """``show``: True (``--progress``), False (``--no-progress``) or None (on a terminal)."""

    def __init__(self, show: bool | None = None, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = _isatty(self.stream)
        self.show = self.tty if show is None else show
        self._quiet = QUIET_FOR if show is None else 0.0
        self._started = time.monotonic()
        self._last = -math.inf
        self._drawn = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> StatusLine:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        self.clear()

    @property
    def elapsed(self) -> float:
        """Seconds since the command started."""
        return time.monotonic() - self._started

    def update(self, text: str) -> None:
        """Show ``text`` as the status, unless too soon after the start or the last one."""
        if not self.show:
            return
        with self._lock:
            now = time.monotonic()
            if now - self._started < self._quiet or now - self._last < (
                REDRAW if self.tty else PLAIN_EVERY
            ):
                return
            self._last = now
            if self.tty:
                width = _columns(self.stream) - 1
                self.stream.write("\r" + text[:width] + "\x1b[K")
                self._drawn = True
            else:
                self.stream.write(text + "\n")
            self.stream.flush()

    def ticking(self, text: Callable[[], str]) -> None:
        """Redraw ``text()`` every :data:`REDRAW` seconds until the line is closed."""
        if not self.show or self._ticker is not None:
            return

        def tick() -> None:
            while not self._stop.wait(REDRAW):
                self.update(text())

        self._ticker = threading.Thread(target=tick, name="status-line", daemon=True)
        self._ticker.start()

    def clear(self) -> None:
        """Erase the line on a terminal (before the command prints anything else)."""
        with self._lock:
            if self._drawn:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self._drawn = False


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80
