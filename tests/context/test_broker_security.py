"""What a node holding a context's key (or nothing at all) tries against the broker,
over real HTTPS: injecting lines into other nodes' files, evicting or impersonating a
member, taking reserved names, flooding a context, crashing a handler."""

from __future__ import annotations

import base64
import hashlib
import logging
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from elasticsite.context.client import ContextError
from elasticsite.context.hostkey import sign_challenge

from .conftest import (
    TOKEN,
    LiveBroker,
    create_context,
    free_port,
    member_names,
    node_info,
    raw,
    ssh_key,
)

ADMIN = {"Authorization": f"Bearer {TOKEN}"}


INJECTIONS = [
    # The address validator took any IPv6 scope id, newlines included.
    ("address", "fe80::1%eth0\n10.6.6.6 head.cluster.example.org"),
    ("address", "fe80::1%eth0"),
    ("address", "[::1]"),
    ("address", "10.0.0.0/8"),
    ("address", " 10.0.0.1"),
    ("address", "0.0.0.0"),
    ("address", "ff02::1"),
    # Escapes that awk -v would expand, and plain control characters.
    ("hostname", "w1.cluster.example.org\\n10.6.6.6 head"),
    ("hostname", "w1.cluster.example.org\n10.6.6.6 head"),
    ("hostname", "w1.cluster.example.org head"),
    ("hostname", "-w1.cluster.example.org"),
    ("short_hostname", "w1\t"),
    # One key a field: no second line, no marker, no options, a parseable key.
    ("ssh_host_key", ssh_key("a") + "\n@cert-authority * " + ssh_key("b")),
    ("ssh_host_key", "@cert-authority * " + ssh_key("b")),
    ("ssh_host_key", 'command="sh" ' + ssh_key("b")),
    ("ssh_host_key", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI0000"),
    ("ssh_host_key", "ssh-dss AAAAB3NzaC1kc3MAAACBAP"),
    ("ssh_host_key", ssh_key("a", "root@w1\\n@cert-authority")),
    ("ssh_host_key", ssh_key("a", "root@w1\u2028@revoked")),
    ("data", "slots=4\nrogue line"),
    ("data", "bidi\u202eoverride"),
]


@pytest.mark.parametrize(("field", "value"), INJECTIONS)
def test_injection_attempts_get_422_naming_the_field(
    live_broker: LiveBroker, field: str, value: str
) -> None:
    ctx = create_context(live_broker)
    with raw(live_broker) as http:
        r = http.post(
            f"/ctx/{ctx.id}/nodes",
            auth=(ctx.key, ctx.secret),
            json={**node_info("w1"), field: value},
        )
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(f"{field}: "), r.json()
    assert member_names(live_broker, ctx) == []


def test_accepted_records_are_normalised(live_broker: LiveBroker) -> None:
    ctx = create_context(live_broker)
    node = live_broker.node(ctx)
    body = {
        **node_info("w1"),
        "hostname": "W1.Cluster.Example.ORG",
        "short_hostname": "W1",
        "address": "FD00:0:0::1",
    }
    node.join(body)
    me = node.members().members[0]
    assert (me.hostname, me.short_hostname, me.address) == (
        "w1.cluster.example.org",
        "w1",
        "fd00::1",
    )
    with raw(live_broker) as http:
        r = http.post(
            f"/ctx/{ctx.id}/nodes",
            auth=(ctx.key, ctx.secret),
            json={**node_info("w2", 2), "short_hostname": "head"},
        )
    assert r.status_code == 422
    assert r.json()["detail"] == (
        "record: short_hostname 'head' must be the first label of hostname 'w2.cluster.example.org'"
    )


def test_a_join_cannot_evict_or_impersonate_a_member(live_broker: LiveBroker) -> None:
    ctx = create_context(live_broker)
    victim = live_broker.node(ctx)
    victim.join(node_info("w1", 1))
    attacker = live_broker.node(ctx)
    for clash in (
        node_info("w1", 9),  # its host name
        {**node_info("w1", 9), "hostname": "w1.elsewhere.example.org"},  # its short name
        {**node_info("w9", 1)},  # its address
    ):
        with pytest.raises(ContextError) as err:
            attacker.join(clash)
        assert err.value.status == 409
        assert "is held by a current member" in err.value.detail
    assert member_names(live_broker, ctx) == [("w1.cluster.example.org", "10.0.0.1")]
    assert victim.updates(since=0).last_id == 1  # nothing was recorded


def test_a_member_cannot_rename_itself_over_another(live_broker: LiveBroker) -> None:
    ctx = create_context(live_broker)
    victim, attacker = live_broker.node(ctx), live_broker.node(ctx)
    victim.join(node_info("w1", 1))
    attacker.join(node_info("w2", 2))
    with pytest.raises(ContextError) as err:
        attacker.update(node_info("w1", 2))
    assert err.value.status == 409
    with pytest.raises(ContextError) as err:
        attacker.update(node_info("w2", 1))  # the victim's address
    assert err.value.status == 409
    assert attacker.update(node_info("w2", 3)) == 4  # its own record, a new address
    assert sorted(member_names(live_broker, ctx)) == [
        ("w1.cluster.example.org", "10.0.0.1"),
        ("w2.cluster.example.org", "10.0.0.3"),
    ]


def test_a_member_can_neither_remove_nor_update_another(live_broker: LiveBroker) -> None:
    ctx = create_context(live_broker)
    victim, attacker = live_broker.node(ctx), live_broker.node(ctx)
    victim.join(node_info("w1", 1))
    attacker.join(node_info("w2", 2))
    auth = (attacker.node_id or "", attacker.node_secret or "")
    with raw(live_broker) as http:
        path = f"/ctx/{ctx.id}/nodes/{victim.node_id}"
        assert http.delete(path, auth=auth).status_code == 401
        assert http.put(path, auth=auth, json=node_info("w1", 7)).status_code == 401
        assert http.put(path, auth=(ctx.key, ctx.secret), json=node_info("w1", 7)).status_code == (
            401
        )
        assert http.delete(f"/ctx/{ctx.id}/hosts/w1", auth=auth).status_code == 401
    assert len(member_names(live_broker, ctx)) == 2


def test_reserved_names_and_addresses_are_refused(live_broker: LiveBroker) -> None:
    ctx = create_context(live_broker, reserved=["head.cluster.example.org", "10.0.0.254"])
    node = live_broker.node(ctx)
    for body, detail in [
        (
            {**node_info("x"), "hostname": "localhost", "short_hostname": "localhost"},
            "hostname: 'localhost' is reserved in this context",
        ),
        (node_info("head"), "hostname: 'head.cluster.example.org' is reserved in this context"),
        (
            {**node_info("head"), "hostname": "head.other.example.org"},
            "short_hostname: 'head' is reserved in this context",
        ),
        (node_info("w1", 254), "address: '10.0.0.254' is reserved in this context"),
    ]:
        with pytest.raises(ContextError) as err:
            node.join(body)
        assert (err.value.status, err.value.detail) == (422, detail)
    assert member_names(live_broker, ctx) == []


def test_domain_and_pattern_bound_the_names(live_broker: LiveBroker) -> None:
    ctx = create_context(
        live_broker, domain="cluster.example.org", host_pattern="w-*.cluster.example.org"
    )
    node = live_broker.node(ctx)
    with pytest.raises(ContextError) as err:
        node.join({**node_info("w-1"), "hostname": "w-1.evil.example.org"})
    assert err.value.detail == (
        "hostname: 'w-1.evil.example.org' is not in this context's domain cluster.example.org"
    )
    with pytest.raises(ContextError) as err:
        node.join(node_info("x1"))
    assert err.value.detail == (
        "hostname: 'x1.cluster.example.org' does not match this context's pattern "
        "'w-*.cluster.example.org'"
    )
    node.join(node_info("w-1"))
    with live_broker.admin() as admin:
        shown = admin.show(ctx.id)
    assert (shown.domain, shown.host_pattern) == ("cluster.example.org", "w-*.cluster.example.org")


def test_bind_address_ties_a_record_to_where_it_came_from(live_broker: LiveBroker) -> None:
    ctx = create_context(live_broker, bind_address=True, allow_loopback=True)
    node = live_broker.node(ctx)
    with pytest.raises(ContextError) as err:
        node.join(node_info("w1", 1))
    assert (err.value.status, err.value.detail) == (
        422,
        "address: 10.0.0.1 is not the address this request came from (127.0.0.1), "
        "as this context requires",
    )
    node.join({**node_info("w1"), "address": "127.0.0.1"})
    with pytest.raises(ContextError) as err:
        node.update({**node_info("w1"), "address": "10.6.6.6"})
    assert err.value.status == 422


def test_replace_on_rejoin_needs_the_same_host_key(live_broker: LiveBroker) -> None:
    ctx = create_context(live_broker, replace_on_rejoin=True)
    first = live_broker.node(ctx)
    first.join(node_info("w1", 1))
    impostor = live_broker.node(ctx)
    forged = {**node_info("w1", 1), "ssh_host_key": ssh_key("someone else")}
    with pytest.raises(ContextError) as err:
        impostor.join(forged)
    assert err.value.status == 409 and err.value.challenge is None
    again = live_broker.node(ctx)  # the same machine, its credential lost
    with pytest.raises(ContextError) as err:
        again.join(node_info("w1", 1))
    assert err.value.status == 409 and err.value.challenge is not None
    private = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"w1-1").digest())
    key_file = live_broker.state_dir.parent / "ssh_host_ed25519_key"
    key_file.write_bytes(private.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()))
    proof = sign_challenge(err.value.challenge, node_info("w1", 1)["ssh_host_key"], [key_file])
    assert proof is not None
    assert again.join({**node_info("w1", 1), "proof": proof.model_dump()}).entry_id == 3
    assert [(e.op, e.node.node_id) for e in again.updates(since=1).entries] == [
        ("leave", first.node_id),
        ("join", again.node_id),
    ]
    with pytest.raises(ContextError) as err:
        first.updates(since=0)
    assert err.value.status == 401


def test_a_context_is_bounded_in_members_bytes_and_join_rate(live_broker: LiveBroker) -> None:
    small = create_context(live_broker, max_members=3)
    for n in range(1, 4):
        live_broker.node(small).join(node_info(f"w{n}", n))
    with pytest.raises(ContextError) as err:
        live_broker.node(small).join(node_info("w4", 4))
    assert (err.value.status, err.value.detail) == (
        409,
        "the context is full: it holds its limit of 3 members",
    )

    slow = create_context(live_broker, join_rate=0.5, join_burst=2)
    live_broker.node(slow).join(node_info("w1", 1))
    live_broker.node(slow).join(node_info("w2", 2))
    with raw(live_broker) as http:
        r = http.post(
            f"/ctx/{slow.id}/nodes", auth=(slow.key, slow.secret), json=node_info("w3", 3)
        )
    assert r.status_code == 429
    assert r.headers["Retry-After"] == "2"
    assert r.json()["detail"].startswith("too many joins in this context; retry in ")
    assert len(member_names(live_broker, slow)) == 2


def test_member_bytes_are_bounded(tmp_path: Path) -> None:
    from elasticsite.context.admission import BrokerLimits

    broker = LiveBroker(tmp_path / "state", free_port())
    broker.limits = BrokerLimits(max_member_bytes=4 * 1024)
    broker.start()
    try:
        ctx = create_context(broker)
        joined = 0
        with pytest.raises(ContextError) as err:
            for n in range(1, 20):
                broker.node(ctx).join(node_info(f"w{n}", n, data="x" * 1000))
                joined += 1
        assert err.value.status == 409
        assert err.value.detail == "the context is full: its members' records reach 4096 bytes"
        assert 2 <= joined <= 3
    finally:
        broker.stop()


@pytest.mark.parametrize(
    "header",
    [
        "Basic " + "é" * 12,  # not ASCII: raised ValueError inside the handler
        "Basic ✓✓✓✓",
        "Basic " + base64.b64encode(b"\xff\xfe:\xff").decode(),  # not UTF-8 inside
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "Basic",
        "Bearer",
        "Bearer é",
        "Digest x",
    ],
)
def test_every_malformed_credential_gets_401(live_broker: LiveBroker, header: str) -> None:
    ctx = create_context(live_broker)
    raw_header = header.encode("utf-8")
    with raw(live_broker) as http:
        for method, path in [
            ("GET", f"/ctx/{ctx.id}/updates?since=0"),
            ("GET", f"/ctx/{ctx.id}/updates?since=0&wait=0.1"),
            ("GET", f"/ctx/{ctx.id}/members"),
            ("POST", f"/ctx/{ctx.id}/nodes"),
            ("PUT", f"/ctx/{ctx.id}/nodes/0000000000000000"),
            ("DELETE", f"/ctx/{ctx.id}/nodes/0000000000000000"),
            ("GET", "/ctx"),
        ]:
            r = http.request(
                method, path, headers=[(b"Authorization", raw_header)], json=node_info("x")
            )
            assert r.status_code == 401, (method, path, r.text)


def test_context_names_hold_no_control_characters_and_logs_are_escaped(
    live_broker: LiveBroker, caplog: pytest.LogCaptureFixture
) -> None:
    with raw(live_broker) as http:
        r = http.post("/ctx", headers=ADMIN, json={"name": "site\nINFO forged line"})
        assert r.status_code == 422 and r.json()["detail"].startswith("name: ")
    from elasticsite.logs import EscapeControl

    record = logging.LogRecord("x", logging.INFO, __file__, 1, "joined %s", ("a\nb\x1b[31m",), None)
    assert EscapeControl().filter(record)
    assert record.getMessage() == "joined a\\nb\\x1b[31m"
