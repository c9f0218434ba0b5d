"""Reading Slurm's JSON values whatever its version wrote: numbers, times, words, text.

Slurm's JSON changed between releases (22.05's plain numbers became
``{"set", "infinite", "number"}`` objects in 23.02); these read either, with plain
dict access and no schema, so a monitoring loop keeps working on the version a site
runs.
"""

from __future__ import annotations

import json
from typing import Any

from elasticsite.batch.base import BatchError
from elasticsite.batch.hostlist import HostlistError, expand

__all__ = [
    "expand_hostlist",
    "load_json",
    "read_int",
    "read_number",
    "read_text",
    "read_time",
    "read_words",
]


def read_number(value: Any, default: float | None = None) -> float | None:
    """A number as any Slurm version writes it: plain, or ``{"set", "infinite", "number"}``.

    Unset and infinite values, and 22.05's NO_VAL/INFINITE sentinels, give ``default``.
    """
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return default
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    if value in (0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFE):
        return default  # INFINITE / NO_VAL (32 and 64 bit)
    return value


def read_int(value: Any, default: int = 0) -> int:
    number = read_number(value)
    return default if number is None else int(number)


def read_time(value: Any) -> float | None:
    """An epoch time; 0 (never) and unset give None."""
    number = read_number(value)
    return float(number) if number else None


def read_words(value: Any) -> list[str]:
    """A state as a list of words: 22.05 writes ``"RUNNING"``, 23.02+ ``["RUNNING"]``."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def read_text(value: Any) -> str:
    if isinstance(value, list):  # 24.05+ writes features as a list
        return ",".join(str(v) for v in value)
    return value if isinstance(value, str) else ""


def expand_hostlist(expr: str) -> list[str]:
    """Slurm's compact host list (``"n[01-03,7],gpu1"``) as a list of names."""
    try:
        return expand(expr)
    except HostlistError as exc:
        raise BatchError(f"slurm: {exc}") from None


def load_json(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise BatchError(f"{what}: output is not JSON ({exc}); got {text[:80]!r}") from exc
    if not isinstance(data, dict):
        raise BatchError(f"{what}: expected a JSON object, got {type(data).__name__}")
    errors = data.get("errors") or []
    if errors:
        first = errors[0]
        detail = (
            first.get("description") or first.get("error") if isinstance(first, dict) else first
        )
        raise BatchError(f"{what}: slurm reported an error: {detail}")
    return data
