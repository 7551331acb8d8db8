"""The JSON shape of a tool definition (API.md "Tool definitions")."""

from __future__ import annotations

import datetime as dt
from typing import Any

from registry.models import Tool


def iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


TOOL_FIELDS = (
    "name",
    "description",
    "parameters",
    "kind",
    "risk",
    "approval",
    "approval_rule",
    "approvals_required",
    "approval_ttl_s",
    "untrusted_output",
    "idempotent",
    "timeout_s",
    "max_retries",
    "max_result_chars",
    "result_fields",
    "cache_ttl_s",
    "rate_limit_per_min",
    "preview_template",
    "tags",
    "enabled",
)


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
