"""The JSON API: authentication, ownership, shapes of docs/api.md."""

from __future__ import annotations

from dataclasses import fields

import pytest
from rest_framework.test import APIClient

from engine.spec import StepRecord
from runs import services as runs
from runs.models import Conversation, Step, Task
from runs.payloads import STEP_KEYS, step_payload
from tests.support.clients import import_trace, trace_of
from tests.support.runs import start

pytestmark = pytest.mark.django_db


def test_api_without_credentials_answers_401():
    client = APIClient()
    for path in ["/api/agents/", "/api/conversations/", "/api/tools/"]:
        response = client.get(path)
        assert response.status_code == 401, path
        assert response["WWW-Authenticate"] == "Bearer"


def test_a_revoked_or_unknown_token_answers_401(alice, api_client_for):
    from runs.api.auth import token_issue, token_revoke

    token, key = token_issue(user=alice)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/agents/").status_code == 200
    token_revoke(token=token)
    assert client.get("/api/agents/").status_code == 401
    client.credentials(HTTP_AUTHORIZATION="Bearer nonsense")
    assert client.get("/api/agents/").status_code == 401


def test_agents_list_names_the_demo_agents_and_their_tools(alice, api_client_for):
    response = api_client_for(alice).get("/api/agents/")
    assert response.status_code == 200
    # The assistant, the triage agent that hands off to it (no tools), and the
    # extractor, whose answer is structured.
    extractor, triage, agent = response.json()
    assert (extractor["name"], extractor["answer_schema"]["required"]) == (
        "extractor",
        ["summary", "plans"],
    )
    assert agent["answer_schema"] is None
    assert agent["name"] == "assistant"
    assert set(agent["tools"]) == {
        "calculate",
        "search_notes",
        "create_ticket",
        "send_email",
    }
    assert (triage["name"], triage["tools"], triage["default"]) == (
        "triage",
        [],
        False,
    )


def test_create_conversation_and_post_a_message_returns_202_with_the_task(
    alice, api_client_for
):
    client = api_client_for(alice)
    created = client.post("/api/conversations/", {}, format="json")
    assert created.status_code == 201
    body = created.json()
    assert set(body) >= {"id", "agent", "created_at"}
    assert body["agent"] == "assistant"
    posted = client.post(
        f"/api/conversations/{body['id']}/messages/", {"content": "你好"}, format="json"
    )
    assert posted.status_code == 202
    task = Task.objects.get(pk=posted.json()["task"])
    assert task.status == "queued"
    assert task.goal == "你好"
    detail = client.get(f"/api/conversations/{body['id']}/").json()
    assert detail["messages"][0] == {
        "role": "user",
        "content": "你好",
        "task": str(task.pk),
        "created_at": detail["messages"][0]["created_at"],
    }


def test_a_second_message_while_a_task_is_active_answers_409_with_that_task(
    alice, api_client_for
):
    # The 409 is what a conversation that refuses does (the default queues:
    # tests/runs/test_on_busy.py).
    client = api_client_for(alice)
    conversation = client.post(
        "/api/conversations/", {"on_busy": "refuse"}, format="json"
    ).json()
    url = f"/api/conversations/{conversation['id']}/messages/"
    first = client.post(url, {"content": "one"}, format="json").json()
    second = client.post(url, {"content": "two"}, format="json")
    assert second.status_code == 409
    assert second.json()["task"] == first["task"]


def test_a_message_to_a_conversation_holding_an_imported_trace_is_a_409(
    alice, operator, demo, api_client_for
):
    task = start(alice, demo.agent, "hello")
    Task.objects.filter(pk=task.pk).update(status="succeeded")
    auditor = api_client_for(operator)
    document = trace_of(auditor, task.pk)
    imported = Task.objects.get(pk=import_trace(auditor, document).json()["task"])

    url = f"/api/conversations/{imported.conversation_id}/messages/"
    answer = auditor.post(url, {"content": "go on"}, format="json")
    assert answer.status_code == 409
    body = answer.json()
    assert "read-only" in body["error"] and body["detail"] == body["error"]
    assert "task" not in body
    assert imported.conversation.tasks.count() == 1


def test_an_empty_or_oversized_message_is_a_400(alice, api_client_for, settings):
    client = api_client_for(alice)
    conversation = client.post("/api/conversations/", {}, format="json").json()
    url = f"/api/conversations/{conversation['id']}/messages/"
    assert client.post(url, {"content": "  "}, format="json").status_code == 400
    settings.REACH_MAX_MESSAGE_CHARS = 10
    response = client.post(url, {"content": "x" * 11}, format="json")
    assert response.status_code == 400
    assert "10" in response.json()["content"][0]


def test_alice_gets_404_for_bobs_conversations_and_tasks(
    alice, bob, demo, api_client_for
):
    conversation = runs.conversation_create(owner=bob, agent=demo.agent)
    task = runs.task_start(conversation=conversation, content="bob's secret plan")
    client = api_client_for(alice)
    for path in [
        f"/api/conversations/{conversation.pk}/",
        f"/api/tasks/{task.pk}/",
        f"/api/tasks/{task.pk}/steps/",
        f"/api/tasks/{task.pk}/trace/",
    ]:
        assert client.get(path).status_code == 404, path
    assert (
        client.post(
            f"/api/conversations/{conversation.pk}/messages/",
            {"content": "hi"},
            format="json",
        ).status_code
        == 404
    )
    assert client.post(f"/api/tasks/{task.pk}/cancel/").status_code == 404
    assert conversation.pk not in [
        c["id"] for c in client.get("/api/conversations/").json()
    ]


def test_the_operator_reads_every_task_but_may_not_cancel_it(
    bob, operator, demo, api_client_for
):
    task = start(bob, demo.agent, "hello")
    client = api_client_for(operator)
    assert client.get(f"/api/tasks/{task.pk}/").status_code == 200
    assert client.post(f"/api/tasks/{task.pk}/cancel/").status_code == 403


def test_the_task_detail_reads_only_the_payloads_columns_and_shows_them_all(
    alice, demo, api_client_for
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from infra.api.common import redacted
    from runs.payloads import task_payload

    task = start(alice, demo.agent, "hello")
    client = api_client_for(alice)
    client.get(f"/api/tasks/{task.pk}/")  # the token's last use is recorded once
    with CaptureQueriesContext(connection) as queries:
        body = client.get(f"/api/tasks/{task.pk}/").json()

    full = Task.objects.select_related("agent", "owner").get(pk=task.pk)
    assert body == redacted(task_payload(full))
    # The token, then the task with its agent and owner: no snapshot column.
    assert len(queries.captured_queries) == 2, queries.captured_queries
    assert "agent_snapshot" not in queries.captured_queries[-1]["sql"]


def test_task_shape_has_every_key_of_the_api(alice, demo, api_client_for):
    conversation = runs.conversation_create(owner=alice, agent=demo.agent)
    task = runs.task_start(conversation=conversation, content="hello")
    body = api_client_for(alice).get(f"/api/tasks/{task.pk}/").json()
    for key in [
        "id",
        "conversation",
        "agent",
        "model",
        "status",
        "stop_reason",
        "final_answer",
        "usage",
        "steps",
        "parent",
        "created_at",
        "finished_at",
    ]:
        assert key in body
    assert body["usage"] == {
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
    }
    assert body["parent"] is None


def test_cancel_a_queued_task_finishes_it_and_a_second_cancel_is_409(
    alice, demo, api_client_for
):
    task = start(alice, demo.agent, "hello")
    client = api_client_for(alice)
    response = client.post(f"/api/tasks/{task.pk}/cancel/")
    assert response.status_code == 202
    assert response.json()["status"] == "cancelled"
    assert response.json()["stop_reason"] == "cancelled"
    assert client.post(f"/api/tasks/{task.pk}/cancel/").status_code == 409


def test_lists_are_bare_arrays_limited_with_a_link_to_the_next_page(
    alice, demo, api_client_for
):
    for _ in range(3):
        runs.conversation_create(owner=alice, agent=demo.agent)
    client = api_client_for(alice)
    page = client.get("/api/conversations/?limit=2")
    assert isinstance(page.json(), list) and len(page.json()) == 2
    assert 'rel="next"' in page["Link"]
    next_url = page["Link"].split(">")[0].lstrip("<")
    rest = client.get(next_url)
    assert len(rest.json()) == 1
    assert "Link" not in rest


def test_json_is_utf8_with_non_ascii_unescaped(alice, api_client_for):
    response = api_client_for(alice).get("/api/notes/?q=Redis")
    assert "缓存改造".encode() in response.content


def test_only_admins_register_tools(alice, admin_user, api_client_for):
    definition = {
        "name": "lookup_order",
        "description": "Look up an order by its id. Returns status and total.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "Order id"}},
            "required": ["order_id"],
        },
        "kind": "python",
        "handler": "calculate",
    }
    assert (
        api_client_for(alice).post("/api/tools/", definition, format="json").status_code
        == 403
    )
    admin = api_client_for(admin_user)
    created = admin.post("/api/tools/", definition, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["version"] == 1
    same = admin.post("/api/tools/", definition, format="json")
    assert same.status_code == 200 and same.json()["version"] == 1
    changed = admin.post(
        "/api/tools/",
        {**definition, "description": definition["description"] + " Fast."},
        format="json",
    )
    assert changed.status_code == 201 and changed.json()["version"] == 2
    versions = admin.get("/api/tools/lookup_order/versions/").json()
    assert [v["version"] for v in versions] == [2, 1]
    assert versions[0]["changed_by"] == "admin"


def test_a_tool_with_a_bad_schema_is_rejected_with_the_reason(
    admin_user, api_client_for
):
    response = api_client_for(admin_user).post(
        "/api/tools/",
        {
            "name": "bad_tool",
            "description": "Bad.",
            "parameters": {"type": "array"},
            "kind": "python",
            "handler": "calculate",
        },
        format="json",
    )
    assert response.status_code == 400
    assert "object" in str(response.json()["parameters"])


def test_notes_can_be_added_by_admins_and_auditors_only(
    alice, operator, api_client_for
):
    note = {"title": "新方案", "content": "预算表达式为 1 + 1。"}
    assert (
        api_client_for(alice).post("/api/notes/", note, format="json").status_code
        == 403
    )
    created = api_client_for(operator).post("/api/notes/", note, format="json")
    assert created.status_code == 201
    assert created.json()["title"] == "新方案"


def test_healthz_reports_database_and_redis(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["database"] == "ok" and body["redis"] == "ok"
    assert "workers" in body


def test_openapi_schema_is_served(alice, api_client_for):
    response = api_client_for(alice).get("/api/schema/")
    assert response.status_code == 200
    assert b"/api/conversations/" in response.content


def test_a_step_has_the_same_keys_in_the_payload_the_schema_and_the_record(
    alice, api_client_for
):
    schema = api_client_for(alice).get("/api/schema/?format=json").json()
    documented = schema["components"]["schemas"]["StepSchema"]
    assert list(documented["properties"]) == list(STEP_KEYS)
    assert sorted(documented["required"]) == sorted(STEP_KEYS)
    step = Step(seq=1, rev=1, kind=Step.Kind.NOTE, status=Step.Status.SUCCEEDED)
    assert list(step_payload(step)) == list(STEP_KEYS)
    # Every field the engine records is in the payload (and nothing else but the
    # derived duration): a new field of StepRecord fails here until it is.
    assert set(STEP_KEYS) == {f.name for f in fields(StepRecord)} | {"duration_ms"}


def test_conversation_model_is_not_shared(alice, bob, demo):
    runs.conversation_create(owner=alice, agent=demo.agent)
    assert Conversation.objects.filter(owner=bob).count() == 0


def test_tool_and_agent_lists_are_newest_first(admin_user, api_client_for):
    from registry.models import Agent

    client = api_client_for(admin_user)
    created = client.post(
        "/api/tools/",
        {
            "name": "lookup_order",
            "description": "Look up an order by its id. Returns status and total.",
            "parameters": {"type": "object", "properties": {}},
            "kind": "python",
            "handler": "calculate",
        },
        format="json",
    )
    assert created.status_code == 201
    assert client.get("/api/tools/").json()[0]["name"] == "lookup_order"
    Agent.objects.create(name="support", description="Support desk.")
    assert [a["name"] for a in client.get("/api/agents/").json()] == [
        "support",
        "extractor",
        "triage",
        "assistant",
    ]


def test_the_task_list_shows_ones_own_tasks_newest_first_as_the_detail_does(
    alice, bob, demo, api_client_for
):
    first = start(alice, demo.agent, "first")
    second = start(alice, demo.agent, "second")
    start(bob, demo.agent, "bob's")
    client = api_client_for(alice)
    listed = client.get("/api/tasks/").json()
    assert [t["id"] for t in listed] == [str(second.pk), str(first.pk)]
    assert listed[0] == client.get(f"/api/tasks/{second.pk}/").json()
    assert [t["goal"] for t in api_client_for(bob).get("/api/tasks/").json()] == [
        "bob's"
    ]
