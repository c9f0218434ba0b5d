"""The schema fuzzers skip, without trying, the negative cases of operations that have
none: the rule that tells them must agree with what schemathesis can generate."""

from __future__ import annotations

from typing import Annotated

import pytest
from fastapi import FastAPI, Header
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from pydantic import BaseModel
from schemathesis import APIOperation, GenerationMode
from tests.fuzz import nothing_invalid, operations, strategy


class Body(BaseModel):
    name: str


def api() -> FastAPI:
    app = FastAPI()

    @app.get("/path/{name}")
    def path_only(name: str) -> None: ...

    @app.get("/header")
    def optional_header(x_token: Annotated[str | None, Header()] = None) -> None: ...

    @app.get("/required-header")
    def required_header(x_token: Annotated[str, Header()]) -> None: ...

    @app.get("/query/{name}")
    def with_a_number(name: str, limit: int = 10) -> None: ...

    @app.post("/body")
    def with_a_body(body: Body) -> None: ...

    return app


def negative_case_exists(operation: APIOperation) -> bool:
    @settings(max_examples=1, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(case=strategy(operation, GenerationMode.NEGATIVE))
    def run(case: object) -> None:
        pass

    try:
        run()
    except Unsatisfiable:
        return False
    return True


@pytest.mark.parametrize("operation", operations(api()), ids=lambda o: o.label)
def test_an_operation_is_skipped_exactly_when_nothing_invalid_can_be_sent(
    operation: APIOperation,
) -> None:
    assert nothing_invalid(operation) is not negative_case_exists(operation)
