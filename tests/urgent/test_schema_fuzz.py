"""Property-based fuzzing of the urgent services' OpenAPI schema on a real server: with
every kind of credential, whatever is sent, the answer is never a server error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error

from .test_routes import Site, issue

pytestmark = pytest.mark.slow
EXAMPLES = 20


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Site, str]]:
    s = Site(Path(tmp_path_factory.mktemp("urgent-fuzz")))
    s.store.max_failures = 10**9  # fuzzing is one source failing a lot: no rate limit here
    value = issue(s, resources=["cluster", "cloud"])["token"]
    yield s, value
    s.stop()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_input_makes_the_urgent_services_fail(
    site: tuple[Site, str], mode: GenerationMode
) -> None:
    s, value = site
    document = s.server.config.app.openapi()  # what --docs would serve
    schema = schemathesis.openapi.from_dict(document)
    operations: list[APIOperation] = [
        r.ok() for r in schema.get_all_operations() if r.ok().path.startswith("/urgent")
    ]
    assert len(operations) == 12
    fuzzed = set()
    for operation in operations:

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(case=operation.as_strategy(generation_mode=mode))
        def run(case: Case) -> None:
            pick = len(repr(case.body) + repr(case.query)) % 4
            headers = {"X-Urgent-Token": value}
            if pick < 3:
                who = ("admin", "user", "resource")[pick]
                headers = {"Authorization": f"Bearer {s.keys[who]}"}
            response = case.call(base_url=f"https://127.0.0.1:{s.port}", headers=headers,
                                 verify=str(s.cert), timeout=10)  # fmt: skip
            case.validate_response(response, checks=[not_a_server_error])

        try:
            run()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE
            continue
        fuzzed.add(operation.label)
    assert "POST /urgent/authenticate" in fuzzed and "POST /urgent/tokens" in fuzzed
