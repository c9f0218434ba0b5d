"""Log lines that say what happened and nothing more: control characters escaped.

Names and fields in log messages can come from administrators, nodes or traces. A
newline in one would forge a second log line, and a terminal escape would rewrite
the operator's screen. :class:`EscapeControl` renders each record's message once,
with every control character written as its Python escape, before any handler
formats it; :func:`setup` installs it with the command line's usual handler.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich only when asked for: worker processes import this module
    from rich.console import Console

__all__ = ["EscapeControl", "escape_control", "setup"]

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


def setup(level: int, console: Console | None = None, fmt: str = "%(message)s") -> None:
    """The command line's logging, with control characters escaped in every message:
    rich output on ``console`` when given, else plain ``fmt`` lines on stderr."""
    handler: logging.Handler
    if console is not None:
        from rich.logging import RichHandler

        handler = RichHandler(console=console, show_path=False, markup=False)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(fmt))
    handler.addFilter(EscapeControl())
    logging.basicConfig(level=level, format=fmt, datefmt="[%X]", handlers=[handler])
