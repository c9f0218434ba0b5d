"""``elasticsite broker`` and ``elasticsite context`` as real subprocesses, and the client's
own behaviour (certificate pinning, error values) against them."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from tests.cli import run_command

from elasticsite.context.client import (
    AdminClient,
    AsyncNodeClient,
    BrokerUnavailable,
    ContextError,
    NodeClient,
    split_context_uri,
)
from elasticsite.context.tls import ensure_certificate, fingerprint

from .conftest import BrokerProcess, LiveBroker, free_port, node_info

pytestmark = pytest.mark.slow


def cli(broker: BrokerProcess, *args: str, token: bool = True) -> subprocess.CompletedProcess[str]:
    extra = ["--broker", broker.url, "--ca", str(broker.cert)]
    if token:
        extra += ["--token-file", str(broker.token_file)]
    env = {**os.environ, "COLUMNS": "200", "ELASTICSITE_BROKER_TOKEN": ""}
    return run_command("context", *args, *extra, timeout=60, env=env)


def test_broker_prints_where_it_listens_and_keeps_keys_private(
    broker_process: BrokerProcess,
) -> None:
    out, _err = broker_process.terminate()
    lines = out.splitlines()
    assert lines[0] == f"broker      {broker_process.url}"
    assert lines[1] == f"certificate {broker_process.cert}"
    assert lines[2] == f"sha256      {fingerprint(broker_process.cert)}"
    assert lines[3] == f"admin token {broker_process.token_file}"
    token = broker_process.token_file.read_text().strip()
    assert token not in out + _err and len(token) >= 22
    for private in ("admin.token", "broker.key", "broker.sqlite3"):
        mode = stat.S_IMODE((broker_process.state_dir / private).stat().st_mode)
        assert mode == 0o600, private
    assert stat.S_IMODE(broker_process.state_dir.stat().st_mode) == 0o700


def test_context_rules_are_set_at_creation_and_shown(broker_process: BrokerProcess) -> None:
    made = cli(
        broker_process, "create", "ruled", "--json", "--domain", "Cloud.Example.org",
        "--host-pattern", "w-*.cloud.example.org", "--reserve", "head.cloud.example.org",
        "--reserve", "10.1.0.1", "--max-members", "2", "--join-rate", "5", "--allow-loopback",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    ctx = json.loads(made.stdout)
    shown = cli(broker_process, "show", ctx["id"]).stdout.splitlines()
    assert "domain      cloud.example.org" in shown
    assert "pattern     w-*.cloud.example.org" in shown
    assert "reserved    localhost, head.cloud.example.org, 10.1.0.1" in shown
    assert "max members 2" in shown and "join rate   5/s" in shown
    assert "local addr  loopback taken" in shown
    node = NodeClient(ctx["uri"], ctx["key"], ctx["secret"], ca=broker_process.cert)
    with pytest.raises(ContextError) as err:
        node.join({**node_info("w-1"), "hostname": "w-1.cluster.example.org"})
    assert err.value.status == 422
    node.join({**node_info("w-1"), "hostname": "w-1.cloud.example.org", "address": "127.0.0.5"})

    bad = cli(broker_process, "create", "x", "--reserve", "not a name")
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "error: reserved.0: 'not a name' is not a host name (letters, digits and inner "
        "hyphens, dot-separated labels of 1-63 characters, 253 in all)"
    )


def test_context_commands_against_a_running_broker(broker_process: BrokerProcess) -> None:
    made = cli(broker_process, "create", "site-a", "--json")
    assert made.returncode == 0, made.stderr
    ctx = json.loads(made.stdout)
    assert ctx["uri"] == f"{broker_process.url}/ctx/{ctx['id']}" and ctx["name"] == "site-a"

    plain = cli(broker_process, "create", "site-b")
    assert plain.returncode == 0
    first = plain.stdout.splitlines()[0]
    assert first.startswith("context ") and first.endswith(" created")
    assert any(line.strip().startswith("secret ") for line in plain.stdout.splitlines())

    nodes = [
        NodeClient(ctx["uri"], ctx["key"], ctx["secret"], ca=broker_process.cert) for _ in range(3)
    ]
    for n, node in enumerate(nodes, start=1):
        node.join(node_info(f"w{n}", n))

    shown = cli(broker_process, "show", ctx["id"])
    assert shown.returncode == 0
    assert f"uri         {ctx['uri']}" in shown.stdout.splitlines()
    assert "members     3" in shown.stdout.splitlines()
    assert "last entry  3" in shown.stdout.splitlines()
    assert "rejoin      refused while held" in shown.stdout.splitlines()
    assert "local addr  refused" in shown.stdout.splitlines()

    listed = cli(broker_process, "list")
    assert listed.returncode == 0 and ctx["id"] in listed.stdout and "site-b" in listed.stdout

    members = cli(broker_process, "members", ctx["id"])
    assert members.returncode == 0
    assert "3 members, last entry 3" in members.stdout
    row = next(line for line in members.stdout.splitlines() if str(nodes[0].node_id) in line)
    assert "w1.cluster.example.org" in row and "10.0.0.1" in row and "ssh-ed25519" in row

    gone = cli(broker_process, "remove-node", ctx["id"], nodes[1].node_id or "")
    assert gone.returncode == 0
    assert gone.stdout.strip() == f"{nodes[1].node_id} removed from {ctx['id']} (entry 4)"
    by_host = cli(broker_process, "remove-node", ctx["id"], "w3", "--host")
    assert by_host.stdout.strip() == f"w3 removed from {ctx['id']} (entry 5)"
    assert [e.op for e in nodes[0].updates(since=3).entries] == ["leave", "leave"]

    again = cli(broker_process, "remove-node", ctx["id"], "w3", "--host")
    assert again.returncode == 2
    assert (
        again.stderr.strip()
        == f"error: the broker answered 404: no current member named w3 in {ctx['id']}"
    )

    deleted = cli(broker_process, "delete", ctx["id"])
    assert deleted.returncode == 0 and deleted.stdout.strip() == f"context {ctx['id']} deleted"
    with pytest.raises(ContextError) as err:
        nodes[0].members()
    assert err.value.status == 401


def test_context_commands_fail_with_one_clear_line(
    broker_process: BrokerProcess, tmp_path: Path
) -> None:
    no_token = cli(broker_process, "list", token=False)
    assert no_token.returncode == 2
    assert no_token.stderr.startswith("error: no admin token: pass --token-file FILE")
    wrong = tmp_path / "wrong.token"
    wrong.write_text("not-the-token-at-all\n")
    bad = run_command(
        "context", "list", "--broker", broker_process.url, "--ca", str(broker_process.cert),
        "--token-file", str(wrong), timeout=60, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip() == "error: the broker answered 401: invalid or missing credentials"
    missing = cli(broker_process, "show", "0123456789abcdef")
    assert missing.returncode == 2 and "404: no context 0123456789abcdef" in missing.stderr
    broker_process.kill()
    down = cli(broker_process, "list")
    assert down.returncode == 2 and len(down.stderr.strip().splitlines()) == 1
    assert down.stderr.startswith(f"error: no answer from the broker at {broker_process.url}")


def test_broker_refuses_half_a_certificate(tmp_path: Path) -> None:
    out = run_command("broker", "--state-dir", str(tmp_path), "--port", str(free_port()),
                      "--cert", str(tmp_path / "c.pem"), timeout=60)  # fmt: skip
    assert out.returncode == 2
    assert "give both --cert and --key" in out.stderr


def test_insecure_http_only_when_asked(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "state", free_port(), extra=("--insecure-http",))
    broker.proc = subprocess.Popen(
        [sys.executable, "-m", "elasticsite", "broker", "--state-dir", str(broker.state_dir),
         "--port", str(broker.port), "--insecure-http"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "ELASTICSITE_BROKER_TOKEN": "a-token-of-plenty-characters"},
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{broker.port}"
        client = AdminClient(url, "a-token-of-plenty-characters")
        for _ in range(300):
            try:
                ctx = client.create("plain")
                break
            except BrokerUnavailable:
                time.sleep(0.1)
        else:
            pytest.fail("plain-HTTP broker did not answer")
        assert ctx.uri.startswith("http://")
        assert not (broker.state_dir / "broker.crt").exists()
    finally:
        out, _ = broker.terminate()
    assert "plain HTTP" in out


def test_node_client_pins_the_certificate_from_user_data_pem(
    broker_process: BrokerProcess,
) -> None:
    with broker_process.admin() as admin:
        ctx = admin.create()
    pem = broker_process.cert.read_text()
    node = NodeClient(ctx.uri, ctx.key, ctx.secret, ca=pem)
    assert node.join(node_info("w1", 1)).entry_id == 1
    untrusting = NodeClient(ctx.uri, ctx.key, ctx.secret)
    with pytest.raises(BrokerUnavailable) as err:
        untrusting.members()
    assert err.value.status is None and "certificate" in err.value.detail.lower()


def test_context_uris_are_checked() -> None:
    assert split_context_uri("https://b.example:8443/ctx/abc") == ("https://b.example:8443", "abc")
    assert split_context_uri("https://b.example/prefix/ctx/abc/") == (
        "https://b.example/prefix",
        "abc",
    )
    for bad in ("ftp://b/ctx/abc", "https://b.example/ctx/", "https://b.example/nodes/abc"):
        with pytest.raises(ContextError, match="is not a context URI"):
            split_context_uri(bad)


def test_broker_says_so_when_its_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_command("broker", "--state-dir", str(tmp_path), "--port", str(port),
                          timeout=60)  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().endswith(
        f"error: the broker could not listen on 127.0.0.1:{port} (see the log above)"
    )


def test_self_signed_certificate_names_the_host_and_loopbacks(tmp_path: Path) -> None:
    cert_path, key_path = ensure_certificate(tmp_path, ["10.1.2.3", "broker.example.org"])
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    names = set(sans.get_values_for_type(x509.DNSName))
    assert {"127.0.0.1", "::1", "10.1.2.3"} <= ips
    assert {"broker.example.org", "localhost", socket.gethostname()} <= names
    assert ensure_certificate(tmp_path) == (cert_path, key_path)  # made once, then kept
    assert cert_path.read_bytes() == cert.public_bytes(serialization.Encoding.PEM)
    assert len(fingerprint(cert_path).split(":")) == 32


def test_async_node_client_joins_polls_and_leaves(live_broker: LiveBroker) -> None:
    with live_broker.admin() as admin:
        ctx = admin.create()

    async def scenario() -> list[tuple[int, str]]:
        async with (
            AsyncNodeClient(ctx.uri, ctx.key, ctx.secret, ca=live_broker.cert) as a,
            AsyncNodeClient(ctx.uri, ctx.key, ctx.secret, ca=live_broker.cert) as b,
        ):
            await a.join(node_info("a", 1))
            waiting = asyncio.create_task(a.updates(since=1, wait=20))
            await asyncio.sleep(0.2)
            await b.join(node_info("b", 2))
            first = await waiting
            await b.leave()
            rest = await a.updates(since=first.last_id)
            members = await a.members()
            assert [m.short_hostname for m in members.members] == ["a"]
            return [(e.id, e.op) for e in first.entries + rest.entries]

    assert asyncio.run(scenario()) == [(2, "join"), (3, "leave")]


def test_async_polls_survive_a_broker_restart(live_broker: LiveBroker) -> None:
    """The async client's kept-alive polling connection is replaced after a restart,
    and while the broker is down it says so as BrokerUnavailable."""
    with live_broker.admin() as admin:
        ctx = admin.create()

    async def before() -> int:
        await poller.join(node_info("a", 1))
        return (await poller.updates(since=0)).last_id

    async def while_down() -> None:
        with pytest.raises(BrokerUnavailable):
            await poller.updates(since=1)

    async def after(since: int) -> list[tuple[int, str]]:
        got = await poller.updates(since=since)
        return [(e.id, e.node.short_hostname) for e in got.entries]

    poller = AsyncNodeClient(ctx.uri, ctx.key, ctx.secret, ca=live_broker.cert)
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(before()) == 1
        live_broker.stop(force=True)
        loop.run_until_complete(while_down())
        live_broker.start()
        live_broker.node(ctx).join(node_info("b", 2))
        assert loop.run_until_complete(after(1)) == [(2, "b")]
        live_broker.stop(force=True)  # the kept-alive connection goes stale
        live_broker.start()
        live_broker.node(ctx).join(node_info("c", 3))
        assert loop.run_until_complete(after(2)) == [(3, "c")]
        loop.run_until_complete(poller.aclose())
    finally:
        loop.close()


def test_members_show_a_nodes_free_text_as_it_is(broker_process: BrokerProcess) -> None:
    ctx = json.loads(cli(broker_process, "create", "site-c", "--json").stdout)
    node = NodeClient(ctx["uri"], ctx["key"], ctx["secret"], ca=broker_process.cert)
    node.join(node_info("w1", 1, data="[red]gpu[/red] :cd:"))
    shown = cli(broker_process, "members", ctx["id"])
    assert shown.returncode == 0, shown.stderr
    assert "[red]gpu[/red] :cd:" in shown.stdout
