"""Tool registration with mutated definitions, under Hypothesis.

A valid HTTP tool definition has fields replaced by any JSON value (or dropped)
and is posted to ``POST /api/tools/`` by an admin: the answer is 201/200 with
the tool, or a 400 whose message names what is wrong, and a refused definition
writes no tool, no version and no audit event.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.models import AuditEvent
from registry.models import Tool, ToolVersion
from registry.payloads import TOOL_FIELDS
from tests.fuzz.strategies import fuzz_settings, json_values
from tests.support.clients import bearer_client, post_json
from tests.support.samples import HTTP_TOOL

pytestmark = pytest.mark.django_db

BASE = HTTP_TOOL
FIELDS = sorted({*TOOL_FIELDS, "http", "handler", "mcp"})

plausible = st.one_of(
    json_values,
    st.sampled_from(
        ["python", "http", "mcp", "read_only", "write", "irreversible", "never"]
        + ["always", "rule", "amount > 100", "calculate", "/result", ""]
    ),
    st.sampled_from([0, -1, 1, 2, 600, 601, 32767, 32768, 2**31, 2**53 - 1, 0.5]),
    st.builds(
        lambda key, value: {**BASE["http"], key: value},
        st.sampled_from(["method", "url", "query", "headers", "body", "timeout_s"]),
        json_values,
    ),
)


@st.composite
def definitions(draw: Any) -> dict[str, Any]:
    definition = json.loads(json.dumps(BASE))
    for field in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=4)):
        if draw(st.integers(0, 5)) == 0:
            definition.pop(field, None)
        else:
            definition[field] = draw(plausible)
    return definition


def counts() -> tuple[int, int, int]:
    return Tool.objects.count(), ToolVersion.objects.count(), AuditEvent.objects.count()


@fuzz_settings(80)
@given(definition=definitions())
def test_a_mutated_definition_registers_or_is_refused_with_nothing_written(
    definition: dict[str, Any], admin_user: Any, demo: Any
) -> None:
    client = bearer_client(admin_user)
    before = counts()

    response = post_json(client, "/api/tools/", definition)

    answer = response.json()
    assert response.status_code in (200, 201, 400), (response.status_code, answer)
    if response.status_code == 400:
        assert isinstance(answer.get("error"), str) and answer["error"], answer
        assert counts() == before, answer
    else:
        assert answer["name"] == definition["name"]
        assert client.get(f"/api/tools/{answer['name']}/versions/").status_code == 200
