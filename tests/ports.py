"""A port for a test's server that nothing else on the machine is handed meanwhile.

A port the kernel picks (``bind`` to port 0) comes from the ephemeral range, from which
it also picks the source port of every outgoing connection: between the pick and the
server's own ``bind``, any test's client could be given that port, and the server
then fails with "address already in use". These ports come from below that range,
where only a listening socket can take one, chosen at random so that the suite's
parallel workers do not pick alike.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port"]

_LOWEST = 20_000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port(host: str = "127.0.0.1") -> int:
    """A port no socket on ``host`` holds now, outside the ephemeral range."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    top = _ephemeral_start()
    candidates = range(_LOWEST, top) if top - _LOWEST >= 1_000 else range(1_024, top)
    for port in random.sample(candidates, 200):
        with socket.socket(family) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue  # taken, or in TIME_WAIT after a server of an earlier test
            return port
    raise RuntimeError(f"no free port on {host} in {candidates.start}-{candidates.stop - 1}")
