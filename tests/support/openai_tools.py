"""Tool definitions in the chat-completions ``tools`` format, built one way."""

from __future__ import annotations

from typing import Any


def object_schema(
    properties: dict[str, Any],
    required: list[str] | None = None,
    defs: dict[str, Any] | None = None,
    **more: Any,
) -> dict[str, Any]:
    """``{"type": "object", "properties": ...}``; ``required``, ``$defs`` and
    ``more`` keys (``additionalProperties=False``) only when given."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        schema["required"] = required
    if defs is not None:
        schema["$defs"] = defs
    return {**schema, **more}


def function_tool(
    name: str,
    parameters: dict[str, Any] | None = None,
    description: str | None = None,
) -> dict[str, Any]:
    """``{"type": "function", "function": {...}}``; absent keys are left out."""
    function: dict[str, Any] = {"name": name}
    if description is not None:
        function["description"] = description
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}
