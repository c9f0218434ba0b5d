"""The shipped scripts, run as the agent runs them, on a scratch root; the firewall
scripts for real with nftables inside network namespaces created here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from elasticsite.context.agent import DEFAULT_SCRIPTS

URI = "https://broker:8443/ctx/0123456789abcdef"
W1 = ("w1", "w1.cluster.example.org", "10.0.0.1", "ssh-ed25519 AAAAC3Nza1 root@w1", "slots=4")
W2 = ("w2", "w2.cluster.example.org", "10.0.0.2", "ssh-ed25519 AAAAC3Nza2", "")
W6 = ("w6", "w6.cluster.example.org", "fd00::6", "ecdsa-sha2-nistp256 AAAAE2Vj+/= w6", "")


def run(
    kind: str,
    name: str,
    node: tuple[str, ...] = (),
    *,
    root: Path,
    uri: str = URI,
    netns: str | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    argv = [str(DEFAULT_SCRIPTS / kind / name), *node]
    if netns is not None:
        argv = ["ip", "netns", "exec", netns, *argv]
    full = {
        **os.environ,
        "ELASTICSITE_AGENT_ROOT": str(root),
        "ELASTICSITE_CONTEXT_URI": uri,
        "ELASTICSITE_SELF_HOSTNAME": "w1.cluster.example.org",
        **env,
    }
    done = subprocess.run(argv, env=full, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"{kind}/{name} failed: {done.stderr}"
    return done


def test_shipped_scripts_are_executable_and_posix_sh() -> None:
    names = sorted(p.relative_to(DEFAULT_SCRIPTS).as_posix() for p in DEFAULT_SCRIPTS.glob("*/*"))
    assert names == [
        "add/10-known-hosts",
        "add/20-hosts",
        "add/30-firewall",
        "delete/10-known-hosts",
        "delete/20-hosts",
        "delete/30-firewall",
        "init/30-firewall",
        "lib/elasticsite.sh",
        "lib/firewall.sh",
        "restart/10-name-cache",
    ]
    for path in DEFAULT_SCRIPTS.glob("*/*"):
        if path.parent.name != "lib":
            assert os.access(path, os.X_OK), path
            assert path.read_text().startswith("#!/bin/sh\n"), path
        if shutil.which("dash"):  # parse with a strict POSIX shell
            assert subprocess.run(["dash", "-n", str(path)]).returncode == 0, path


def test_hosts_block_is_maintained_beside_the_administrators_lines(tmp_path: Path) -> None:
    hosts = tmp_path / "etc/hosts"
    hosts.parent.mkdir(parents=True)
    mine = (
        "127.0.0.1\tlocalhost\n"
        "# BEGIN elasticsite other\n10.1.1.1\tx.other x\n# END elasticsite other\n"
    )
    hosts.write_text(mine)
    run("add", "20-hosts", W1, root=tmp_path)
    run("add", "20-hosts", W2, root=tmp_path)
    run("add", "20-hosts", W1, root=tmp_path)  # again: still one line
    inode = hosts.stat().st_ino
    run("add", "20-hosts", W6, root=tmp_path)
    assert hosts.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert hosts.read_text() == mine + (
        "# BEGIN elasticsite 0123456789abcdef\n"
        "10.0.0.2\tw2.cluster.example.org w2\n"
        "10.0.0.1\tw1.cluster.example.org w1\n"
        "fd00::6\tw6.cluster.example.org w6\n"
        "# END elasticsite 0123456789abcdef\n"
    )
    run("delete", "20-hosts", W2, root=tmp_path)
    run("delete", "20-hosts", W2, root=tmp_path)  # again: nothing to do
    assert "w2" not in hosts.read_text() and "x.other" in hosts.read_text()
    assert sorted(p.name for p in hosts.parent.iterdir()) == ["hosts"]  # no temporary left
    assert oct(hosts.stat().st_mode & 0o777) == "0o644"


def test_hosts_block_without_end_marker_is_closed(tmp_path: Path) -> None:
    hosts = tmp_path / "etc/hosts"
    hosts.parent.mkdir(parents=True)
    hosts.write_text("::1 localhost\n# BEGIN elasticsite 0123456789abcdef\n10.0.0.1\tw1.c w1\n")
    run("add", "20-hosts", W2, root=tmp_path)
    assert hosts.read_text() == (
        "::1 localhost\n# BEGIN elasticsite 0123456789abcdef\n10.0.0.1\tw1.c w1\n"
        "10.0.0.2\tw2.cluster.example.org w2\n# END elasticsite 0123456789abcdef\n"
    )


def test_known_hosts_lines_are_added_once_and_removed(tmp_path: Path) -> None:
    known = tmp_path / "etc/ssh/ssh_known_hosts"
    run("add", "10-known-hosts", W1, root=tmp_path)
    run("add", "10-known-hosts", W6, root=tmp_path)
    run("add", "10-known-hosts", W1, root=tmp_path)
    assert known.read_text() == (
        "w6.cluster.example.org,w6,fd00::6 ecdsa-sha2-nistp256 AAAAE2Vj+/=\n"
        "w1.cluster.example.org,w1,10.0.0.1 ssh-ed25519 AAAAC3Nza1\n"
    )
    changed = (*W1[:3], "ssh-ed25519 NEWKEY root@w1", "")
    run("add", "10-known-hosts", changed, root=tmp_path)  # rejoined with a new key
    run("delete", "10-known-hosts", W6, root=tmp_path)
    assert known.read_text() == "w1.cluster.example.org,w1,10.0.0.1 ssh-ed25519 NEWKEY\n"
    if shutil.which("ssh-keygen"):  # the file is what OpenSSH reads
        found = subprocess.run(
            ["ssh-keygen", "-F", "w1", "-f", str(known)], capture_output=True, text=True
        )
        assert "NEWKEY" in found.stdout


def test_firewall_stays_off_on_a_scratch_root_or_when_told(tmp_path: Path) -> None:
    done = run("add", "30-firewall", W1, root=tmp_path)
    assert "not /: firewall left alone" in done.stderr
    done = run("add", "30-firewall", W1, root=tmp_path, ELASTICSITE_FIREWALL="off")
    assert "ELASTICSITE_FIREWALL=off: firewall left alone" in done.stderr
    assert not (tmp_path / "var").exists()


# --- the firewall for real, in network namespaces ----------------------------------


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


@pytest.fixture
def netns() -> Iterator[tuple[str, str]]:
    """Two namespaces joined by a veth pair: server 10.77.0.1 / fd77::1, client .2 / ::2."""
    if shutil.which("nft") is None:
        pytest.skip("nft is not installed (scripts/debian-test-packages.txt lists nftables)")
    tag = uuid.uuid4().hex[:6]
    server, client = f"es-srv-{tag}", f"es-cli-{tag}"
    try:
        _ip("netns", "add", server)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.skip(f"cannot create a network namespace here: {exc}")
    try:
        _ip("netns", "add", client)
        _ip("link", "add", f"s{tag}", "netns", server, "type", "veth", "peer", "name", f"c{tag}",
            "netns", client)  # fmt: skip
        for ns, dev, n in ((server, f"s{tag}", 1), (client, f"c{tag}", 2)):
            _ip("-n", ns, "addr", "add", f"10.77.0.{n}/24", "dev", dev)
            _ip("-n", ns, "addr", "add", f"fd77::{n}/64", "dev", dev, "nodad")
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield server, client
    finally:
        for ns in (server, client):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


def nft(ns: str, *args: str) -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", ns, "nft", *args], capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def connects(client: str, address: str, port: int) -> bool:
    """Whether a TCP connection from the client namespace succeeds (a reset: no)."""
    code = (
        "import socket,sys\n"
        f"s=socket.create_connection(({address!r},{port}),timeout=3)\n"
        "s.close()\n"
    )
    done = subprocess.run(
        ["ip", "netns", "exec", client, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=20,
    )
    return done.returncode == 0


def test_firewall_admits_members_only_with_its_own_table(
    tmp_path: Path, netns: tuple[str, str]
) -> None:
    server, client = netns
    env = {"ELASTICSITE_FIREWALL": "on", "ELASTICSITE_FIREWALL_PORTS": "22 6817-6818"}
    # Someone else's rules, which must survive untouched.
    nft(server, "add table inet other")
    nft(server, "add chain inet other keep { type filter hook input priority 0 ; }")
    nft(server, "add rule inet other keep tcp dport 9 counter accept")
    before = nft(server, "list table inet other")
    listener = subprocess.Popen(
        ["ip", "netns", "exec", server, sys.executable, "-c",
         "import socket,time\n"
         "socks=[]\n"
         "for fam,host in ((socket.AF_INET,'0.0.0.0'),(socket.AF_INET6,'::')):\n"
         "  s=socket.socket(fam); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
         "  fam==socket.AF_INET6 and s.setsockopt(socket.IPPROTO_IPV6,socket.IPV6_V6ONLY,1)\n"
         "  s.bind((host,6817)); s.listen(); socks.append(s)\n"
         "time.sleep(60)\n"],
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not connects(client, "10.77.0.1", 6817):
            assert time.monotonic() < deadline, "test listener did not start"
            time.sleep(0.1)
        client4 = ("c", "c.cluster.example.org", "10.77.0.2", "ssh-ed25519 AAAA", "")
        client6 = ("c6", "c6.cluster.example.org", "fd77::2", "ssh-ed25519 AAAA", "")

        done = run("init", "30-firewall", root=tmp_path, netns=server, **env)
        assert "created nftables table inet elasticsite" in done.stderr
        assert not connects(client, "10.77.0.1", 6817)  # not a member yet: refused
        assert not connects(client, "fd77::1", 6817)

        run("add", "30-firewall", client4, root=tmp_path, netns=server, **env)
        run("add", "30-firewall", client4, root=tmp_path, netns=server, **env)  # idempotent
        run("add", "30-firewall", client6, root=tmp_path, netns=server, **env)
        assert connects(client, "10.77.0.1", 6817)
        assert connects(client, "fd77::1", 6817)
        assert "elements = { 10.77.0.2 }" in nft(server, "list set inet elasticsite peers4")
        assert "elements = { fd77::2 }" in nft(server, "list set inet elasticsite peers6")

        run("delete", "30-firewall", client4, root=tmp_path, netns=server, **env)
        run("delete", "30-firewall", client4, root=tmp_path, netns=server, **env)  # idempotent
        assert not connects(client, "10.77.0.1", 6817)
        assert connects(client, "fd77::1", 6817)

        # A reboot loses nftables rules: the next firewall script rebuilds the table
        # with the members it remembered.
        nft(server, "delete table inet elasticsite")
        other = ("o", "o.cluster.example.org", "10.77.0.9", "ssh-ed25519 AAAA", "")
        run("add", "30-firewall", other, root=tmp_path, netns=server, **env)
        peers6 = nft(server, "list set inet elasticsite peers6")
        assert "fd77::2" in peers6
        assert "10.77.0.9" in nft(server, "list set inet elasticsite peers4")
        assert nft(server, "list table inet other") == before
    finally:
        listener.kill()
        listener.wait()
