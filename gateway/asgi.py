"""The gateway's HTTP face: MCP streamable HTTP under ``/mcp/``, bearer tokens only.

Stateless mode: each POST carries its whole exchange, so any web process behind a
load balancer can answer any request (docs/design.md "Processes": no process keeps
state another needs). Daphne speaks no ASGI lifespan, so the SDK's session manager
(which owns the task group its per-request servers run in) is started on the first
request and lives as long as the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from asgiref.sync import sync_to_async
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from gateway.server import build_server, current_user
from runs.api.auth import token_user

Scope = dict[str, Any]


class MCPGateway:
    """ASGI app: check ``Authorization: Bearer <token>``, then hand the request to
    the SDK with the token's user in :data:`gateway.server.current_user`."""

    def __init__(self) -> None:
        self.manager = StreamableHTTPSessionManager(app=build_server(), stateless=True)
        self._started: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None

    async def _ensure_started(self) -> None:
        if self._started is None:
            started = self._started = asyncio.Event()

            async def run() -> None:
                async with self.manager.run():
                    started.set()
                    await asyncio.Event().wait()  # Until the loop ends.

            # Kept on self: a task nobody references may be collected mid-run.
            self._runner = asyncio.get_running_loop().create_task(run())
        await self._started.wait()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        user = await sync_to_async(_bearer_user)(scope)
        if user is None:
            await _refuse(send)
            return
        await self._ensure_started()
        token = current_user.set(user)
        try:
            await self.manager.handle_request(scope, receive, send)
        finally:
            with contextlib.suppress(ValueError):
                current_user.reset(token)


def _bearer_user(scope: Scope) -> Any:
    header = dict(scope.get("headers") or []).get(b"authorization", b"")
    scheme, _, key = header.decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return None
    found = token_user(key.strip())
    return found[0] if found is not None else None


async def _refuse(send: Any) -> None:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32001,
                "message": "Send Authorization: Bearer <API token>.",
            },
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="agent-reach"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
