"""An SWF trace's header: its ``Key: value`` comments as an ordered, case-blind mapping.

SWF 2.2 lists the standard keys (:data:`STANDARD_KEYS`); a trace may repeat a key
(every ``Note``) and indent a line to continue the previous value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping

__all__ = ["STANDARD_KEYS", "SWFHeader"]

STANDARD_KEYS = (
    "Version", "Computer", "Installation", "Acknowledge", "Information", "Conversion",
    "MaxJobs", "MaxRecords", "Preemption", "UnixStartTime", "TimeZone", "TimeZoneString",
    "StartTime", "EndTime", "MaxNodes", "MaxProcs", "MaxRuntime", "MaxMemory",
    "AllowOveruse", "MaxQueues", "Queues", "Queue", "MaxPartitions", "Partitions",
    "Partition", "Note",
)  # fmt: skip
"""Header keys defined by SWF 2.2, in the order the standard lists them."""


_KEY = re.compile(r"([A-Za-z][A-Za-z0-9]*)\s*:\s*(.*)", re.S)
_INT_PREFIX = re.compile(r"\s*([+-]?\d+)")
_STANDARD_FOLDED = frozenset(k.casefold() for k in STANDARD_KEYS)


class _IntKey:
    """A header attribute: the leading integer of one key's value, or None."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __get__(self, header: SWFHeader | None, owner: type | None = None) -> int | None:
        return None if header is None else header.get_int(self.key)


class SWFHeader(Mapping[str, tuple[str, ...]]):
    """Header comments as an ordered mapping from key to all of its values.

    ``header["Note"]`` is every Note in file order; lookups ignore case. Indented
    comment lines continue the previous value (joined with a newline) and comments
    that are not ``Key: value`` are kept, in place, with key ``None``.
    """

    def __init__(self, entries: Iterable[tuple[str | None, str]] = ()) -> None:
        self.entries: list[tuple[str | None, str]] = list(entries)

    def add_comment(self, text: str) -> None:
        """Take one comment line, given without its leading ``;``."""
        body = text.rstrip()
        stripped = body.lstrip()
        match = _KEY.fullmatch(stripped)
        prev = self.entries[-1] if self.entries else (None, "")
        if (
            prev[0] is not None
            and stripped
            and len(body) - len(stripped) >= 2
            and not (match and match[1].casefold() in _STANDARD_FOLDED)
        ):
            self.entries[-1] = (prev[0], f"{prev[1]}\n{stripped}")
        elif match:
            self.entries.append((match[1], match[2].strip()))
        else:
            self.entries.append((None, stripped))

    def add(self, key: str, value: object) -> None:
        """Append a ``key: value`` entry (repeated keys keep every value)."""
        self.entries.append((key, str(value)))

    def __getitem__(self, key: str) -> tuple[str, ...]:
        folded = key.casefold()
        values = tuple(v for k, v in self.entries if k is not None and k.casefold() == folded)
        if not values:
            raise KeyError(key)
        return values

    def __iter__(self) -> Iterator[str]:
        seen: dict[str, str] = {}
        for key, _ in self.entries:
            if key is not None:
                seen.setdefault(key.casefold(), key)
        return iter(seen.values())

    def __len__(self) -> int:
        return sum(1 for _ in self)

    @property
    def comments(self) -> list[str]:
        """Comment lines that are not ``Key: value`` pairs."""
        return [v for k, v in self.entries if k is None]

    def first(self, key: str) -> str | None:
        """The first value of ``key``, or None when the header lacks it."""
        values = self.get(key)
        return values[0] if values else None

    def get_int(self, key: str) -> int | None:
        """The integer a value starts with: ``"144 (each an 8-way SMP)"`` -> 144."""
        value = self.first(key)
        match = _INT_PREFIX.match(value) if value is not None else None
        return int(match[1]) if match else None

    max_jobs = _IntKey("MaxJobs")
    max_records = _IntKey("MaxRecords")
    max_nodes = _IntKey("MaxNodes")
    max_procs = _IntKey("MaxProcs")
    max_runtime = _IntKey("MaxRuntime")  # seconds
    max_memory = _IntKey("MaxMemory")  # kilobytes
    max_queues = _IntKey("MaxQueues")
    max_partitions = _IntKey("MaxPartitions")
    unix_start_time = _IntKey("UnixStartTime")  # epoch seconds of time 0

    def lines(self) -> list[str]:
        """The header as SWF comment lines, continuation lines indented under the key."""
        out = []
        for key, value in self.entries:
            if key is None:
                out.append(f"; {value}".rstrip())
                continue
            first, *more = value.split("\n")
            out.append(f"; {key}: {first}".rstrip())
            out.extend(f";{' ' * (len(key) + 3)}{line}" for line in more)
        return out
