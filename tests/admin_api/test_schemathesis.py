"""Property-based checks of the whole JSON API against its own OpenAPI schema, over real HTTP:
no 5xx for any generated input, and every documented response matches the schema."""

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_api_never_fails_and_keeps_its_schema(gateway, cast, admin_token):
    schema = schemathesis.openapi.from_url(gateway.url + "/api/openapi.json")
    headers = {"Authorization": f"Bearer {admin_token}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 16

    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case):
            case.call_and_validate(
                headers=headers, checks=[not_a_server_error, response_schema_conformance], timeout=30
            )

        check()
