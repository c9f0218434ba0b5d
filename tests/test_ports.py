"""The test servers' ports come from outside the range the kernel hands out to clients."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.ports import free_port


def test_a_free_port_is_below_the_ephemeral_range_and_binds() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(20_000 <= p < low for p in ports)
    assert len(ports) > 1  # chosen at random, so parallel workers do not pick alike
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))


def test_a_port_held_by_a_listener_is_never_given() -> None:
    held = []
    try:
        for _ in range(50):
            s = socket.socket()
            s.bind(("127.0.0.1", free_port()))
            s.listen()
            held.append(s)
        taken = {s.getsockname()[1] for s in held}
        assert all(free_port() not in taken for _ in range(200))
    finally:
        for s in held:
            s.close()
