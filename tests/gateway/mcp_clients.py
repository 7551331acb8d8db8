"""MCP clients the way users connect: the SDK's client over streamable HTTP with a
bearer token, or over stdio to ``manage.py mcp_serve``. Each helper runs one
client session in its own event loop, so a test can call it from a thread while
it decides approvals in the main one."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def over_http(
    url: str,
    token: str,
    use: Callable[[Client], Awaitable[T]],
    *,
    mode: str = "auto",
) -> T:
    """``mode`` "legacy": the initialize handshake, so a session (Mcp-Session-Id);
    "auto" (the SDK's default) settles on 2026-07-28, which keeps none."""

    async def main() -> T:
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx2.Timeout(10, read=120),
            trust_env=False,
        )
        async with http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, cache=None, mode=mode) as client:
                return await use(client)

    return asyncio.run(main())


def over_stdio(
    env: dict[str, str], args: list[str], use: Callable[[Client], Awaitable[T]]
) -> T:
    async def main() -> T:
        params = StdioServerParameters(
            command=sys.executable,
            args=[str(ROOT / "manage.py"), "mcp_serve", *args],
            cwd=str(ROOT),
            env=env,
        )
        async with Client(stdio_client(params), cache=None) as client:
            return await use(client)

    return asyncio.run(main())


def call(name: str, arguments: dict[str, Any]) -> Callable[[Client], Awaitable[Any]]:
    async def use(client: Client) -> Any:
        return await client.call_tool(name, arguments)

    return use


async def list_tools(client: Client) -> Any:
    return await client.list_tools()


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)
