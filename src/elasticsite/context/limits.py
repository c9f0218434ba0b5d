"""The broker's admission defaults, apart from the rules (:mod:`.admission`) so that
the command line can show them without loading the request models."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BrokerLimits"]


@dataclass(frozen=True)
class BrokerLimits:
    """The broker's defaults for contexts that do not set their own limits."""

    max_members: int = 20_000
    join_rate: float = 50.0
    join_burst: int = 2_000
    max_member_bytes: int = 64 * 1024 * 1024
    """Bytes of member records one context may hold (every answer carries them)."""
    reserved: tuple[str, ...] = ()
    """Names every context reserves besides ``localhost`` (the broker's own host)."""
