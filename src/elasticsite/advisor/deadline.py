"""Deadlines as people write them: ``6h``, ``90m``, ``1h30m``, ``2d``, ``3600`` (seconds).

One function, :func:`parse_deadline`, shared by the command line and the REST endpoint
so both accept and refuse exactly the same text, with the same one-line message.
"""

from __future__ import annotations

import math
import re

__all__ = ["MAX_DEADLINE", "DeadlineError", "format_duration", "parse_deadline"]

MAX_DEADLINE = 366 * 86400.0
"""The longest deadline accepted: a year (anything longer is a typo, not urgency)."""

_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_PLAIN = re.compile(r"\d+(?:\.\d+)?")
_EXAMPLES = "write it like 6h, 90m, 1h30m, 2d or 3600 (seconds)"


class DeadlineError(ValueError):
    """A deadline that is not a positive duration; the message quotes it and says why."""


def parse_deadline(text: str | float | int) -> float:
    """Seconds in ``text``: a number of seconds, or amounts with units ``d``, ``h``,
    ``m``, ``s`` from the largest down, each at most once (``1h30m``, ``2d 4h``).

    Raises :class:`DeadlineError` for anything else, for zero and for more than a year.
    """
    if isinstance(text, bool):
        raise DeadlineError(f"deadline {text!r} is not a duration; {_EXAMPLES}")
    if isinstance(text, int | float):
        seconds = float(text)
        shown = repr(text)
    else:
        shown = repr(text)
        compact = "".join(text.split()).lower()
        seconds = float(compact) if _PLAIN.fullmatch(compact) else _with_units(compact, shown)
    if not math.isfinite(seconds) or seconds <= 0:
        raise DeadlineError(f"deadline {shown} must be more than 0 seconds; {_EXAMPLES}")
    if seconds > MAX_DEADLINE:
        raise DeadlineError(f"deadline {shown} is more than a year; {_EXAMPLES}")
    return seconds


def _with_units(compact: str, shown: str) -> float:
    parts = _PART.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise DeadlineError(f"deadline {shown} is not a duration; {_EXAMPLES}")
    units = [u for _, u in parts]
    order = list(_UNITS)
    if len(set(units)) != len(units) or units != sorted(units, key=order.index):
        raise DeadlineError(
            f"deadline {shown}: give each unit once, largest first (d, h, m, s); {_EXAMPLES}"
        )
    return sum(float(n) * _UNITS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """``seconds`` the way :func:`parse_deadline` reads it back: ``5h30m``, ``45s``, ``2d1h``.

    Rounded to the second; sub-second durations show as ``0s`` or with one decimal.
    """
    if seconds < 1:
        return f"{seconds:.1f}s" if seconds >= 0.05 else "0s"
    rest = round(seconds)
    out = ""
    for unit, size in _UNITS.items():
        amount, rest = divmod(rest, int(size))
        if amount:
            out += f"{amount}{unit}"
    return out
