"""The MCP server (the SDK's low-level ``Server``): ``tools/list`` and ``tools/call``.

Who calls is set per request by the transport (:data:`current_user`: the bearer
token's user over HTTP, the command's user over stdio), and so is the MCP session
it belongs to (:data:`current_session`); the SDK carries context
variables across its internal streams, so the handlers see it. Every ORM access
runs in a thread (``sync_to_async``): the handlers run on the event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from typing import Any

import mcp_types as types
from asgiref.sync import sync_to_async
from django.utils import timezone
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from engine.spec import ApprovalMode, Risk
from gateway.services import (
    CallOutcome,
    GatewayError,
    gateway_agent,
    gateway_call_outcome,
    gateway_call_start,
    gateway_tools,
    max_wait_s,
    wait_bound_s,
)

log = logging.getLogger(__name__)

#: The user an MCP request acts for; no user, no tools.
current_user: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "mcp_user", default=None
)
#: The MCP session a request belongs to (its taint scope: gateway.selectors);
#: blank when the client keeps none.
current_session: contextvars.ContextVar[str] = contextvars.ContextVar(
    "mcp_session", default=""
)
#: How often a waiting call looks at its task row.
POLL_S = 0.2

INSTRUCTIONS = (
    "Tools registered in Agent Reach, under its policy. Every call is recorded as "
    "a task; a risky call waits for a human's approval and returns the result or "
    "the rejection reason. After a read of untrusted content (in this session, or "
    "by the same user shortly before), every write waits for approval too."
)


def mcp_tool(definition: dict[str, Any]) -> types.Tool:
    """A registry tool definition as MCP lists it (risk tiers as annotations)."""
    # No risk given: announced as a write (not ToolSpec's read-only default), so
    # that a client never takes a tool it knows nothing of for a harmless read.
    risk = str(definition.get("risk") or Risk.WRITE)
    parameters = definition.get("parameters") or {}
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        parameters = {"type": "object", "properties": {}}
    return types.Tool(
        name=str(definition["name"]),
        description=str(definition.get("description") or "") or None,
        input_schema=parameters,
        annotations=types.ToolAnnotations(
            read_only_hint=risk == Risk.READ_ONLY,
            destructive_hint=risk == Risk.IRREVERSIBLE,
            idempotent_hint=bool(definition.get("idempotent", False)),
            open_world_hint=bool(definition.get("leaves_house", False)),
        ),
        _meta={
            "agent-reach/risk": risk,
            "agent-reach/approval": str(
                definition.get("approval") or ApprovalMode.NEVER
            ),
        },
    )


def _user() -> Any:
    user = current_user.get()
    if user is None:
        raise GatewayError("No user: connect with a bearer token.")
    return user


def build_server(*, agent_name: str | None = None) -> Server[Any]:
    """The gateway's MCP server over the tools of ``agent_name`` (None: the default)."""

    def tools_sync(user: Any) -> list[types.Tool]:
        agent = gateway_agent(name=agent_name, user=user)
        return [mcp_tool(d) for d in gateway_tools(agent=agent, user=user)]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        user = _user()
        return types.ListToolsResult(tools=await sync_to_async(tools_sync)(user))

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        user = _user()
        try:
            agent = await sync_to_async(gateway_agent)(name=agent_name, user=user)
            task = await sync_to_async(gateway_call_start)(
                user=user,
                agent=agent,
                tool=params.name,
                arguments=params.arguments or {},
                session=current_session.get(),
            )
        except (GatewayError, ValueError) as exc:
            return _error(str(exc))
        outcome = await wait_for_outcome(task.pk)
        return as_result(outcome)

    return Server(
        "agent-reach",
        version="1",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def wait_for_outcome(task_id: Any, *, poll_s: float = POLL_S) -> CallOutcome:
    """Wait for the call's task to finish: while it runs, for its time budget; while
    it is parked, until its approval expires (the approval TTL); either capped by
    ``REACH_MCP_MAX_WAIT_S``. At the bound, the outcome says what it waits for."""
    started = time.monotonic()
    cap = await sync_to_async(max_wait_s)()
    running_bound = await sync_to_async(wait_bound_s)(task_id=task_id)
    while True:
        outcome = await sync_to_async(gateway_call_outcome)(task_id=task_id)
        if outcome.done:
            return outcome
        waited = time.monotonic() - started
        if outcome.approval_expires_at is not None:
            # Past the TTL the beat expires it; a little slack to see that happen.
            left = (outcome.approval_expires_at - timezone.now()).total_seconds() + 5
            over = left <= 0
        else:
            over = waited >= running_bound
        if over or (cap is not None and waited >= cap):
            return outcome
        await asyncio.sleep(poll_s)


def as_result(outcome: CallOutcome) -> types.CallToolResult:
    structured = outcome.result if isinstance(outcome.result, dict) else None
    return types.CallToolResult(
        content=[types.TextContent(text=outcome.text)],
        structured_content=structured,
        is_error=outcome.is_error,
        _meta={f"agent-reach/{k}": v for k, v in outcome.meta().items()},
    )


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
