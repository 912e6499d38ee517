"""schemathesis against the API's own OpenAPI document: generated requests, no server errors.

Runs in process over ASGI against the example cluster; every operation gets generated path and
query parameters (valid and invalid), and each answer must be no 5xx and match its documented
schema.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings

from gpupool.api.app import create_api
from gpupool.api.example import example_view

schema = schemathesis.openapi.from_asgi("/api/openapi.json", create_api(example_view()))


@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors_and_answers_match_the_schema(case: schemathesis.Case) -> None:
    case.call_and_validate()
