"""A joined worker holding the context key tries to make its record alias another
member's, over real HTTPS: names that are IP literals in some notation, addresses in
another notation, clashes across kinds, addresses that reach only this host."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticsite.context.admission import BrokerLimits, Refused, admit
from elasticsite.context.applying import ScriptRunner, Step
from elasticsite.context.client import ContextError
from elasticsite.context.models import ContextCreated, NodeIn, NodeInfo
from elasticsite.context.store import Store
from elasticsite.context.validation import check_hostname, check_ssh_key, numeric_label

from .conftest import LiveBroker, create_context, member_names, node_info, raw, ssh_key


def post(broker: LiveBroker, ctx: ContextCreated, body: dict[str, str]) -> tuple[int, str]:
    with raw(broker) as http:
        r = http.post(f"/ctx/{ctx.id}/nodes", auth=(ctx.key, ctx.secret), json=body)
    return r.status_code, str(r.json().get("detail", ""))


NUMERIC_NAMES = [
    # What inet_aton, ping or ssh read as an IPv4 address.
    "10",
    "4294967295",
    "0x64",
    "010",
    "127.1",
    "0x7f.1",
    "10.0.0.1",
    # What awk, strtod or Python read as a number (awk compares 100 and 1e2 equal).
    "1e2",
    "1e-2",
    "0x1p3",
    "inf",
    "nan",
    # A numeric label anywhere, the top one above all.
    "w1.123",
    "w1.1e2.example.org",
]


@pytest.mark.parametrize("hostname", NUMERIC_NAMES)
def test_a_name_is_never_a_number_or_an_ip_literal(live_broker: LiveBroker, hostname: str) -> None:
    ctx = create_context(live_broker)
    body = {**node_info("w1"), "hostname": hostname, "short_hostname": hostname.split(".")[0]}
    status, detail = post(live_broker, ctx, body)
    assert status == 422, detail
    assert detail.startswith(("hostname: ", "short_hostname: ")), detail
    assert "reads as a number" in detail
    assert member_names(live_broker, ctx) == []


def test_the_name_rule_is_precise() -> None:
    for label in ("10", "010", "0x", "0x64", "0xcafe", "1e2", "1e-2", "0x1p-3", "inf", "nan"):
        assert numeric_label(label), label
    for label in ("w1", "e5", "1e", "x10", "0xg", "1e2x", "1-2", "infinite", "nano", "a1e2"):
        assert not numeric_label(label), label
    assert check_hostname("W-1.Cluster1.Example.ORG") == "w-1.cluster1.example.org"
    assert check_hostname("ip-10-0-0-5.ec2.internal") == "ip-10-0-0-5.ec2.internal"
    assert check_hostname("0xg.example.org") == "0xg.example.org"


def test_an_ipv4_mapped_address_is_its_ipv4_address(live_broker: LiveBroker) -> None:
    ctx = create_context(live_broker, reserved=["10.0.0.254"])
    live_broker.node(ctx).join(node_info("w1", 5))
    for address, status, start in [
        ("::ffff:10.0.0.5", 409, "address: '10.0.0.5' is held by a current member"),
        ("0:0:0:0:0:ffff:a00:5", 409, "address: '10.0.0.5' is held by a current member"),
        ("::FFFF:10.0.0.254", 422, "address: '10.0.0.254' is reserved in this context"),
    ]:
        got = post(live_broker, ctx, {**node_info("w2", 2), "address": address})
        assert got[0] == status and got[1].startswith(start), got
    # Accepted records are stored in the one canonical form.
    live_broker.node(ctx).join({**node_info("w3", 3), "address": "::ffff:10.0.0.7"})
    live_broker.node(ctx).join({**node_info("w4", 4), "address": "FD00:0:0:0:0:0:0:0001"})
    assert member_names(live_broker, ctx) == [
        ("w1.cluster.example.org", "10.0.0.5"),
        ("w3.cluster.example.org", "10.0.0.7"),
        ("w4.cluster.example.org", "fd00::1"),
    ]
    got = post(live_broker, ctx, {**node_info("w5", 5), "address": "fd00::0:1"})
    assert got[0] == 409, got


def test_a_member_cannot_update_itself_onto_another_address_notation(
    live_broker: LiveBroker,
) -> None:
    ctx = create_context(live_broker)
    live_broker.node(ctx).join(node_info("w1", 1))
    attacker = live_broker.node(ctx)
    attacker.join(node_info("w2", 2))
    with pytest.raises(ContextError) as err:
        attacker.update({**node_info("w2", 2), "address": "::ffff:10.0.0.1"})
    assert err.value.status == 409
    assert member_names(live_broker, ctx)[1] == ("w2.cluster.example.org", "10.0.0.2")


def test_names_and_addresses_share_one_namespace(tmp_path: Path) -> None:
    """A record an older broker took (a host name that is an address) still blocks
    that address, and its address blocks the name: clashes are checked across kinds."""
    store = Store(tmp_path / "b.sqlite3")
    ctx, _, _ = store.create_context("legacy")
    legacy = NodeIn.model_construct(
        short_hostname="10",
        hostname="10.0.0.9",
        address="::ffff:10.0.0.8",
        ssh_host_key=ssh_key("legacy"),
        data="",
    )
    store.join(ctx, legacy)
    limits = BrokerLimits()
    for clash in (
        {**node_info("w1", 1), "address": "10.0.0.9"},  # the legacy member's host name
        {**node_info("w1", 8)},  # its address, stored in another notation
    ):
        node = NodeIn.model_validate(clash)
        with pytest.raises(Refused) as err:
            admit(ctx, node, 100, limits, 0.0)
        assert err.value.status == 409 and "is held by a current member" in err.value.detail
    store.close()


@pytest.mark.parametrize(
    ("address", "scope"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
    ],
)
def test_loopback_and_link_local_addresses_need_the_contexts_consent(
    live_broker: LiveBroker, address: str, scope: str
) -> None:
    strict = create_context(live_broker)
    status, detail = post(live_broker, strict, {**node_info("w1"), "address": address})
    assert status == 422
    assert detail.startswith(f"address: {address.replace('::ffff:', '')} is a {scope} address")
    option = "allow_loopback" if scope == "loopback" else "allow_link_local"
    lenient = create_context(live_broker, **{option: True})
    assert post(live_broker, lenient, {**node_info("w1"), "address": address})[0] == 201
    with live_broker.admin() as admin:
        assert getattr(admin.show(lenient.id), option) is True


@pytest.mark.parametrize("address", ["255.255.255.255", "0.0.0.0", "0.1.2.3", "224.0.0.1", "::"])
def test_no_context_takes_broadcast_unspecified_or_multicast(
    live_broker: LiveBroker, address: str
) -> None:
    ctx = create_context(live_broker, allow_loopback=True, allow_link_local=True)
    status, detail = post(live_broker, ctx, {**node_info("w1"), "address": address})
    assert status == 422 and detail.startswith("address: "), detail


def test_an_ssh_key_comment_is_one_short_field(live_broker: LiveBroker) -> None:
    ctx = create_context(live_broker)
    for comment in ("root@w1 and more", "x" * 65, "root@w1\u00a0x", "a,b", "(x)"):
        body = {**node_info("w1"), "ssh_host_key": ssh_key("w1", comment)}
        status, detail = post(live_broker, ctx, body)
        assert status == 422 and detail.startswith("ssh_host_key: "), (comment, detail)
    fine = ssh_key("w1", "root@w1.cluster-1.example.org")
    assert check_ssh_key(fine) == fine
    assert check_ssh_key(ssh_key("w1", "x" * 64)).endswith(" " + "x" * 64)
    assert post(live_broker, ctx, {**node_info("w1"), "ssh_host_key": fine})[0] == 201


def test_the_agent_checks_an_older_brokers_records_by_todays_rules(tmp_path: Path) -> None:
    """Records an older broker kept reach the scripts only as today's broker would take
    them: a numeric name runs no script; a key comment of several words is dropped."""
    out = tmp_path / "args"
    script = tmp_path / "s/add/x"
    script.parent.mkdir(parents=True)
    script.write_text(
        f'#!/bin/sh\nprintf "%s|%s\\n" "$2" "$ELASTICSITE_NODE_SSH_HOST_KEY" >>{out}\n'
    )
    script.chmod(0o755)
    runner = ScriptRunner(tmp_path / "s", context_uri="u", root=tmp_path, self_hostname="h")
    old = NodeInfo(**{**node_info("w1"), "node_id": "n1", "joined_at": 1.0})
    worded = old.model_copy(update={"ssh_host_key": ssh_key("w1", "root@w1 spare key")})
    numeric = old.model_copy(update={"hostname": "100", "short_hostname": "100"})
    assert runner.run("add", Step("add", worded, 1)) == 0
    assert runner.run("add", Step("add", numeric, 2)) == 1
    assert out.read_text() == f"w1.cluster.example.org|{ssh_key('w1')}\n"
