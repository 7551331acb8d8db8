"""The MCP gateway on real processes: the web server serving ``/mcp/``, a Celery worker
running each call as a task, Redis; the SDK's own client connecting with a bearer
token (and over stdio to ``manage.py mcp_serve``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from effects.models import Outbox
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
