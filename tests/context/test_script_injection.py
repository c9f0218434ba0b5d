"""A node's fields are untrusted: whoever holds one worker's credentials chooses them.
The shipped scripts, run as the agent runs them (fields in the arguments and the
environment), must refuse crafted fields without writing anything, never plant an
``@cert-authority`` line, never touch the administrator's lines, and keep the
firewall buildable whatever the peers file holds."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .test_scripts import BEGIN, END, NODE_ENV, URI, W1, attempt, netns, nft

__all__ = ["netns"]  # the fixture, shared with test_scripts

CTX = URI.rsplit("/", 1)[1]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAttacker"
EVIL = "@cert-authority * ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEvil"
ADMIN_HOSTS = (
    "127.0.0.1\tlocalhost\n"
    "10.9.9.9\tw1.cluster.example.org w1\n"  # the administrator's own line for w1
    "# BEGIN elasticsite other\n10.1.1.1\tx.other x\n# END elasticsite other\n"
)
ADMIN_KNOWN = (
    "# the administrator's keys\n"
    "w1.cluster.example.org,w1,10.0.0.1 ssh-ed25519 AAAAAdminW1\n"  # same host field as W1
    "@cert-authority *.example.org ssh-ed25519 AAAAAdminCA\n"
)


def setup_root(root: Path, hosts: str = ADMIN_HOSTS, known: str = ADMIN_KNOWN) -> None:
    (root / "etc/ssh").mkdir(parents=True, exist_ok=True)
    (root / "etc/hosts").write_bytes(hosts.encode())
    (root / "etc/ssh/ssh_known_hosts").write_bytes(known.encode())


def files(root: Path) -> tuple[str, str]:
    """Both files, byte for byte (no newline translation)."""
    hosts = (root / "etc/hosts").read_bytes().decode()
    return hosts, (root / "etc/ssh/ssh_known_hosts").read_bytes().decode()


def as_agent(
    kind: str, name: str, node: tuple[str, ...], root: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """One script, with the node's fields as the agent gives them: arguments and
    environment alike."""
    fields = dict(zip(NODE_ENV, node, strict=True)) if node else {}
    return attempt(kind, name, node, root=root, **fields, **env)


def node_with(field: int, value: str, base: tuple[str, ...] = W1) -> tuple[str, ...]:
    return tuple(value if i == field else v for i, v in enumerate(base))


SHORT, HOST, ADDRESS, SSH_KEY = 0, 1, 2, 3
FIELD_NAMES = {
    SHORT: "short hostname",
    HOST: "hostname",
    ADDRESS: "address",
    SSH_KEY: "SSH host key",
}
CRAFTED = [
    (SHORT, "w1\n10.6.6.6\tbank.example.org"),
    (SHORT, "w1\\n10.6.6.6\\tbank.example.org"),  # backslash escapes, as two characters
    (SHORT, "w1\tbank"),
    (SHORT, "w1 bank.example.org"),
    (HOST, "w1.cluster.example.org\n10.6.6.6 bank.example.org"),
    (HOST, "w1.cluster.example.org\\n10.6.6.6 bank.example.org"),
    (HOST, "w1.cluster.example.org\tbank"),
    (HOST, "w1.cluster.example.org bank.example.org"),
    (ADDRESS, "10.0.0.1\n10.6.6.6 bank.example.org"),
    (ADDRESS, "10.0.0.1\\n10.6.6.6 bank.example.org"),
    (ADDRESS, "10.0.0.1\tbank"),
    (ADDRESS, "10.6.6.6 bank.example.org"),
    (ADDRESS, "fe80::1%eth0\n10.6.6.6 bank.example.org"),
    (ADDRESS, "fe80::1%eth0\\n10.6.6.6 bank.example.org"),
]


@pytest.mark.parametrize(("field", "value"), CRAFTED)
def test_a_crafted_name_or_address_is_refused_and_writes_nothing(
    tmp_path: Path, field: int, value: str
) -> None:
    setup_root(tmp_path)
    node = node_with(field, value)
    for op in ("add", "delete"):
        for name in ("10-known-hosts", "20-hosts", "30-firewall"):
            done = as_agent(op, name, node, tmp_path)
            assert files(tmp_path) == (ADMIN_HOSTS, ADMIN_KNOWN)
            assert done.returncode == 1, f"{op}/{name} accepted {value!r}"
            assert done.stderr.startswith(f"{name}: refusing {FIELD_NAMES[field]} '")
            assert done.stderr.count("\n") == 1  # one line, whatever the value holds
    assert sorted(p.name for p in (tmp_path / "etc").iterdir()) == ["hosts", "ssh"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (SSH_KEY, f"{KEY}\n{EVIL}"),
        (SSH_KEY, f"{KEY} root@w1\n{EVIL}"),
        (SSH_KEY, f"{KEY}\\n{EVIL}"),
        (SSH_KEY, EVIL),
        (HOST, "@cert-authority *"),
        (HOST, f"w1.cluster.example.org\n{EVIL}"),
        (HOST, f"w1.cluster.example.org\\n{EVIL}"),
        (SHORT, f"w1\\n{EVIL}"),
        (SHORT, "*"),  # "w1.cluster.example.org,*,10.0.0.1 KEY": the key of every host
        (ADDRESS, f"10.0.0.1\\n{EVIL}"),
    ],
)
def test_no_cert_authority_or_wildcard_line_can_be_planted(
    tmp_path: Path, field: int, value: str
) -> None:
    setup_root(tmp_path)
    node = node_with(field, value, ("w1", "w1.cluster.example.org", "10.0.0.1", KEY, ""))
    for op in ("add", "delete"):
        done = as_agent(op, "10-known-hosts", node, tmp_path)
        known = files(tmp_path)[1].splitlines()
        assert [line for line in known if line.startswith("@")] == [ADMIN_KNOWN.splitlines()[2]]
        assert not any("*" in line.split(" ")[0] for line in known)
        assert done.returncode == 1
        assert f"refusing {FIELD_NAMES[field]} '" in done.stderr
    assert files(tmp_path) == (ADMIN_HOSTS, ADMIN_KNOWN)


def test_the_administrators_lines_survive_add_and_delete(tmp_path: Path) -> None:
    setup_root(tmp_path)
    newkey = (*W1[:3], "ssh-ed25519 AAAANewKey root@w1", "")
    for node in (W1, newkey):
        for name in ("10-known-hosts", "20-hosts"):
            assert as_agent("add", name, node, tmp_path).returncode == 0
        hosts, known = files(tmp_path)
        assert hosts == ADMIN_HOSTS + BEGIN + "10.0.0.1\tw1.cluster.example.org w1\n" + END
        line = f"w1.cluster.example.org,w1,10.0.0.1 {' '.join(node[3].split()[:2])}\n"
        assert known == ADMIN_KNOWN + BEGIN + line + END
    for name in ("10-known-hosts", "20-hosts"):
        assert as_agent("delete", name, newkey, tmp_path).returncode == 0
    assert files(tmp_path) == (ADMIN_HOSTS, ADMIN_KNOWN)  # nothing of the node remains


def test_a_forged_marker_line_in_the_block_is_never_written(tmp_path: Path) -> None:
    """A field cannot close our block early and leave lines outside it."""
    setup_root(tmp_path)
    for field, value in (
        (HOST, f"w1\n{END.strip()}\n10.6.6.6 bank"),
        (HOST, f"w1\\n{END.strip()}\\n10.6.6.6 bank"),
        (SSH_KEY, f"{KEY}\n{END.strip()}\n{EVIL}"),
    ):
        node = node_with(field, value, ("w1", "w1.c", "10.0.0.1", KEY, ""))
        for name in ("10-known-hosts", "20-hosts"):
            assert as_agent("add", name, node, tmp_path).returncode == 1
    assert files(tmp_path) == (ADMIN_HOSTS, ADMIN_KNOWN)


# --- property: whatever the fields, add then delete leaves the files as they were ------

LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
VALID = {
    SHORT: LABEL,
    HOST: st.builds(lambda a, b: f"{a}.{b}.example.org", LABEL, LABEL),
    ADDRESS: st.ip_addresses().map(str),
    SSH_KEY: st.builds(
        lambda t, b, c: f"{t} {b}{c}",
        st.sampled_from(["ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256"]),
        st.from_regex(r"[A-Za-z0-9+/]{4,40}={0,2}", fullmatch=True),
        st.sampled_from(["", " root@w1", " a b"]),
    ),
}
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=24)
TRICKS = st.sampled_from(
    ["\n", "\\n", "\t", "\\t", " ", "\\", "\r", "\x0b", "\x85", "#", "@cert-authority *", "*",
     "%eth0", ",", "/24", "[", "]", "}", ";", "'", '"', "$(id)", "`id`", END.strip()]
)  # fmt: skip


def field(kind: int) -> st.SearchStrategy[str]:
    """A valid field, a valid one with something slipped in, or any text at all."""
    tricked = st.builds(lambda a, t, b: a + t + b, VALID[kind], TRICKS, st.sampled_from(["", "x"]))
    return st.one_of(VALID[kind], tricked, TEXT)


NODES = st.one_of(
    st.tuples(*(VALID[k] for k in (SHORT, HOST, ADDRESS, SSH_KEY)), st.just("")),
    st.tuples(*(field(k) for k in (SHORT, HOST, ADDRESS, SSH_KEY)), TEXT),
)
ADMIN_LINES = st.lists(
    st.text(st.characters(codec="utf-8", exclude_characters="\x00\n"), max_size=30).filter(
        lambda line: "elasticsite" not in line
    ),
    max_size=4,
)


def outside_block(text: str) -> list[str]:
    """The lines that are not in this context's block."""
    out, inside = [], False
    for line in text.split("\n"):
        if line == BEGIN.strip():
            inside = True
        elif inside and line == END.strip():
            inside = False
        elif not inside:
            out.append(line)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(node=NODES, extra=ADMIN_LINES)
def test_add_then_delete_restores_both_files(node: tuple[str, ...], extra: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hosts0 = ADMIN_HOSTS + "".join(f"{line}\n" for line in extra)
        known0 = ADMIN_KNOWN + "".join(f"{line}\n" for line in extra)
        setup_root(root, hosts0, known0)
        added = [as_agent("add", name, node, root) for name in ("10-known-hosts", "20-hosts")]
        hosts, known = files(root)
        assert outside_block(hosts) == outside_block(hosts0)
        assert outside_block(known) == outside_block(known0)
        assert [line for line in known.splitlines() if line.startswith("@")] == [
            line for line in known0.splitlines() if line.startswith("@")
        ]
        if all(done.returncode == 0 for done in added):  # accepted: exactly its lines
            key = " ".join(node[3].split()[:2])
            assert hosts == hosts0 + f"{BEGIN}{node[2]}\t{node[1]} {node[0]}\n{END}"
            assert known == known0 + f"{BEGIN}{node[1]},{node[0]},{node[2]} {key}\n{END}"
        else:  # refused: by both scripts, without writing anything
            assert [done.returncode for done in added] == [1, 1]
            assert (hosts, known) == (hosts0, known0)
        for name in ("10-known-hosts", "20-hosts"):
            as_agent("delete", name, node, root)
        assert files(root) == (hosts0, known0)


# --- the firewall for real, in network namespaces --------------------------------------

FW = {"ELASTICSITE_FIREWALL": "on", "ELASTICSITE_FIREWALL_PORTS": "22 6817-6818"}


def peers_file(root: Path) -> Path:
    return root / f"var/lib/elasticsite/firewall-{CTX}.peers"


def test_a_bad_peers_line_does_not_keep_the_table_from_being_built(
    tmp_path: Path, netns: tuple[str, str]
) -> None:
    server, _ = netns
    nft(server, "add table inet other")
    peers = peers_file(tmp_path)
    peers.parent.mkdir(parents=True)
    peers.write_text("10.77.0.2\n10.0.0.1 }\n1.2.3.4; flush ruleset\nfd77::2\n\nnot-an-address\n")
    done = as_agent("init", "30-firewall", (), tmp_path, netns=server, **FW)
    assert done.returncode == 0, done.stderr
    for bad in ("10.0.0.1 }", "1.2.3.4; flush ruleset", "not-an-address"):
        assert f": '{bad}' is not an address" in done.stderr
    assert "elements = { 10.77.0.2 }" in nft(server, "list set inet elasticsite peers4")
    assert "elements = { fd77::2 }" in nft(server, "list set inet elasticsite peers6")
    assert "table inet other" in nft(server, "list tables")
    # The next change rewrites the peers file with its good lines only.
    member = ("c3", "c3.cluster.example.org", "10.77.0.3", KEY, "")
    assert as_agent("add", "30-firewall", member, tmp_path, netns=server, **FW).returncode == 0
    assert peers.read_text() == "10.77.0.2\nfd77::2\n10.77.0.3\n"


def test_a_member_nft_refuses_is_skipped_and_the_rest_restored(
    tmp_path: Path, netns: tuple[str, str]
) -> None:
    server, _ = netns
    real = shutil.which("nft")
    fake = tmp_path / "bin/nft"
    fake.parent.mkdir()
    fake.write_text(  # an nft that refuses anything about 10.77.0.66
        "#!/bin/sh\n"
        'if [ "$1" = -f ]; then in=$(cat); else in="$*"; fi\n'
        'case $in in *10.77.0.66*) echo "Error: refused" >&2; exit 1 ;; esac\n'
        f'if [ "$1" = -f ]; then printf "%s\\n" "$in" | exec {real} -f -; fi\n'
        f'exec {real} "$@"\n'
    )
    fake.chmod(0o755)
    peers = peers_file(tmp_path)
    peers.parent.mkdir(parents=True)
    peers.write_text("10.77.0.2\n10.77.0.66\n10.77.0.7\n")
    env = {**FW, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    done = as_agent("init", "30-firewall", (), tmp_path, netns=server, **env)
    assert done.returncode == 0, done.stderr
    assert "skipping remembered member 10.77.0.66: nft refused it" in done.stderr
    assert "elements = { 10.77.0.2, 10.77.0.7 }" in nft(server, "list set inet elasticsite peers4")


def test_a_crafted_address_never_reaches_nft(tmp_path: Path, netns: tuple[str, str]) -> None:
    server, _ = netns
    nft(server, "add table inet other")
    assert as_agent("init", "30-firewall", (), tmp_path, netns=server, **FW).returncode == 0
    crafted = (
        "10.77.0.3 } ; delete table inet other ; add element inet elasticsite peers4 { 10.77.0.4"
    )
    node = node_with(ADDRESS, crafted)
    for op in ("add", "delete"):
        done = as_agent(op, "30-firewall", node, tmp_path, netns=server, **FW)
        assert "table inet other" in nft(server, "list tables")
        assert "elements" not in nft(server, "list set inet elasticsite peers4")
        assert done.returncode == 1
        assert done.stderr.startswith("30-firewall: refusing address '")
    assert not peers_file(tmp_path).exists() or peers_file(tmp_path).read_text() == ""
