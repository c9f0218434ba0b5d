"""Log lines that say what happened and nothing more: control characters escaped.

Names and fields in log messages can come from administrators, nodes or traces. A
newline in one would forge a second log line, and a terminal escape would rewrite
the operator's screen. :class:`EscapeControl` renders each record's message once,
with every control character written as its Python escape, before any handler
formats it; :func:`setup` installs it with the command line's usual handler.

A warning that comes again and again (a cloud that stays unreachable, a batch system
that is down, every step) is shown once, as it is, and then, at most once a minute,
as one line saying how many times it came again (:class:`Repeats`); so a log read
after a night shows what failed, and since when, without a thousand copies of it.

``--log-format json`` (:class:`JsonFormatter`) writes one JSON object per line for a
log pipeline: time, level, logger, message, the site's id on every line, and the
worker, instance, node, job and cloud ids a message is about. Code attaches those
with ``extra=ids(worker=..., cloud=...)``; the human format leaves them out, since the
message already names them.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # rich only when asked for: worker processes import this module
    from rich.console import Console

__all__ = [
    "ID_FIELDS",
    "REPEAT_EVERY",
    "EscapeControl",
    "JsonFormatter",
    "Repeats",
    "escape_control",
    "ids",
    "setup",
]

ID_FIELDS = ("site", "cloud", "worker", "instance", "node", "job")
"""The ids a JSON log line may carry, in the order it writes them."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]


def escape_control(text: str) -> str:
    """``text`` with control, line-separator and bidi characters as escapes."""
    return _CONTROL.sub(_escaped, text)


class EscapeControl(logging.Filter):
    """A filter that renders a record's message with its control characters escaped
    (the message is then final: ``args`` are consumed)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        escaped = escape_control(message)
        if escaped is not message or record.args:
            record.msg, record.args = escaped, None
        return True


REPEAT_EVERY = 60.0
"""Seconds between two lines of one warning that keeps coming again."""


class Repeats(logging.Filter):
    """A filter that shows a warning (or worse) repeated word for word once, then
    holds its copies back: the first copy that comes :data:`REPEAT_EVERY` seconds or
    more after the last line shown is shown as ``message (same again N times in the
    last 75 s)``, N counting it and the copies held back. A copy that comes after a
    quiet minute, none held back, is shown as it is. Records below WARNING pass.

    Apply it after :class:`EscapeControl` (it compares final messages). A shown
    summary carries ``repeated`` = N, which the JSON format writes; its traceback, the
    same as the first one's, is left out.
    """

    def __init__(
        self,
        every: float = REPEAT_EVERY,
        *,
        clock: Callable[[], float] = time.monotonic,
        remember: int = 256,
    ) -> None:
        super().__init__()
        self.every = every
        self.clock = clock
        self.remember = remember
        self._lock = threading.Lock()
        # (logger, level, message) -> [when last shown, copies held back since]
        self._seen: OrderedDict[tuple[str, int, str], list[float]] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        message = record.getMessage()
        key = (record.name, record.levelno, message)
        now = self.clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                self._seen[key] = [now, 0]
                if len(self._seen) > self.remember:  # the oldest message is forgotten
                    self._seen.popitem(last=False)
                return True
            self._seen.move_to_end(key)
            shown, held = seen
            if now - shown < self.every:
                seen[1] = held + 1
                return False
            seen[0], seen[1] = now, 0
        if held:  # this copy and those held back: two at least
            again = held + 1
            record.msg = f"{message} (same again {again} times in the last {now - shown:.0f} s)"
            record.args = None
            record.exc_info, record.exc_text = None, None
            record.repeated = again
        return True


def ids(**values: object) -> dict[str, dict[str, str]]:
    """``extra`` for a log call: the ids it is about (None values left out)."""
    return {"ids": {k: str(v) for k, v in values.items() if v is not None and v != ""}}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, then ``site`` and the other ids of :data:`ID_FIELDS` that apply, and
    ``exception`` with its traceback when there is one. Line breaks and control
    characters are escaped by JSON itself, so a record is always one line."""

    def __init__(self, site: str | None = None) -> None:
        super().__init__()
        self.site = site

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        found: dict[str, str] = getattr(record, "ids", None) or {}
        if self.site is not None and "site" not in found:
            out["site"] = self.site
        for key in ID_FIELDS:
            if key in found:
                out[key] = found[key]
        repeated = getattr(record, "repeated", None)
        if repeated is not None:
            out["repeated"] = repeated
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def setup(
    level: int,
    console: Console | None = None,
    fmt: str = "%(message)s",
    *,
    log_format: Literal["human", "json"] = "human",
    site: str | None = None,
) -> None:
    """The command line's logging, with control characters escaped in every message and
    a warning repeated word for word shown at most once a minute (:class:`Repeats`):
    rich output on ``console`` when given, else plain ``fmt`` lines on stderr; with
    ``log_format="json"``, JSON lines on stderr carrying ``site`` on every line."""
    handler: logging.Handler
    if log_format == "json":
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter(site))
    elif console is not None:
        from rich.logging import RichHandler

        handler = RichHandler(console=console, show_path=False, markup=False)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(fmt))
    handler.addFilter(EscapeControl())
    handler.addFilter(Repeats())
    logging.basicConfig(level=level, format=fmt, datefmt="[%X]", handlers=[handler])
