"""Replace-on-rejoin asks for proof of the SSH host *private* key, over real HTTPS.

Every member can read every member's public host key, so a joined worker holding
the context key tries to replace a member by presenting it, by replaying a proof,
by answering a challenge of another context, name or time; the genuine machine, and
its agent, prove their key and replace their old record.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from elasticsite.clouds.local_agent import host_key
from elasticsite.context import hostkey
from elasticsite.context.agent import Agent, AgentSettings, configure
from elasticsite.context.client import ContextError, NodeClient
from elasticsite.context.models import ContextCreated, ContextPolicy

from .conftest import LiveBroker, node_info, raw, run_agent_once, write_userdata

KEYS: dict[str, Callable[[], hostkey.PrivateKey]] = {
    "ed25519": ed25519.Ed25519PrivateKey.generate,
    "nistp256": lambda: ec.generate_private_key(ec.SECP256R1()),
    "nistp384": lambda: ec.generate_private_key(ec.SECP384R1()),
    "nistp521": lambda: ec.generate_private_key(ec.SECP521R1()),
    "rsa": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
}


def public_line(key: hostkey.PrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )


def signed(challenge: dict[str, str], key: hostkey.PrivateKey) -> dict[str, str]:
    """The documented message, byte for byte, signed with ``key``."""
    data = b"elasticsite-rejoin-v1\0%s\0%s\0%s" % (
        challenge["nonce"].encode(),
        challenge["context_id"].encode(),
        challenge["hostname"].encode(),
    )
    signature = base64.b64encode(hostkey.sign(key, data)).decode()
    return {"nonce": challenge["nonce"], "signature": signature}


def create(broker: LiveBroker, **policy: object) -> ContextCreated:
    with broker.admin() as admin:
        return admin.create("rejoin", ContextPolicy.model_validate(policy))


def post(broker: LiveBroker, ctx: ContextCreated, body: dict[str, Any]) -> tuple[int, Any]:
    with raw(broker) as http:
        r = http.post(f"/ctx/{ctx.id}/nodes", auth=(ctx.key, ctx.secret), json=body)
    return r.status_code, r.json()


def member_ids(broker: LiveBroker, ctx: ContextCreated) -> list[str]:
    with broker.admin() as admin:
        return [m.node_id for m in admin.members(ctx.id).members]


def test_presenting_a_members_public_key_is_not_proof(live_broker: LiveBroker) -> None:
    ctx = create(live_broker, replace_on_rejoin=True)
    victim_key = ed25519.Ed25519PrivateKey.generate()
    victim = live_broker.node(ctx)
    victim.join({**node_info("w1", 1), "ssh_host_key": public_line(victim_key)})
    # The impostor reads the victim's record, public key included, and presents it.
    record = victim.members().members[0].model_dump(exclude={"node_id", "joined_at"})
    status, answer = post(live_broker, ctx, record)
    assert status == 409
    challenge = answer["challenge"]
    assert (challenge["context_id"], challenge["hostname"]) == (ctx.id, "w1.cluster.example.org")
    assert 0 < challenge["expires_in"] <= 60
    # Signing with any key but the victim's does not verify.
    forged = signed(challenge, ed25519.Ed25519PrivateKey.generate())
    status, answer = post(live_broker, ctx, {**record, "proof": forged})
    assert status == 409
    assert "the signature does not verify with the SSH host key presented" in answer["detail"]
    assert member_ids(live_broker, ctx) == [victim.node_id]
    assert victim.updates(since=0).last_id == 1  # nothing was recorded


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_the_machine_holding_the_host_key_replaces_its_old_record(
    live_broker: LiveBroker, kind: str
) -> None:
    ctx = create(live_broker, replace_on_rejoin=True)
    key = KEYS[kind]()
    record = {**node_info("w1", 1), "ssh_host_key": public_line(key)}
    first = live_broker.node(ctx)
    first.join(record)
    status, answer = post(live_broker, ctx, record)  # the credential was lost
    assert status == 409
    proof = signed(answer["challenge"], key)
    status, answer = post(live_broker, ctx, {**record, "proof": proof})
    assert status == 201, answer
    assert member_ids(live_broker, ctx) == [answer["node_id"]]
    with pytest.raises(ContextError) as err:  # the old credential went with the old record
        first.updates(since=0)
    assert err.value.status == 401
    # The proof is single-use: replayed, it replaces nothing.
    status, again = post(live_broker, ctx, {**record, "proof": proof})
    assert status == 409
    assert "no current challenge for this host name" in again["detail"]
    assert member_ids(live_broker, ctx) == [answer["node_id"]]


def test_a_challenge_holds_for_one_context_one_name_and_one_minute(
    live_broker: LiveBroker,
) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    record = {**node_info("w1", 1), "ssh_host_key": public_line(key)}
    here, there = (create(live_broker, replace_on_rejoin=True) for _ in range(2))
    for ctx in (here, there):
        live_broker.node(ctx).join(record)
    challenge = post(live_broker, here, record)[1]["challenge"]
    # Another context: its challenges are its own (and the message names the context).
    status, answer = post(live_broker, there, {**record, "proof": signed(challenge, key)})
    assert status == 409 and "no current challenge" in answer["detail"]
    # Another name (clashing on the address only): the nonce was for w1's name.
    renamed = {**record, "hostname": "w9.cluster.example.org", "short_hostname": "w9"}
    status, answer = post(live_broker, here, {**renamed, "proof": signed(challenge, key)})
    assert status == 409 and "no current challenge" in answer["detail"]
    assert answer["challenge"]["hostname"] == "w9.cluster.example.org"

    # Time passes on the broker's clock: an answer after a minute is refused.
    assert live_broker.server is not None
    broker = live_broker.server.config.app.state.broker
    now = [1000.0]
    broker.clock = lambda: now[0]
    challenge = post(live_broker, here, record)[1]["challenge"]
    now[0] += 60.0
    status, answer = post(live_broker, here, {**record, "proof": signed(challenge, key)})
    assert status == 409 and "(the challenge expired)" in answer["detail"]
    status, answer = post(live_broker, here, {**record, "proof": signed(answer["challenge"], key)})
    assert status == 201, answer


def test_host_key_signatures_verify_only_for_their_key_and_message() -> None:
    data = hostkey.message("n0nce", "0123456789abcdef", "w1.example.org")
    assert data == b"elasticsite-rejoin-v1\x00n0nce\x000123456789abcdef\x00w1.example.org"
    for make in KEYS.values():
        key = make()
        good = base64.b64encode(hostkey.sign(key, data)).decode()
        assert hostkey.verify(public_line(key) + " root@w1", data, good)
        assert not hostkey.verify(public_line(key), data + b"x", good)
        assert not hostkey.verify(public_line(KEYS["ed25519"]()), data, good)
        assert not hostkey.verify(public_line(key), data, "not base64!")
        assert not hostkey.verify(public_line(key), data, base64.b64encode(b"\0" * 64).decode())


def agent_settings(
    broker: LiveBroker, ctx: ContextCreated, tmp_path: Path, root: Path
) -> AgentSettings:
    userdata = write_userdata(tmp_path / "userdata.json", broker, ctx)
    (tmp_path / "scripts").mkdir(exist_ok=True)
    body = node_info("w1", 1)
    return configure(
        userdata=userdata,
        root=root,
        scripts=tmp_path / "scripts",
        short_hostname=body["short_hostname"],
        hostname=body["hostname"],
        address=body["address"],
        ssh_host_key=host_key(root, "w1"),  # its private half under ROOT/etc/ssh
        once=True,
    )


def test_an_agent_that_lost_its_credential_proves_its_host_key(
    live_broker: LiveBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = create(live_broker, replace_on_rejoin=True)
    root = tmp_path / "root"
    settings = agent_settings(live_broker, ctx, tmp_path, root)
    first = run_agent_once(settings).state.node_id
    settings.state.unlink()  # the machine comes back without its credential
    second = run_agent_once(settings).state.node_id
    assert second not in (None, first)
    assert member_ids(live_broker, ctx) == [second]

    # Without its private key at hand, it cannot replace its record: it waits (409).
    settings.state.unlink()
    (root / "etc" / "ssh" / "ssh_host_ed25519_key").unlink()
    stopped: list[Agent] = []

    def sleep(_seconds: float) -> None:
        stopped[0].request_stop()

    c = settings.context
    with NodeClient(c.uri, c.key, c.secret, ca=c.ca_pem) as link:
        agent = Agent(settings, link, sleep=sleep)
        stopped.append(agent)
        with caplog.at_level(logging.WARNING):
            assert agent.run() == 0
    assert "cannot prove this node holds its SSH host key" in caplog.text
    assert member_ids(live_broker, ctx) == [second]
