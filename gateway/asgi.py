"""The gateway's HTTP face: MCP streamable HTTP under ``/mcp/``, bearer tokens only.

Stateless mode: each POST carries its whole exchange, so any web process behind a
load balancer can answer any request (docs/design.md "Processes": no process keeps
state another needs). Daphne speaks no ASGI lifespan, so the SDK's session manager
(which owns the task group its per-request servers run in) is started on the first
request and lives as long as the event loop.

Stateless for the SDK, but not without sessions: the answer to ``initialize``
carries an ``Mcp-Session-Id`` this layer mints, the client sends it back on every
later request, and the handlers see it as :data:`gateway.server.current_session`,
the taint scope of its calls (:mod:`gateway.selectors`). It names a scope in the
database, not a process's state, so any process still answers any request. With
no server-to-client stream to offer, a GET is answered 405, as the transport
allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from gateway.server import build_server, current_session, current_user
from runs.api.auth import token_user

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

SESSION_HEADER = b"mcp-session-id"
#: A session id as the transport allows it (visible ASCII), and short.
_SESSION_ID = re.compile(r"^[\x21-\x7e]{1,128}$")
#: An ``initialize`` request is small: a longer body is not looked into.
_PEEK_LIMIT = 64 * 1024


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
        if scope.get("method") == "GET":
            await _send_json(
                send,
                405,
                {"error": "No server-to-client stream: POST requests."},
                [(b"allow", b"POST, DELETE")],
            )
            return
        session = _session_of(scope)
        if not session and scope.get("method") == "POST":
            receive, initializing = await _peek_initialize(receive)
            if initializing:
                session = f"mcp_{uuid.uuid4().hex}"
                send = _with_session_header(send, session)
        await self._ensure_started()
        token = current_user.set(user)
        session_token = current_session.set(session)
        try:
            await self.manager.handle_request(scope, receive, send)
        finally:
            with contextlib.suppress(ValueError):
                current_session.reset(session_token)
            with contextlib.suppress(ValueError):
                current_user.reset(token)


def _session_of(scope: Scope) -> str:
    """The request's ``Mcp-Session-Id``; blank when absent or malformed."""
    value = dict(scope.get("headers") or []).get(SESSION_HEADER, b"")
    text = value.decode("latin-1").strip()
    return text if _SESSION_ID.match(text) else ""


async def _peek_initialize(receive: Receive) -> tuple[Receive, bool]:
    """Whether the request's body is an ``initialize`` request, and a ``receive``
    that hands the SDK the body read to find out, then the rest."""
    read: list[Message] = []
    size = 0
    more = True
    while more and size <= _PEEK_LIMIT:
        message = await receive()
        read.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        more = bool(message.get("more_body", False))
    body = b"".join(m.get("body", b"") for m in read if m["type"] == "http.request")

    async def replay() -> Message:
        return read.pop(0) if read else await receive()

    return replay, not more and _is_initialize(body)


def _is_initialize(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return False
    requests = data if isinstance(data, list) else [data]
    return any(
        isinstance(r, dict) and r.get("method") == "initialize" for r in requests
    )


def _with_session_header(send: Send, session: str) -> Send:
    """``send`` with ``Mcp-Session-Id: session`` on the response's start."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [
                (k, v)
                for k, v in message.get("headers") or []
                if k.lower() != SESSION_HEADER
            ]
            headers.append((SESSION_HEADER, session.encode("ascii")))
            message = {**message, "headers": headers}
        await send(message)

    return sending


def _bearer_user(scope: Scope) -> Any:
    header = dict(scope.get("headers") or []).get(b"authorization", b"")
    scheme, _, key = header.decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return None
    found = token_user(key.strip())
    return found[0] if found is not None else None


async def _refuse(send: Any) -> None:
    await _send_json(
        send,
        401,
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32001,
                "message": "Send Authorization: Bearer <API token>.",
            },
        },
        [(b"www-authenticate", b'Bearer realm="agent-reach"')],
    )


async def _send_json(
    send: Any,
    status: int,
    data: Any,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps(data).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                *(headers or []),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
