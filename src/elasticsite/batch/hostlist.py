"""Slurm host lists: ``cloud[1-3,7],gpu[01-02]-a,login`` to and from node names.

Slurm passes node sets in this compressed form (to ResumeProgram, in ``squeue``
output). Expanding it here keeps the power-saving hooks independent of ``scontrol``,
which matters because they run with almost nothing around them.
"""

from __future__ import annotations

import re

__all__ = ["HostlistError", "expand"]

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
MAX_HOSTS = 65536
"""A host list that expands to more names than this is refused (a typo, not a cluster)."""


class HostlistError(ValueError):
    """The text is not a valid host list."""


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets in host list {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in host list {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"unbalanced '[' in host list {text!r}")
    parts.append(text[start:])
    return parts


def _expand_one(pattern: str, whole: str) -> list[str]:
    open_at = pattern.find("[")
    if open_at < 0:
        if not pattern:
            raise HostlistError(f"empty host name in host list {whole!r}")
        return [pattern]
    close_at = pattern.index("]", open_at)
    head, body, tail = pattern[:open_at], pattern[open_at + 1 : close_at], pattern[close_at + 1 :]
    numbers: list[str] = []
    for item in body.split(","):
        m = _RANGE.match(item.strip())
        if m is None:
            raise HostlistError(f"bad range {item!r} in host list {whole!r}")
        lo_text, hi_text = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo:
            raise HostlistError(f"range {item!r} runs backwards in host list {whole!r}")
        if hi - lo >= MAX_HOSTS:
            raise HostlistError(f"range {item!r} is too large in host list {whole!r}")
        width = len(lo_text) if lo_text.startswith("0") else 0  # zero padding is kept
        numbers.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    rest = _expand_one(tail, whole) if tail else [""]
    return [f"{head}{n}{r}" for n in numbers for r in rest]


def expand(text: str) -> list[str]:
    """Every node name of a host list, in order, without duplicates."""
    text = text.strip()
    if not text:
        return []
    names: list[str] = []
    for part in _split_top(text):
        names.extend(_expand_one(part.strip(), text))
        if len(names) > MAX_HOSTS:
            raise HostlistError(f"host list {text[:80]!r} names more than {MAX_HOSTS} hosts")
    return list(dict.fromkeys(names))
