"""Waiting for a state, never for a duration: poll a check until it holds, and fail
naming what was awaited when it does not within a bound generous enough for a slow,
busy machine."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T | None], timeout: float, what: str, every: float = 0.05) -> T:
    """Call ``check`` every ``every`` s until it returns something truthy, and return
    that; after ``timeout`` s without, fail saying it timed out waiting for ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
