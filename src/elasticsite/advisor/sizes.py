"""Job size classes: which history speaks for a job of a given node count.

A 4-node job waits and runs like other small jobs, not like 512-node ones, so
histories are kept per size class. By default the classes double: 1, 2, 3-4, 5-8,
9-16, ... nodes. A site may give its own upper edges instead, e.g. ``1, 4, 16, 64``
for the classes 1, 2-4, 5-16, 17-64 and 65+ (an open class above the last edge).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["SizeClasses"]

_LABEL = re.compile(r"^(\d+)(?:-(\d+)|(\+))?$")


def _check_nodes(nodes: object) -> int:
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"a node count must be a whole number >= 1, got {nodes!r}")
    return nodes


@dataclass(frozen=True)
class SizeClasses:
    """Size classes by node count: powers of two, or the given upper edges."""

    upper_edges: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.upper_edges is None:
            return
        edges = tuple(self.upper_edges)
        if not edges:
            raise ValueError("size classes need at least one upper edge")
        for edge in edges:
            _check_nodes(edge)
        if any(b <= a for a, b in itertools.pairwise(edges)):
            raise ValueError(
                f"size class edges must increase, got {', '.join(str(e) for e in edges)}"
            )
        object.__setattr__(self, "upper_edges", edges)

    @classmethod
    def parse(cls, spec: str | Iterable[int] | None) -> SizeClasses:
        """From a setting: None, "" or "powers of two" for the default, otherwise upper
        edges as a list or comma-separated text ("1, 4, 16, 64")."""
        if spec is None:
            return cls()
        if isinstance(spec, str):
            text = spec.strip()
            if text.lower() in ("", "powers of two", "pow2"):
                return cls()
            edges = []
            for part in text.split(","):
                item = part.strip()
                if not item.isdigit():
                    raise ValueError(
                        f"size classes: {item!r} is not a node count (expected e.g. '1, 4, 16')"
                    )
                edges.append(int(item))
            return cls(tuple(edges))
        return cls(tuple(spec))

    def range_of(self, nodes: int) -> tuple[int, int | None]:
        """The (first, last) node counts of the class holding ``nodes``; last is None
        for the open class above the last configured edge."""
        n = _check_nodes(nodes)
        if self.upper_edges is None:
            high = 1 << (n - 1).bit_length()
            return (high // 2 + 1 if high > 1 else 1), high
        low = 1
        for edge in self.upper_edges:
            if n <= edge:
                return low, edge
            low = edge + 1
        return low, None

    def label(self, nodes: int) -> str:
        """The class of ``nodes`` as text: "1", "3-4", "65+"."""
        low, high = self.range_of(nodes)
        if high is None:
            return f"{low}+"
        return str(low) if low == high else f"{low}-{high}"

    def bounds(self, label: str) -> tuple[int, int | None]:
        """The (first, last) node counts of a label of these classes; a ValueError
        naming the label when it is not one of them."""
        match = _LABEL.match(label.strip()) if isinstance(label, str) else None
        if match is None:
            raise ValueError(f"size class {label!r} is not like '1', '3-4' or '65+'")
        low = int(match.group(1))
        expected = self.label(low) if low >= 1 else None
        if expected != label.strip():
            raise ValueError(
                f"size class {label!r} is not one of these classes"
                + (f" (node count {low} is in {expected!r})" if expected else "")
            )
        return self.range_of(low)

    def __str__(self) -> str:
        if self.upper_edges is None:
            return "powers of two"
        return ", ".join(str(e) for e in self.upper_edges)
