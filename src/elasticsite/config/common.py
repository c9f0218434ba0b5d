"""What every configuration section shares: strict models, limits, and error messages."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["DAY", "HOUR", "NAME", "WEEK", "ConfigError", "Strict", "base_url", "explain"]

NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
HOUR = 3600.0
DAY = 86400.0
WEEK = 7 * DAY
_BASE_URL = re.compile(r"^https?://[^/\s]+/?$")


def base_url(value: str, expected: str) -> str:
    """``value``, an http(s) URL of a host (and port) only, without a trailing slash;
    otherwise a ValueError saying it ``must be`` what ``expected`` describes."""
    if not _BASE_URL.match(value):
        raise ValueError(f"must be {expected}")
    return value.rstrip("/")


class ConfigError(ValueError):
    """The configuration is unusable; the message names the file and the fields."""


class Strict(BaseModel):
    # Every number is finite: ``interval = inf`` or ``nan`` would pass a ``> 0`` check.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def explain(exc: ValidationError, source: str, drop: tuple[str, ...] = ()) -> str:
    """One line per bad field, ``source: field.path: what is wrong (got value)``.

    ``drop`` removes location parts that name no field (the tag a tagged union adds).
    Checks that span several fields have no location and name their fields themselves.
    """
    lines = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if p not in drop)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown setting (check its spelling and section)"
        elif (
            "input" in err
            and err["type"] not in ("missing",)
            and not isinstance(err["input"], dict | list)
            and repr(err["input"]) not in msg  # the message quotes it already
        ):
            msg = f"{msg} (got {err['input']!r})"
        lines.append(f"{source}: {_where(loc)}: {msg}" if loc else f"{source}: {msg}")
    return "\n".join(lines)
