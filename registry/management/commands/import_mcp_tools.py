"""``manage.py import_mcp_tools SERVER``: import (or update) an MCP server's tools."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from registry.adapters.mcp import LIST_TIMEOUT_S, MCPUnavailable
from registry.mcp_import import mcp_import_tools
from registry.models import MCPServer


class Command(BaseCommand):
    help = (
        "List an MCP server's tools and create or update one tool per MCP tool. "
        "New tools start disabled: confirm their policy in the admin to enable them."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("server", help="The MCP server's name (see the admin).")
        parser.add_argument(
            "--timeout",
            type=float,
            default=LIST_TIMEOUT_S,
            help="Seconds to wait for the server to list its tools.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["server"]
        server = MCPServer.objects.filter(name=name).first()
        if server is None:
            known = ", ".join(MCPServer.objects.values_list("name", flat=True))
            raise CommandError(
                f"No MCP server named {name!r}. Registered: {known or 'none'}."
            )
        try:
            outcomes = mcp_import_tools(server=server, timeout_s=options["timeout"])
        except MCPUnavailable as exc:
            raise CommandError(str(exc)) from exc
        for outcome in outcomes:
            self.stdout.write(outcome.line())
        counts: dict[str, int] = {}
        for outcome in outcomes:
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        self.stdout.write(f"{server.name}: {summary or 'no tools listed'}.")
