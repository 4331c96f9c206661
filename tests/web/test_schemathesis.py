"""Property-based tests of the API against its own OpenAPI description (schemathesis), on the real
`xidpipe serve`: for every operation, requests that fit the description (positive) and requests
that break it (negative), once with the read token and once with the operator token. Every check
schemathesis has runs on each response: no server error, status codes, content types, headers and
bodies as described, bad input rejected, good input accepted.

schemathesis' own pytest plugin (`@schema.parametrize()`) does not run under pytest 9 yet, so the
cases come from `APIOperation.as_strategy()` under Hypothesis' `@given`, the documented way to use
them in other tests."""

from __future__ import annotations

import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from tests.web.conftest import OPERATOR_TOKEN, READ_TOKEN, RunningServer
from xidpipe.web.api import OPENAPI

# Generated requests per operation, mode and token: about 400 requests in all. XIDPIPE_FUZZ_EXAMPLES=200
# runs a deeper search.
MAX_EXAMPLES = int(os.environ.get("XIDPIPE_FUZZ_EXAMPLES", "12"))
FUZZ = settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
OPERATIONS = [(method.upper(), path) for path, item in OPENAPI["paths"].items() for method in item]
# Negative cases need something to break: a parameter or a body.
NEGATIVE = [(m, p) for m, p in OPERATIONS
            if OPENAPI["paths"][p][m.lower()].get("parameters") or OPENAPI["paths"][p][m.lower()].get("requestBody")]
CASES = [(m, p, GenerationMode.POSITIVE) for m, p in OPERATIONS]
CASES += [(m, p, GenerationMode.NEGATIVE) for m, p in NEGATIVE]
calls: dict[str, int] = {}


@pytest.fixture(scope="module")
def api_schema(server: RunningServer) -> schemathesis.BaseSchema:
    """The description as the server serves it."""
    return schemathesis.openapi.from_url(f"{server.base}/api/v1/openapi.json")


@pytest.mark.parametrize("token", ["read", "operator"])
@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=[f"{m} {p} {g.value}" for m, p, g in CASES])
def test_api_conforms_to_its_description(api_schema: Any, server: RunningServer, method: str, path: str,
                                         mode: GenerationMode, token: str) -> None:
    operation = api_schema[path][method]
    headers = {"Authorization": f"Bearer {READ_TOKEN if token == 'read' else OPERATOR_TOKEN}"}

    @FUZZ
    @given(case=operation.as_strategy(generation_mode=mode))
    def check(case: schemathesis.Case) -> None:
        calls[token] = calls.get(token, 0) + 1
        case.call_and_validate(base_url=server.base, headers=headers)

    check()


def test_every_operation_was_fuzzed_and_the_server_logged_no_error(server: RunningServer) -> None:
    assert len(OPERATIONS) == 9 and len(NEGATIVE) == 7
    assert calls.get("read", 0) >= len(CASES) and calls.get("operator", 0) >= len(CASES), calls
    log = server.log.read_text(errors="replace")
    assert "Traceback" not in log and " failed" not in log, log[-3000:]
    assert READ_TOKEN not in log and OPERATOR_TOKEN not in log
