"""``manage.py mcp_serve --user NAME`` (or ``--token KEY``): the gateway over stdio.

For an MCP client that starts its servers as local processes (Claude Desktop's
``command``). Stdout carries the protocol, so nothing else may print there; logs
go to stderr. A worker must be running: the calls are tasks like any other.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from mcp.server.stdio import stdio_server

from gateway.server import build_server, current_session, current_user
from gateway.services import GatewayError, gateway_agent, gateway_user


class Command(BaseCommand):
    help = "Serve the registry's tools to an MCP client over stdio (as one user)."

    def add_arguments(self, parser: CommandParser) -> None:
        who = parser.add_mutually_exclusive_group()
        who.add_argument("--user", help="Act as this user (local use only).")
        who.add_argument(
            "--token",
            help="Act as the holder of this API token (default: $REACH_MCP_TOKEN).",
        )
        parser.add_argument(
            "--agent", help="Serve this agent's tools (default: the default agent)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        token = options.get("token") or os.environ.get("REACH_MCP_TOKEN")
        try:
            user = gateway_user(token=token, username=options.get("user"))
            gateway_agent(name=options.get("agent"), user=user)
        except GatewayError as exc:
            raise CommandError(str(exc)) from exc
        asyncio.run(serve_stdio(user=user, agent_name=options.get("agent")))


async def serve_stdio(*, user: Any, agent_name: str | None) -> None:
    server = build_server(agent_name=agent_name)
    # One user for the whole process: the handlers run in tasks that copy it.
    current_user.set(user)
    # And one MCP session: the process is the client's connection, its taint scope.
    current_session.set(f"stdio_{uuid.uuid4().hex}")
    async with stdio_server() as (read_stream, write_stream):
        await server.run(
            read_stream, write_stream, server.create_initialization_options()
        )
