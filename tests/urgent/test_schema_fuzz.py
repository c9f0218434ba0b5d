"""Property-based fuzzing of the urgent services' OpenAPI schema on a real server, as each
kind of caller: no credential, an administrator, a user who is no team member, a team
member in an active session, the token's manager, a resource's submit path. Whatever
is sent, the answer is never a server error. The rate limits are the real ones: each
caller comes from an address of its own on the loopback range, so one caller's
refusals hold back only that caller."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from requests.adapters import HTTPAdapter
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.core.transport import Response
from tests.fuzz import fuzz
from tests.fuzz import operations as schema_operations

from .test_routes import Site, issue

# One worker runs the module: its server is built once, and so is what tests.fuzz learns
# once per process (which operations have no negative case, each operation's strategy).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("urgent-schema-fuzz")]
EXAMPLES = 12
"""Examples per operation, caller and generation mode: about a minute in all on two cores."""
ROLES = ("none", "admin", "user", "member", "manager", "resource")


class FromAddress(HTTPAdapter):
    """Connections made from ``address`` (the server sees the caller there)."""

    def __init__(self, address: str) -> None:
        self.address = address
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["source_address"] = (self.address, 0)
        super().init_poolmanager(*args, **kwargs)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Site, str]]:
    s = Site(Path(tmp_path_factory.mktemp("urgent-fuzz")))
    value = issue(s, resources=["cluster", "cloud"])["token"]
    ann = {"name": "ann", "identities": {"cluster": "ann", "cloud": "ann@c"}}
    assert s.call("POST", "/urgent/token/members", token=value, json=ann).is_success
    assert s.call("POST", "/urgent/token/activate", token=value).is_success
    yield s, value
    s.stop()


@pytest.fixture(scope="module")
def operations(site: tuple[Site, str]) -> list[APIOperation]:
    s, _ = site
    found = [o for o in schema_operations(s.server.config.app) if o.path.startswith("/urgent")]
    assert len(found) == 12
    return found


def credentials(s: Site, value: str, role: str) -> dict[str, str]:
    if role == "manager":
        return {"X-Urgent-Token": value}
    key = {"admin": "admin", "user": "stranger", "member": "user", "resource": "resource"}
    return {"Authorization": f"Bearer {s.keys[key[role]]}"} if role in key else {}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_input_makes_the_urgent_services_fail(
    site: tuple[Site, str], operations: list[APIOperation], role: str, mode: GenerationMode
) -> None:
    s, value = site
    session = requests.Session()
    session.mount("https://", FromAddress(f"127.0.0.{10 + ROLES.index(role)}"))
    headers = credentials(s, value, role)
    fuzzed = set()
    for operation in operations:

        def send(case: Case) -> Response:
            return case.call(base_url=f"https://127.0.0.1:{s.port}", session=session,
                             headers=headers, verify=str(s.cert), timeout=10)  # fmt: skip

        if fuzz(operation, mode, EXAMPLES, send):
            fuzzed.add(operation.label)
    session.close()
    assert "POST /urgent/authenticate" in fuzzed and "POST /urgent/tokens" in fuzzed
