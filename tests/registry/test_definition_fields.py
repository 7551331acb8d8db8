"""The fields of a tool definition come from ToolSpec, the one description of a
tool: the API's list, the admin's sections and the types POST checks."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from engine.spec import ToolSpec
from registry.models import MCPServer, Tool
from registry.payloads import (
    TOOL_FIELD_SECTIONS,
    TOOL_FIELDS,
    ToolSection,
    tool_definition,
)
from registry.services import tool_clean, tool_from_definition


def test_the_definition_lists_the_specs_fields_in_order_then_enabled() -> None:
    kept_by_server = {"version", "leaves_house"}
    assert (
        *(f.name for f in fields(ToolSpec) if f.name not in kept_by_server),
        "enabled",
    ) == TOOL_FIELDS
    assert list(TOOL_FIELD_SECTIONS) == list(TOOL_FIELDS)
    assert set(TOOL_FIELD_SECTIONS.values()) == set(ToolSection)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name", [n for n in TOOL_FIELDS if n not in {"name", "description", "kind"}]
)
def test_every_field_is_type_checked_on_the_way_in(name: str) -> None:
    definition = {
        "name": "checked",
        "description": "A tool.",
        "parameters": {"type": "object"},
        "kind": "python",
        name: object.__name__,  # a string: wrong for every field left
    }
    if name in {"approval_rule", "preview_template"}:
        definition[name] = 12
    with pytest.raises(ValidationError) as refused:
        tool_from_definition(definition)
    assert name in refused.value.message_dict


@pytest.mark.django_db
def test_the_api_schema_documents_every_key_a_definition_has(
    admin_user: object, api_client_for: Any
) -> None:
    schema = api_client_for(admin_user).get("/api/schema/?format=json").json()
    documented = set(schema["components"]["schemas"]["ToolSchema"]["properties"])
    server = MCPServer.objects.create(name="files", transport="stdio", command=["true"])
    for tool in (
        Tool(name="py", kind=Tool.Kind.PYTHON, handler="calculate"),
        Tool(name="web", kind=Tool.Kind.HTTP, http={"url": "http://127.0.0.1/"}),
        Tool(name="remote", kind=Tool.Kind.MCP, mcp_server=server, mcp_tool="read"),
    ):
        assert set(tool_definition(tool)) <= documented, tool.kind


@pytest.mark.parametrize(
    ("settings", "field", "message"),
    [
        ({"approval": "rule", "approval_rule": ""}, "approval_rule", "needs a rule"),
        ({"approval": "rule", "approval_rule": "   "}, "approval_rule", "needs a rule"),
        ({"risk": "irreversible", "approval": "never"}, "approval", "irreversible"),
        ({"approvals_required": 3}, "approvals_required", "1 or 2"),
    ],
)
def test_contradictory_policy_settings_are_named_once_on_the_field_to_change(
    settings: dict[str, Any], field: str, message: str
) -> None:
    tool = Tool(
        name="pay_invoice",
        description="Pay one invoice.",
        parameters={"type": "object", "properties": {}},
        kind="python",
        handler="calculate",
        **settings,
    )

    errors = tool_clean(tool)

    assert list(errors) == [field], errors
    [only] = errors[field]
    assert message in only
