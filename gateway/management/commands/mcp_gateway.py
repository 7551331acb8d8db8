"""``manage.py mcp_gateway``: the earlier name of ``mcp_serve`` (docs/api.md "MCP
gateway"), kept so client configurations written for it go on working."""

from gateway.management.commands.mcp_serve import Command

__all__ = ["Command"]
