"""Property-based fuzzing of the broker's OpenAPI schema against a live broker: whatever
a client sends, with whichever credential, the answer is never a server error."""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.core.transport import Response
from tests.fuzz import fuzz
from tests.fuzz import operations as schema_operations

from elasticsite.context.client import NodeClient
from elasticsite.context.models import ContextCreated

from .conftest import TOKEN, LiveBroker, free_port, node_info

# One worker runs the module: its server is built once, and so is what tests.fuzz learns
# once per process (which operations have no negative case, each operation's strategy).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("broker-schema-fuzz")]

SERIAL = itertools.count(1)
EXAMPLES = 25
"""Examples per operation and generation mode: about 20 s in all on two cores."""


@dataclass
class Target:
    broker: LiveBroker
    ctx: ContextCreated
    node_id: str
    node_secret: str
    session: requests.Session
    """One client's kept-alive connections: the fuzzing is of what is sent, and a TLS
    handshake per case was a good part of its CPU (test_broker covers connecting)."""

    def call(self, case: Case, headers: dict[str, str]) -> Response:
        return case.call(base_url=self.broker.url, session=self.session, headers=headers,
                         verify=str(self.broker.cert), timeout=10)  # fmt: skip


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    broker = LiveBroker(tmp_path_factory.mktemp("fuzz") / "state", free_port())
    broker.start()
    with broker.admin() as admin:
        ctx = admin.create("fuzzed")
    node = broker.node(ctx)
    joined = node.join(node_info("anchor", 1))
    with requests.Session() as session:
        yield Target(broker, ctx, joined.node_id, joined.node_secret, session)
    broker.stop()


@pytest.fixture(scope="module")
def operations(target: Target) -> list[APIOperation]:
    assert target.broker.server is not None
    return schema_operations(target.broker.server.config.app)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


ADMIN_ONLY = {"/ctx", "/ctx/{cid}", "/ctx/{cid}/hosts/{short_hostname}"}


def prepare(case: Case, target: Target) -> dict[str, str]:
    """Point the case at the live context and pick a credential; returns the headers."""
    path = case.operation.path
    if case.path_parameters is not None and "cid" in case.path_parameters:
        case.path_parameters["cid"] = target.ctx.id  # reach past authentication
    if case.query and "wait" in case.query:
        case.query["wait"] = 0.01  # a bounded long poll; its range is tested elsewhere
    # Rotate credentials with the generated data so every role meets every operation.
    role = len(repr(case.body) + repr(case.query)) % 3 if path not in ADMIN_ONLY else 0
    if case.method == "PUT" and case.path_parameters is not None:
        case.path_parameters["node_id"] = target.node_id  # a node updating itself
    if role == 0:
        return {"Authorization": f"Bearer {TOKEN}"}
    if role == 1:
        return {"Authorization": basic(target.ctx.key, target.ctx.secret)}
    return {"Authorization": basic(target.node_id, target.node_secret)}


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_input_makes_the_broker_fail(
    operations: list[APIOperation], target: Target, mode: GenerationMode
) -> None:
    fuzzed: set[str] = set()
    for operation in operations:
        if operation.method.upper() == "DELETE" and operation.path == "/ctx/{cid}":
            continue  # deleting the fuzzed context would end the run; test_broker covers it

        def send(case: Case) -> Response:
            return target.call(case, prepare(case, target))

        if fuzz(operation, mode, EXAMPLES, send):
            fuzzed.add(operation.label)
    must = {"POST /ctx", "POST /ctx/{cid}/nodes", "PUT /ctx/{cid}/nodes/{node_id}"}
    assert must | {"GET /ctx/{cid}/updates"} <= fuzzed
    if mode is GenerationMode.POSITIVE:
        assert len(fuzzed) == len(operations) - 1


NODE_OPERATIONS = {
    ("GET", "/ctx/{cid}/updates"),
    ("GET", "/ctx/{cid}/members"),
    ("PUT", "/ctx/{cid}/nodes/{node_id}"),
    ("DELETE", "/ctx/{cid}/nodes/{node_id}"),
    ("POST", "/ctx/{cid}/nodes"),
}


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_node_request_makes_the_broker_fail(
    operations: list[APIOperation], target: Target, mode: GenerationMode
) -> None:
    """Every node endpoint, called with a joined node's own credential (a fresh node
    for each leave, so the others keep theirs), never gets a server error."""
    fuzzed: set[str] = set()
    for operation in operations:
        if (operation.method.upper(), operation.path) not in NODE_OPERATIONS:
            continue

        def send(case: Case) -> Response:
            node_id, secret = target.node_id, target.node_secret
            leaves = case.operation.method.upper() == "DELETE"
            if leaves:
                fresh = target.broker.node(target.ctx)
                k = next(SERIAL)
                fresh.join({**node_info(f"leaver{k}"), "address": f"10.9.{k // 250}.{k % 250 + 1}"})
                node_id, secret = fresh.node_id or "", fresh.node_secret or ""
            if case.path_parameters is not None:
                case.path_parameters["cid"] = target.ctx.id
                if "node_id" in case.path_parameters:
                    case.path_parameters["node_id"] = node_id
            if case.query and "wait" in case.query:
                case.query["wait"] = 0.01
            response = target.call(case, {"Authorization": basic(node_id, secret)})
            if leaves and response.status_code >= 300:  # refused: take the fresh node out
                with target.broker.admin() as admin:
                    admin.remove_node(target.ctx.id, node_id)
            return response

        if fuzz(operation, mode, EXAMPLES, send):
            fuzzed.add(operation.label)
    assert {"GET /ctx/{cid}/updates", "PUT /ctx/{cid}/nodes/{node_id}"} <= fuzzed
    # The anchor node kept its record and credential through it all.
    anchor = NodeClient(
        target.ctx.uri,
        target.ctx.key,
        target.ctx.secret,
        ca=target.broker.cert,
        node_id=target.node_id,
        node_secret=target.node_secret,
    )
    assert target.node_id in {m.node_id for m in anchor.members().members}


def test_the_broker_still_serves_after_fuzzing(target: Target) -> None:
    """The fuzzed broker still answers its members correctly afterwards."""
    with target.broker.admin() as admin:
        shown = admin.show(target.ctx.id)
    assert shown.last_id >= 1
