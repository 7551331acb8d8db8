"""The JSON shape of a tool definition (API.md "Tool definitions")."""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Any

from registry.models import Tool


def iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


class ToolSection(StrEnum):
    """The parts of a tool definition (the admin shows one fieldset each)."""

    METADATA = "Metadata"
    IMPLEMENTATION = "Implementation"
    POLICY = "Policy"
    EXECUTION = "Execution"


#: The public fields of a tool definition (API.md), in the order its JSON lists
#: them, each with its section. Every other list of a tool's fields (the admin's
#: fieldsets, the API schema, versioning) is derived from this one.
TOOL_FIELD_SECTIONS: dict[str, ToolSection] = {
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
TOOL_FIELDS = tuple(TOOL_FIELD_SECTIONS)
#: What a definition sent to the API must give; the rest default as the model's.
TOOL_REQUIRED_FIELDS = ("name", "description", "parameters", "kind")
#: The implementation behind a definition (which apply depends on ``kind``).
TOOL_IMPLEMENTATION_FIELDS = ("handler", "http", "mcp_server", "mcp_tool")


def tool_fields_in(section: ToolSection) -> tuple[str, ...]:
    """The definition's fields of ``section``, in definition order."""
    return tuple(f for f, s in TOOL_FIELD_SECTIONS.items() if s is section)


def tool_definition(tool: Tool) -> dict[str, Any]:
    """A tool definition as API.md describes it."""
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
