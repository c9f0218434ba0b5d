"""The shipped scripts compare names and addresses as strings, on real files.

awk compares two values that look numeric as numbers: ``100``, ``1e2`` and ``0x64``
(mawk reads hex) are one number, so a script that compared names with ``==`` let the
add of one node delete another's lines. The broker and the agent refuse such names,
but the scripts must not depend on it: they are the administrator's to reuse.
"""

from __future__ import annotations

from pathlib import Path

from .test_scripts import BEGIN, END, run

KEY = "ssh-ed25519 AAAAC3Nza{}"
NODES = [
    (name, name, f"10.0.0.{n}", KEY.format(n), "")
    for n, name in enumerate(("100", "1e2", "0x64", "100.0"), start=1)
]


def test_numeric_looking_names_keep_their_own_lines(tmp_path: Path) -> None:
    for node in NODES:
        for script in ("10-known-hosts", "20-hosts"):
            run("add", script, node, root=tmp_path)
    hosts = tmp_path / "etc/hosts"
    known = tmp_path / "etc/ssh/ssh_known_hosts"
    assert hosts.read_text() == BEGIN + "".join(f"{a}\t{h} {s}\n" for s, h, a, _, _ in NODES) + END
    assert known.read_text() == (
        BEGIN + "".join(f"{h},{s},{a} {k}\n" for s, h, a, k, _ in NODES) + END
    )

    # Deleting one node takes exactly its own lines, not those of equal numbers.
    for script in ("10-known-hosts", "20-hosts"):
        run("delete", script, NODES[1], root=tmp_path)
    rest = [NODES[0], *NODES[2:]]
    assert hosts.read_text() == BEGIN + "".join(f"{a}\t{h} {s}\n" for s, h, a, _, _ in rest) + END
    assert known.read_text() == (
        BEGIN + "".join(f"{h},{s},{a} {k}\n" for s, h, a, k, _ in rest) + END
    )

    # A rejoin of "100" under a new address replaces its line, and only its line.
    moved = ("100", "100", "10.0.0.9", KEY.format(9), "")
    run("add", "20-hosts", moved, root=tmp_path)
    assert (
        hosts.read_text()
        == BEGIN + "10.0.0.3\t0x64 0x64\n10.0.0.4\t100.0 100.0\n" + ("10.0.0.9\t100 100\n") + END
    )
