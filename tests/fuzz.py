"""Property-based fuzzing of a live server's OpenAPI operations, shared by the broker's
and the urgent services' schema tests."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis.strategies import SearchStrategy
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.transport import Response


def operations(app: Any) -> list[APIOperation]:
    """Every operation of the FastAPI ``app``'s schema, as ``--docs`` would serve it."""
    schema = schemathesis.openapi.from_dict(app.openapi())
    return [result.ok() for result in schema.get_all_operations()]


NO_CASE: set[str] = set()
"""The operations (of a schema, in a generation mode) of which no case exists. Finding
that out takes hypothesis some 460 rejected attempts, a second or two of CPU, and the
answer depends on the schema alone, not on the caller or the server, so it is found
once per process, not again for each caller; :func:`nothing_invalid` tells most of
them from the schema without trying."""

_ANY_STRING = ({"type": "string"}, {"anyOf": [{"type": "string"}, {"type": "null"}]})


def _any_string(schema: Any) -> bool:
    """Whether ``schema`` admits every string (a title or description aside)."""
    if not isinstance(schema, dict):
        return False
    shape = {k: v for k, v in schema.items() if k not in ("title", "description")}
    return shape in _ANY_STRING


def nothing_invalid(operation: APIOperation) -> bool:
    """Whether no invalid request to ``operation`` can be made: it takes no body, and
    each parameter is a path segment or an optional header that may be any string (a
    path segment is always present and always a string, an optional header may be left
    out). Such operations are still sent their valid cases."""
    if list(operation.body):
        return False
    for parameter in operation.iter_parameters():
        where = parameter.location.value
        optional_header = where == "header" and not parameter.definition.get("required")
        if where != "path" and not optional_header:
            return False
        if not _any_string(parameter.definition.get("schema")):
            return False
    return True


def no_case_key(operation: APIOperation, mode: GenerationMode) -> str:
    schema = json.dumps(operation.schema.raw_schema, sort_keys=True, default=str)
    return f"{hashlib.sha256(schema.encode()).hexdigest()} {mode.value} {operation.label}"


STRATEGIES: dict[tuple[int, GenerationMode], tuple[APIOperation, SearchStrategy[Case]]] = {}
"""Each operation's strategy in each mode, built once per process and shared by its
callers (hypothesis and schemathesis cache what a strategy compiles on the strategy
object), each kept with its operation so that the id stays its own."""


def strategy(operation: APIOperation, mode: GenerationMode) -> SearchStrategy[Case]:
    key = (id(operation), mode)
    if key not in STRATEGIES:
        STRATEGIES[key] = (operation, operation.as_strategy(generation_mode=mode))
    return STRATEGIES[key][1]


def fuzz(
    operation: APIOperation, mode: GenerationMode, examples: int, send: Callable[[Case], Response]
) -> bool:
    """Send ``examples`` cases of ``operation`` generated in ``mode`` through ``send``
    (which returns the server's answer), failing on any server error. False when no case
    of that mode exists: nothing invalid can be sent to an operation taking only
    free-form strings (known from an earlier call without trying again)."""
    key = no_case_key(operation, mode)
    if key in NO_CASE or (mode is GenerationMode.NEGATIVE and nothing_invalid(operation)):
        return False

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(case=strategy(operation, mode))
    def run(case: Case) -> None:
        case.validate_response(send(case), checks=[not_a_server_error])

    try:
        run()
    except Unsatisfiable:
        assert mode is GenerationMode.NEGATIVE
        NO_CASE.add(key)
        return False
    return True
