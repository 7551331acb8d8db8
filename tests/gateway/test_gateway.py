"""The MCP gateway on real processes: the web server serving ``/mcp/``, a Celery worker
running each call as a task, Redis; the SDK's own client connecting with a bearer
token (and over stdio to ``manage.py mcp_serve``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from effects.models import Outbox, Ticket
from gateway.models import McpCall
from runs.models import Task
from tests.support.cast import EMAIL
from tests.support.clients import bearer_token
from tests.support.stack import Stack
from tests.support.waiting import wait_for

from .mcp_clients import call, list_tools, over_http, over_stdio, text_of

pytestmark = [pytest.mark.integration]


def _pending(task_owner) -> ApprovalRequest | None:
    return (
        ApprovalRequest.objects.filter(
            task__owner=task_owner, status=ApprovalRequest.Status.PENDING
        )
        .select_related("task")
        .first()
    )


@pytest.fixture
def gateway(stack: Stack, demo):
    stack.start_worker()
    stack.start_web()
    return stack.web_url + "/mcp/"


def test_a_client_lists_the_tools_and_gets_a_read_only_result_at_once(
    gateway, alice, stack: Stack
):
    token = bearer_token(alice)
    listed = over_http(gateway, token, list_tools)
    tools = {tool.name: tool for tool in listed.tools}
    assert {"calculate", "search_notes", "send_email", "create_ticket"} <= set(tools)
    assert tools["calculate"].annotations.read_only_hint is True
    assert tools["send_email"].annotations.destructive_hint is True
    assert tools["send_email"].input_schema["required"] == ["to", "subject", "body"]

    result = over_http(
        gateway, token, call("calculate", {"expression": "128 * 6 + 320"})
    )
    assert not result.is_error, text_of(result)
    assert "1088" in text_of(result)
    task_id = result.meta["agent-reach/task"]

    # Recorded as a task of the token's user, with the call as its trace.
    http = stack.api({"Authorization": f"Bearer {token}"})
    listed_tasks = http.get("/api/tasks/").json()
    assert task_id in [t["id"] for t in listed_tasks]
    task = http.get(f"/api/tasks/{task_id}/").json()
    assert task["status"] == "succeeded" and "1088" in task["final_answer"]
    steps = http.get(f"/api/tasks/{task_id}/steps/").json()["steps"]
    assert [(s["kind"], s["tool"], s["status"]) for s in steps] == [
        ("model_call", None, "succeeded"),
        ("tool_call", "calculate", "succeeded"),
        ("model_call", None, "succeeded"),
    ]


def test_arguments_are_validated_and_the_refusal_recorded(gateway, alice):
    token = bearer_token(alice)
    result = over_http(gateway, token, call("send_email", {"to": "ops@example.com"}))
    assert result.is_error
    assert "failed" in text_of(result) and "subject" in text_of(result)
    task = Task.objects.get(pk=result.meta["agent-reach/task"])
    step = task.steps.get(kind="tool_call")
    assert step.status == "failed" and not ApprovalRequest.objects.filter(task=task)


def test_a_write_waits_for_a_human_and_returns_its_result_once_approved(
    gateway, alice, operator
):
    token = bearer_token(alice)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(over_http, gateway, token, call("send_email", EMAIL))
        approval = wait_for(lambda: _pending(alice), 30, what="the approval request")
        assert approval.tool == "send_email" and approval.arguments == EMAIL
        assert not future.done(), "the MCP call waits for the decision"
        approval_decide(approval=approval, user=operator, decision="approve")
        result = future.result(timeout=60)

    assert not result.is_error, text_of(result)
    assert result.meta["agent-reach/task"] == str(approval.task_id)
    task = Task.objects.get(pk=approval.task_id)
    assert task.status == "succeeded"
    step = task.steps.get(kind="tool_call")
    # Exactly once: one outbox row under the call's idempotency key.
    assert Outbox.objects.filter(idempotency_key=step.idempotency_key).count() == 1
    assert Outbox.objects.count() == 1


def test_a_rejected_write_returns_the_reason(gateway, alice, operator):
    token = bearer_token(alice)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(over_http, gateway, token, call("send_email", EMAIL))
        approval = wait_for(lambda: _pending(alice), 30, what="the approval request")
        approval_decide(
            approval=approval,
            user=operator,
            decision="reject",
            reason="Not to ops this week.",
        )
        result = future.result(timeout=60)

    assert result.is_error
    assert text_of(result) == "Rejected by operator: Not to ops this week."
    assert not Outbox.objects.exists()


def test_a_bad_or_missing_token_is_refused(gateway, alice):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in ({}, {"Authorization": "Bearer reach_not-a-token"}):
        response = httpx.post(gateway, json=body, headers={**headers, **auth})
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert not Task.objects.exists()


def test_stdio_command_serves_the_same_tools_as_its_user(stack: Stack, demo, alice):
    stack.start_worker()
    result = over_stdio(
        stack.env,
        ["--user", "alice"],
        call("calculate", {"expression": "128 * 6 + 320"}),
    )
    assert not result.is_error, text_of(result)
    assert "1088" in text_of(result)
    task = Task.objects.get(pk=result.meta["agent-reach/task"])
    assert task.owner == alice and task.status == "succeeded"


# -- taint: an MCP session, and the user's window --------------------------------

TICKET = {"title": "Rotate the keys", "body": "Before Friday."}


@pytest.fixture
def short_wait_gateway(stack: Stack, demo):
    """The gateway answering a parked call after 2 s (that it waits), not at the TTL."""
    stack.env["REACH_MCP_MAX_WAIT_S"] = "2"
    stack.start_worker()
    stack.start_web()
    return stack.web_url + "/mcp/"


def _read_then_write(read_tool: str, read_arguments: dict):
    async def use(client):
        read = await client.call_tool(read_tool, read_arguments)
        write = await client.call_tool("create_ticket", TICKET)
        return read, write

    return use


def test_in_one_session_a_write_after_an_untrusted_read_waits_for_approval(
    short_wait_gateway, alice
):
    token = bearer_token(alice)
    read, write = over_http(
        short_wait_gateway,
        token,
        _read_then_write("search_notes", {"keyword": "Redis"}),
        mode="legacy",
    )
    assert not read.is_error, text_of(read)
    (source,) = Task.objects.get(pk=read.meta["agent-reach/task"]).tainted_by

    assert write.is_error
    assert write.meta["agent-reach/status"] == "waiting_approval"
    assert write.meta["agent-reach/tainted_by"] == [source]
    approval = ApprovalRequest.objects.get(pk=write.meta["agent-reach/approval"])
    assert approval.tool == "create_ticket" and approval.status == "pending"
    assert "waits for a human's approval" in text_of(write)
    assert source in text_of(write)
    assert not Ticket.objects.exists()
    # One session, minted by the gateway on initialize and sent back by the SDK.
    (session,) = {c.session for c in McpCall.objects.filter(user=alice)}
    assert session.startswith("mcp_")


def test_a_fresh_session_within_the_window_waits_too(short_wait_gateway, alice):
    token = bearer_token(alice)
    read = over_http(
        short_wait_gateway,
        token,
        call("search_notes", {"keyword": "Redis"}),
        mode="legacy",
    )
    assert not read.is_error, text_of(read)
    (source,) = Task.objects.get(pk=read.meta["agent-reach/task"]).tainted_by
    # Another session, then a client on 2026-07-28 (which keeps no session).
    for mode in ("legacy", "auto"):
        write = over_http(
            short_wait_gateway, token, call("create_ticket", TICKET), mode=mode
        )
        assert write.is_error, text_of(write)
        assert write.meta["agent-reach/status"] == "waiting_approval"
        assert write.meta["agent-reach/tainted_by"] == [source]
    assert not Ticket.objects.exists()
    first, second, sessionless = (
        c.session for c in McpCall.objects.order_by("created_at")
    )
    assert first and second and first != second and sessionless == ""


def test_a_session_of_trusted_reads_writes_at_once(short_wait_gateway, alice):
    token = bearer_token(alice)
    read, write = over_http(
        short_wait_gateway,
        token,
        _read_then_write("calculate", {"expression": "128 * 6"}),
        mode="legacy",
    )
    assert not read.is_error and not write.is_error, text_of(write)
    assert write.meta["agent-reach/status"] == "succeeded"
    assert Ticket.objects.get().title == TICKET["title"]
    assert not ApprovalRequest.objects.exists()


def test_the_session_id_comes_with_initialize_and_a_get_stream_is_refused(
    gateway, alice
):
    headers = {
        "Authorization": f"Bearer {bearer_token(alice)}",
        "Accept": "application/json, text/event-stream",
    }
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "1"},
        },
    }
    first = httpx.post(gateway, json=init, headers=headers)
    assert first.status_code == 200, first.text
    session = first.headers["mcp-session-id"]
    assert session.startswith("mcp_")
    again = httpx.post(gateway, json=init, headers=headers)
    assert again.headers["mcp-session-id"] != session
    listed = httpx.post(
        gateway,
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        headers={**headers, "Mcp-Session-Id": session},
    )
    assert listed.status_code == 200 and "mcp-session-id" not in listed.headers
    stream = httpx.get(gateway, headers={**headers, "Mcp-Session-Id": session})
    assert stream.status_code == 405


def test_a_stdio_process_is_one_session(stack: Stack, demo, alice):
    stack.start_worker()
    env = {**stack.env, "REACH_MCP_MAX_WAIT_S": "2"}
    read, write = over_stdio(
        env, ["--user", "alice"], _read_then_write("search_notes", {"keyword": "Redis"})
    )
    assert not read.is_error, text_of(read)
    assert write.is_error and write.meta["agent-reach/status"] == "waiting_approval"
    assert not Ticket.objects.exists()
    (session,) = {c.session for c in McpCall.objects.filter(user=alice)}
    assert session.startswith("stdio_")
