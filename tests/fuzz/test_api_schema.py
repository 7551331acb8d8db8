"""schemathesis against ``/api/schema/``: every operation, as every role.

The schema is read from the running app (Django's WSGI application, in-process)
and every generated request is sent as a chat user (alice), an approver and
auditor (operator) and an admin, each with a real bearer token, and once without
credentials. No answer may be a 500, and every answer must match the schema:
its status code, content type, headers and body.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.fuzz.strategies import fuzz_settings
from tests.support.clients import bearer_token

schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())

#: The schema types bodies, not every rule a service applies (a tool's HTTP
#: settings, an approval rule's syntax, a trace's step order): a schema-valid body
#: may still be refused, with a documented 400. Everything else is checked.
NOT_CHECKED = [positive_data_acceptance]

#: Examples per operation: enough to reach every documented status of most
#: operations, few enough for CI (about a minute for the whole schema).
EXAMPLES = 12


@pytest.fixture
def transaction_kept() -> Iterator[None]:
    """Keep the test's transaction open across requests, as Django's test client
    does: the WSGI handler would close the connection after every request."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def role_headers(
    alice: Any, operator: Any, admin_user: Any, flush_redis: None
) -> dict[str, dict[str, str]]:
    """The headers of each role (and of no one), with real bearer tokens; the
    throttle's counts start at zero for each operation."""
    return {
        "anonymous": {},
        **{
            user.get_username(): {"Authorization": f"Bearer {bearer_token(user)}"}
            for user in (alice, operator, admin_user)
        },
    }


@pytest.mark.django_db
@schema.parametrize()
@fuzz_settings(EXAMPLES)
def test_every_operation_answers_every_role_as_the_schema_says(
    case: Any, role_headers: dict[str, dict[str, str]], transaction_kept: None
) -> None:
    for headers in role_headers.values():
        case.call_and_validate(headers=headers, excluded_checks=NOT_CHECKED)
