"""The shipped scripts, run as the agent runs them, on a scratch root; the firewall
scripts for real with nftables inside network namespaces created here."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elasticsite.context.agent import DEFAULT_SCRIPTS

URI = "https://broker:8443/ctx/0123456789abcdef"
W1 = ("w1", "w1.cluster.example.org", "10.0.0.1", "ssh-ed25519 AAAAC3Nza1 root@w1", "slots=4")
W2 = ("w2", "w2.cluster.example.org", "10.0.0.2", "ssh-ed25519 AAAAC3Nza2", "")
W6 = ("w6", "w6.cluster.example.org", "fd00::6", "ecdsa-sha2-nistp256 AAAAE2Vj+/= w6", "")
BEGIN = "# BEGIN elasticsite 0123456789abcdef\n"
END = "# END elasticsite 0123456789abcdef\n"
NODE_ENV = tuple(
    f"ELASTICSITE_NODE_{f}"
    for f in ("SHORT_HOSTNAME", "HOSTNAME", "ADDRESS", "SSH_HOST_KEY", "DATA")
)
LIB = DEFAULT_SCRIPTS / "lib/elasticsite.sh"


def attempt(
    kind: str,
    name: str,
    node: tuple[str, ...] = (),
    *,
    root: Path,
    uri: str = URI,
    netns: str | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """Run one shipped script (in the network namespace ``netns``, if given)."""
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
    return subprocess.run(argv, env=full, capture_output=True, text=True, timeout=30)


def run(
    kind: str, name: str, node: tuple[str, ...] = (), **options: Any
) -> subprocess.CompletedProcess[str]:
    """Run one shipped script as :func:`attempt` does; it must succeed."""
    done = attempt(kind, name, node, **options)
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
        BEGIN
        + "w6.cluster.example.org,w6,fd00::6 ecdsa-sha2-nistp256 AAAAE2Vj+/=\n"
        + "w1.cluster.example.org,w1,10.0.0.1 ssh-ed25519 AAAAC3Nza1\n"
        + END
    )  # the keys' comments are dropped
    changed = (*W1[:3], "ssh-ed25519 NEWKEY root@w1", "")
    run("add", "10-known-hosts", changed, root=tmp_path)  # rejoined with a new key
    run("delete", "10-known-hosts", W6, root=tmp_path)
    assert known.read_text() == (
        BEGIN + "w1.cluster.example.org,w1,10.0.0.1 ssh-ed25519 NEWKEY\n" + END
    )
    if shutil.which("ssh-keygen"):  # the file is what OpenSSH reads
        found = subprocess.run(
            ["ssh-keygen", "-F", "w1", "-f", str(known)], capture_output=True, text=True
        )
        assert "NEWKEY" in found.stdout
    run("delete", "10-known-hosts", changed, root=tmp_path)
    assert known.read_text() == ""  # the last delete takes the empty block away


def test_a_delete_removes_exactly_the_nodes_line(tmp_path: Path) -> None:
    """Matched on the whole host field (or hosts line), never on a prefix or one name."""
    near = [
        ("w10", "w10.cluster.example.org", "10.0.0.10", "ssh-ed25519 AAAA10", ""),
        ("w1", "w1.cluster.example.org.other", "10.0.0.1", "ssh-ed25519 AAAA11", ""),
        ("w1x", "w1x.cluster.example.org", "10.0.0.1", "ssh-ed25519 AAAA12", ""),
    ]
    for node in (*near, W1):
        run("add", "10-known-hosts", node, root=tmp_path)
        run("add", "20-hosts", node, root=tmp_path)
    for name in ("10-known-hosts", "20-hosts"):
        stale = ("w1", "w1.cluster.example.org", "10.0.0.9", "ssh-ed25519 AAAA", "")
        run("delete", name, stale, root=tmp_path)  # not W1's address: not W1's line
        run("delete", name, W1, root=tmp_path)
    known = (tmp_path / "etc/ssh/ssh_known_hosts").read_text().splitlines()
    hosts = (tmp_path / "etc/hosts").read_text().splitlines()
    assert [line.split()[0] for line in known[1:-1]] == [
        "w10.cluster.example.org,w10,10.0.0.10",
        "w1.cluster.example.org.other,w1,10.0.0.1",
        "w1x.cluster.example.org,w1x,10.0.0.1",
    ]
    assert [line.split()[1] for line in hosts[1:-1]] == [n[1] for n in near]


def test_node_fields_are_read_from_the_environment_first(tmp_path: Path) -> None:
    env = dict(zip(NODE_ENV, W2, strict=True))
    run("add", "20-hosts", W1, root=tmp_path, **env)
    run("add", "10-known-hosts", W1, root=tmp_path, **env)
    assert (tmp_path / "etc/hosts").read_text() == (
        BEGIN + "10.0.0.2\tw2.cluster.example.org w2\n" + END
    )
    assert (tmp_path / "etc/ssh/ssh_known_hosts").read_text() == (
        BEGIN + "w2.cluster.example.org,w2,10.0.0.2 ssh-ed25519 AAAAC3Nza2\n" + END
    )
    # An empty variable is the field, not a reason to look at the argument.
    done = attempt("delete", "20-hosts", W1, root=tmp_path, **{**env, NODE_ENV[1]: ""})
    assert done.returncode == 1
    assert done.stderr == "20-hosts: refusing hostname '': not an RFC 1123 host name\n"


def check(kind: str, value: str) -> subprocess.CompletedProcess[str]:
    """One of lib/elasticsite.sh's field checks, es_check_KIND, on VALUE."""
    return subprocess.run(
        ["sh", "-c", f'. "$1"; es_check_{kind} the-field "$2"', "check", str(LIB), value],
        capture_output=True,
        text=True,
        timeout=10,
    )


HOST_OK = [
    "w1",
    "w1.cluster.example.org",
    "a-b.C9",
    "1",
    "x" * 63,
    ".".join(["x" * 63] * 3 + ["x" * 61]),
]
HOST_BAD = [
    "", "-a", "a-", "a.-b", "a..b", ".a", "a.", "x" * 64, ".".join(["x" * 63] * 3 + ["x" * 62]),
    "a_b", "*", "w?", "@x", "a,b", "a b", "a\tb", "a\nb", "a\\nb", "a\rb", "w\u00e9", "a\x85b",
]  # fmt: skip
ADDRESS_OK = [
    "10.0.0.1", "0.0.0.0", "255.255.255.255", "fd00::6", "::", "::1", "1:2:3:4:5:6:7:8",
    "1:2:3:4:5:6:7::", "::ffff:10.0.0.1", "1:2:3:4:5:6:1.2.3.4", "FD00::AbCd", "0000:0::1",
]  # fmt: skip
ADDRESS_BAD = [
    "", "256.0.0.1", "010.0.0.1", "1.2.3", "1.2.3.4.5", "1.2.3.4:", "1::2::3", ":1::2", "1::2:",
    ":::", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7", "12345::1", "1:2:3:4:5:6:7:1.2.3.4",
    "::1.2.3", "fe80::1%eth0", "[::1]", "10.0.0.0/8", " 10.0.0.1", "10.0.0.1\n", "w1", "g::1",
]  # fmt: skip
KEY_OK = [
    "ssh-ed25519 AAAA", "ssh-ed25519 AAAA= root@w1", "ssh-rsa  AB+/==", "ssh-ed25519 AAAA a b c",
    "ecdsa-sha2-nistp256 AAAA", "ecdsa-sha2-nistp384 AAAA", "ecdsa-sha2-nistp521 AAAA",
    "sk-ssh-ed25519@openssh.com AAAA", "sk-ecdsa-sha2-nistp256@openssh.com AAAA",
    "ssh-ed25519 AAAA caf\u00e9",
]  # fmt: skip
KEY_BAD = [
    "", "ssh-ed25519", "ssh-dss AAAA", "SSH-ED25519 AAAA", "ssh-ed25519 AA\\AA",
    "ssh-ed25519 AAAA===", "ssh-ed25519\tAAAA", "ssh-ed25519 AAAA x\ty", "ssh-ed25519 AAAA\n",
    " ssh-ed25519 AAAA", "ssh-ed25519 AAAA c\x85", "ssh-ed25519 AAAA \x7f",
    "@cert-authority * ssh-ed25519 AAAA", "ssh-ed25519 AAAA\n@cert-authority * ssh-ed25519 AAAA",
]  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "value", "ok"),
    [("host", v, True) for v in HOST_OK]
    + [("host", v, False) for v in HOST_BAD]
    + [("address", v, True) for v in ADDRESS_OK]
    + [("address", v, False) for v in ADDRESS_BAD]
    + [("key", v, True) for v in KEY_OK]
    + [("key", v, False) for v in KEY_BAD],
)
def test_field_checks(kind: str, value: str, ok: bool) -> None:
    done = check(kind, value)
    assert (done.returncode == 0) == ok, done.stderr
    if ok:
        assert done.stderr == ""
    else:  # one line naming the field, the value shown without control characters
        assert done.stderr.startswith("check: refusing the-field '")
        assert done.stderr.endswith("\n")
        assert all(" " <= c <= "~" for c in done.stderr[:-1])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.ip_addresses().flatmap(
                lambda ip: st.sampled_from(
                    [str(ip), ip.exploded, str(ip).upper()]
                    + ([f"::ffff:{ip}", f"1:2:3:4:5:6:{ip}", f"::{ip}"] if ip.version == 4 else [])
                )
            ),
            st.text("0123456789abcdefABCDEF:.", max_size=20),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_address_check_agrees_with_python(values: list[str]) -> None:
    """The scripts' address check takes exactly what ipaddress takes (no scope ids here)."""
    script = '. "$1"; shift; for v; do es_is address "$v" && echo 1 || echo 0; done'
    done = subprocess.run(
        ["sh", "-c", script, "check", str(LIB), *values],
        capture_output=True,
        text=True,
        timeout=30,
    )
    expected = []
    for value in values:
        try:
            ipaddress.ip_address(value)
            expected.append("1")
        except ValueError:
            expected.append("0")
    assert done.stdout.split() == expected, list(zip(values, done.stdout.split(), strict=True))


def test_firewall_stays_off_on_a_scratch_root_or_when_told(tmp_path: Path) -> None:
    done = run("add", "30-firewall", W1, root=tmp_path)
    assert "not /: firewall left alone" in done.stderr
    done = run("add", "30-firewall", W1, root=tmp_path, ELASTICSITE_FIREWALL="off")
    assert "ELASTICSITE_FIREWALL=off: firewall left alone" in done.stderr
    assert not (tmp_path / "var").exists()


def fake_nft(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An ``nft`` first on PATH that only logs what it is asked (and says the table is
    missing): the settings' checks run without touching any real rules."""
    log = tmp_path / "nft.log"
    fake = tmp_path / "bin/nft"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'printf "nft %s\\n" "$*" >>"$NFT_LOG"\n'
        '[ "$1" != list ] || exit 1\n'
        '[ "$1" != -f ] || cat >>"$NFT_LOG"\n'
    )
    fake.chmod(0o755)
    env = {
        "PATH": f"{fake.parent}:{os.environ['PATH']}",
        "NFT_LOG": str(log),
        "ELASTICSITE_FIREWALL": "on",
    }
    return env, log


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("ELASTICSITE_FIREWALL_PORTS", "22; flush ruleset"),
        ("ELASTICSITE_FIREWALL_PORTS", "22 }"),
        ("ELASTICSITE_FIREWALL_PORTS", "ssh"),
        ("ELASTICSITE_FIREWALL_PORTS", "0"),
        ("ELASTICSITE_FIREWALL_PORTS", "70000"),
        ("ELASTICSITE_FIREWALL_PORTS", "100-90"),
        ("ELASTICSITE_FIREWALL_PORTS", ", ,"),
        ("ELASTICSITE_FIREWALL_ALLOW", "10.0.0.0/8 }"),
        ("ELASTICSITE_FIREWALL_ALLOW", "10.0.0.0/33"),
        ("ELASTICSITE_FIREWALL_ALLOW", "fe80::1%eth0"),
        ("ELASTICSITE_FIREWALL_ALLOW", "any"),
        ("ELASTICSITE_FIREWALL", "yes"),
    ],
)
def test_firewall_settings_are_checked_before_any_rule(
    tmp_path: Path, setting: str, value: str
) -> None:
    env, log = fake_nft(tmp_path)
    for kind, node in (("init", ()), ("add", W1), ("delete", W1)):
        done = attempt(kind, "30-firewall", node, root=tmp_path, **{**env, setting: value})
        assert done.returncode == 1
        assert done.stderr.startswith(f"30-firewall: {setting} must be ")
        assert done.stderr.count("\n") == 1
    assert not log.exists()  # nft never asked anything
    assert not (tmp_path / "var").exists()


def test_firewall_settings_make_the_ruleset(tmp_path: Path) -> None:
    env, log = fake_nft(tmp_path)
    env |= {
        "ELASTICSITE_FIREWALL_PORTS": " 22, 6817-6818 ,,60001-63000 ",
        "ELASTICSITE_FIREWALL_ALLOW": "10.1.0.0/16 fd00::/8,10.2.3.4",
    }
    run("add", "30-firewall", W1, root=tmp_path, **env)
    ruleset = log.read_text()
    ports = "{ 22, 6817-6818, 60001-63000 }"
    assert f"\t\tip saddr @peers4 tcp dport {ports} accept\n" in ruleset
    assert f"\t\tip saddr 10.1.0.0/16 tcp dport {ports} accept\n" in ruleset
    assert f"\t\tip6 saddr fd00::/8 tcp dport {ports} accept\n" in ruleset
    assert f"\t\tip saddr 10.2.3.4 tcp dport {ports} accept\n" in ruleset
    assert f"\t\ttcp dport {ports} reject with tcp reset\n" in ruleset
    assert "add element inet elasticsite peers4 { 10.0.0.1 }" in ruleset
    peers = tmp_path / "var/lib/elasticsite/firewall-0123456789abcdef.peers"
    assert peers.read_text() == "10.0.0.1\n"
    assert oct(peers.stat().st_mode & 0o777) == "0o600"


def test_iptables_fallback_skips_bad_and_refused_members(tmp_path: Path) -> None:
    """Without nft: the chains are rebuilt member by member; a peers line that is not
    an address, or one iptables refuses, is skipped and the rest still let in."""
    bin_dir = tmp_path / "bin"  # a PATH with the usual tools, no nft, a fake iptables
    bin_dir.mkdir()
    for tool in ("awk", "cat", "chmod", "cmp", "dirname", "grep", "mkdir", "mktemp", "mv",
                 "rm", "sed", "sync", "tr"):  # fmt: skip
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    for ipt in ("iptables", "ip6tables"):
        (bin_dir / ipt).write_text(
            "#!/bin/sh\n"
            'echo "${0##*/} $*" >>"$IPT_LOG"\n'
            'case " $* " in *" -L "*|*" -C "*) exit 1 ;; *10.0.0.66*) exit 2 ;; esac\n'
        )
        (bin_dir / ipt).chmod(0o755)
    peers = tmp_path / "var/lib/elasticsite/firewall-0123456789abcdef.peers"
    peers.parent.mkdir(parents=True)
    peers.write_text("10.0.0.2\n10.0.0.66\n10.0.0.9 }\nfd00::2\n")
    log = tmp_path / "ipt.log"
    env = {"PATH": str(bin_dir), "IPT_LOG": str(log), "ELASTICSITE_FIREWALL": "on"}
    done = run("init", "30-firewall", (), root=tmp_path, **env)
    assert "skipping line 3 of " in done.stderr and "'10.0.0.9 }' is not an address" in done.stderr
    assert "skipping remembered member 10.0.0.66: iptables refused it" in done.stderr
    assert "created iptables chain ELASTICSITE" in done.stderr
    assert "created ip6tables chain ELASTICSITE" in done.stderr
    calls = log.read_text()
    ports = "22,6817:6818,60001:63000"
    accept = f"-p tcp -m multiport --dports {ports} -j ACCEPT"
    assert f"iptables -I ELASTICSITE 1 -s 10.0.0.2 {accept}\n" in calls
    assert f"ip6tables -I ELASTICSITE 1 -s fd00::2 {accept}\n" in calls
    assert "10.0.0.9" not in calls


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

        done = run("init", "30-firewall", (), root=tmp_path, netns=server, **env)
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
