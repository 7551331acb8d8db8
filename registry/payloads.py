"""The JSON shape of a tool definition (docs/api.md "Tool definitions")."""

from __future__ import annotations

import datetime as dt
from dataclasses import fields
from enum import StrEnum
from typing import Any

from engine.spec import ToolSpec
from registry.models import Tool


def iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


class ToolSection(StrEnum):
    """The parts of a tool definition (the admin shows one fieldset each)."""

    METADATA = "Metadata"
    IMPLEMENTATION = "Implementation"
    POLICY = "Policy"
    EXECUTION = "Execution"


#: The section of each public field of a tool definition.
_SECTION_OF: dict[str, ToolSection] = {
    "name": ToolSection.METADATA,
    "description": ToolSection.METADATA,
    "parameters": ToolSection.METADATA,
    "kind": ToolSection.IMPLEMENTATION,
    "risk": ToolSection.POLICY,
    "approval": ToolSection.POLICY,
    "approval_rule": ToolSection.POLICY,
    "approvals_required": ToolSection.POLICY,
    "approval_ttl_s": ToolSection.POLICY,
    "untrusted_output": ToolSection.POLICY,
    "idempotent": ToolSection.POLICY,
    "timeout_s": ToolSection.EXECUTION,
    "max_retries": ToolSection.EXECUTION,
    "max_result_chars": ToolSection.EXECUTION,
    "result_fields": ToolSection.EXECUTION,
    "cache_ttl_s": ToolSection.EXECUTION,
    "rate_limit_per_min": ToolSection.EXECUTION,
    "max_calls_per_run": ToolSection.EXECUTION,
    "preview_template": ToolSection.POLICY,
    "tags": ToolSection.METADATA,
    "enabled": ToolSection.POLICY,
}
#: ToolSpec's fields that a definition sent to the API does not set: the server
#: counts the version and works out whether the tool leaves the house.
_SERVER_KEPT = frozenset({"version", "leaves_house"})
#: The public fields of a tool definition (docs/api.md), in the order its JSON
#: lists them: ToolSpec's (the one description of a tool), then ``enabled``. Every
#: other list of a tool's fields (the admin's fieldsets, the API schema, the types
#: a definition is checked against, versioning) is derived from this one.
TOOL_FIELDS: tuple[str, ...] = (
    *(f.name for f in fields(ToolSpec) if f.name not in _SERVER_KEPT),
    "enabled",
)
TOOL_FIELD_SECTIONS: dict[str, ToolSection] = {
    name: _SECTION_OF[name] for name in TOOL_FIELDS
}
#: What a definition sent to the API must give; the rest default as the model's.
TOOL_REQUIRED_FIELDS = ("name", "description", "parameters", "kind")
#: The implementation behind a definition (which apply depends on ``kind``).
TOOL_IMPLEMENTATION_FIELDS = ("handler", "http", "mcp_server", "mcp_tool")


def tool_fields_in(section: ToolSection) -> tuple[str, ...]:
    """The definition's fields of ``section``, in definition order."""
    return tuple(f for f, s in TOOL_FIELD_SECTIONS.items() if s is section)


def tool_definition(tool: Tool) -> dict[str, Any]:
    """A tool definition as docs/api.md describes it."""
    data: dict[str, Any] = {name: getattr(tool, name) for name in TOOL_FIELDS}
    data["approval_rule"] = tool.approval_rule or None
    data["tags"] = list(tool.tags or [])
    data["result_fields"] = list(tool.result_fields or [])
    if tool.kind == Tool.Kind.PYTHON:
        data["handler"] = tool.handler or tool.name
    elif tool.kind == Tool.Kind.HTTP:
        data["http"] = tool.http or {}
    elif tool.kind == Tool.Kind.MCP:
        data["mcp"] = {
            "server": tool.mcp_server.name if tool.mcp_server else None,
            "tool": tool.mcp_tool,
        }
    data["version"] = tool.version
    return data
