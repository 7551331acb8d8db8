"""The memory tools in the registry (``seed_demo`` calls this): create-if-missing."""

from __future__ import annotations

from memory.builtins import MEMORY_TAG, MEMORY_TOOLS
from registry.models import Tool
from registry.services import tool_save


def seed_memory_tools() -> list[str]:
    """Register ``remember``, ``recall`` and ``forget`` (tagged ``memory``) when
    missing; never overwrite an operator's edits. No agent gets them here: an
    operator adds the ``memory`` tag to an agent (docs/api.md "Long-term
    memory")."""
    created = []
    for definition in MEMORY_TOOLS:
        if Tool.objects.filter(name=definition["name"]).exists():
            continue
        tool = Tool(kind=Tool.Kind.PYTHON, handler=definition["name"])
        for key, value in definition.items():
            setattr(tool, key, value)
        tool.tags = [MEMORY_TAG]
        tool_save(tool=tool, user=None)
        created.append(f"tool {tool.name}")
    return created
