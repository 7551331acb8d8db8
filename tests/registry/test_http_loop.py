"""HTTP tools through the whole loop: registered by the API, called by the model.

Real database, the real runner, the real ``openai`` SDK against the scripted
model server, and a local HTTP server on loopback.
"""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest

from infra.logging import JsonFormatter, RedactingFilter
from registry.models import Tool
from runs.models import Message, Step, Task
from tests.support.http_servers import Reply
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask
from tests.support.scripted_model import tool_messages

pytestmark = pytest.mark.django_db(transaction=True)

ECHO_SECRET = "loop-secret-9f8e7d6c5b4a"


def lookup_definition(url: str, **http: Any) -> dict[str, Any]:
    return {
        "name": "lookup_order",
        "description": "Look up one order of the shop by its number; read-only.",
        "parameters": {
            "type": "object",
            "properties": {
                "order": {"type": "string", "description": "Order number, e.g. A-17"}
            },
            "required": ["order"],
        },
        "kind": "http",
        "risk": "read_only",
        "tags": ["demo"],
        "http": {
            "method": "GET",
            "url": url,
            "allowed_hosts": ["127.0.0.1"],
            "response_fields": ["/order/id", "/order/status"],
            **http,
        },
    }


def order_reply(hit: Any) -> Reply:
    return Reply(
        data={
            "order": {
                "id": hit.path.rsplit("/", 1)[-1],
                "status": "shipped",
                "cost": 3,
            },
            "authorization": hit.headers.get("authorization"),
            "internal": {"warehouse": "W-9"},
        }
    )


def test_an_admin_registers_an_http_tool_through_the_api(
    admin_user, api_client_for, local_server
):
    server = local_server()
    client = api_client_for(admin_user)
    definition = lookup_definition(server.url("/orders/{order}"))
    response = client.post("/api/tools/", definition, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["http"] == definition["http"]
    tool = Tool.objects.get(name="lookup_order")
    assert tool.kind == "http" and tool.version == 1
    again = client.post("/api/tools/", definition, format="json")
    assert again.status_code == 200
    listed = {t["name"]: t for t in client.get("/api/tools/").json()}
    assert listed["lookup_order"]["http"]["url"] == server.url("/orders/{order}")


def test_the_api_refuses_an_http_tool_with_unsafe_settings(admin_user, api_client_for):
    client = api_client_for(admin_user)
    definition = lookup_definition("http://169.254.169.254/latest/{order}")
    definition["http"]["query"] = {"k": "{{secret:TOKEN}}"}
    response = client.post("/api/tools/", definition, format="json")
    assert response.status_code == 400
    body = json.dumps(response.json())
    assert "169.254.169.254 is not in allowed_hosts" in body
    assert "header templates only" in body
    assert not Tool.objects.filter(name="lookup_order").exists()


def test_a_chat_user_cannot_register_an_http_tool(alice, api_client_for):
    response = api_client_for(alice).post(
        "/api/tools/", lookup_definition("http://127.0.0.1/{order}"), format="json"
    )
    assert response.status_code == 403


def test_a_model_calls_a_registered_http_tool_and_gets_the_selected_fields(
    demo, admin_user, alice, api_client_for, local_server, model
):
    server = local_server(order_reply)
    created = api_client_for(admin_user).post(
        "/api/tools/",
        lookup_definition(server.url("/orders/{order}")),
        format="json",
    )
    assert created.status_code == 201, created.content
    script = Script(
        [tool_call("lookup_order", {"order": "A-17/x"}), text("A-17 has shipped.")]
    )
    model(script)

    task = ask(alice, demo.agent, "Where is order A-17?")

    assert task.status == "succeeded", task.error_message
    assert task.final_answer == "A-17 has shipped."
    step = Step.objects.get(task=task, kind="tool_call")
    assert step.tool == "lookup_order" and step.status == "succeeded"
    assert step.result == {"order": {"id": "A-17%2Fx", "status": "shipped"}}
    assert server.hits[0].path == "/orders/A-17%2Fx"
    results = tool_messages(script.requests[1])
    assert json.loads(results[0]["content"]) == step.result


@pytest.mark.parametrize(
    ("source", "name", "secret"),
    [
        ("store", "ECHO_TOKEN", ECHO_SECRET),
        ("environment", "ENV_ECHO_TOKEN", "env-loop-secret-1a2b3c4d5e"),
    ],
)
def test_a_secret_never_appears_in_steps_tasks_messages_logs_or_exports(
    demo,
    admin_user,
    alice,
    api_client_for,
    local_server,
    model,
    monkeypatch,
    source,
    name,
    secret,
):
    from registry.secrets import secret_set
    from traces.export import trace_document

    if source == "store":
        secret_set(name=name, value=secret)
    else:
        monkeypatch.setenv(f"REACH_SECRET_{name}", secret)
    server = local_server(order_reply)
    definition = lookup_definition(
        server.url("/orders/{order}"),
        headers={"Authorization": f"Bearer {{{{secret:{name}}}}}"},
        response_fields=["/order/id", "/authorization"],
    )
    client = api_client_for(admin_user)
    assert client.post("/api/tools/", definition, format="json").status_code == 201
    script = Script([tool_call("lookup_order", {"order": "B-2"}), text("done")])
    model(script)

    with captured_logs() as (lines, raw):
        task = ask(alice, demo.agent, "Check order B-2")
        document = trace_document(task)
        api_trace = api_client_for(alice).get(f"/api/tasks/{task.pk}/trace/")
        api_steps = api_client_for(alice).get(f"/api/tasks/{task.pk}/steps/")

    assert task.status == "succeeded", task.error_message
    assert any("127.0.0.1" in line for line in lines), "no HTTP log line captured"
    # The server really got the secret: the echo is what must not leak.
    assert server.hits[0].headers["authorization"] == f"Bearer {secret}"
    step = Step.objects.get(task=task, kind="tool_call")
    assert step.result == {
        "order": {"id": "B-2"},
        "authorization": f"Bearer [REDACTED:{name}]",
    }
    rows = {
        "steps": list(Step.objects.filter(task=task).values()),
        "task": list(Task.objects.filter(pk=task.pk).values()),
        "messages": list(
            Message.objects.filter(conversation=task.conversation).values()
        ),
    }
    places = {
        "database rows": json.dumps(rows, default=str, ensure_ascii=False),
        "the model's context": json.dumps(script.requests, ensure_ascii=False),
        "the trace export": json.dumps(document, ensure_ascii=False),
        "the trace API": api_trace.content.decode(),
        "the steps API": api_steps.content.decode(),
        "log lines": "\n".join(lines),
        "log records before filtering": "\n".join(raw),
    }
    for place, content in places.items():
        assert secret not in content, f"the secret leaked into {place}"
    for place in ("database rows", "the model's context", "the trace export"):
        assert f"[REDACTED:{name}]" in places[place], place
    assert api_trace.status_code == 200 and api_steps.status_code == 200


class _RawHandler(logging.Handler):
    """Keeps every record's message as logged, before any filter ran."""

    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


class captured_logs:  # noqa: N801 - used like a function
    """Capture log output at DEBUG as production writes it (redacting filter,
    JSON lines), and the raw messages before the filter."""

    def __enter__(self) -> tuple[list[str], list[str]]:
        self.stream = io.StringIO()
        self.raw: list[str] = []
        self.lines: list[str] = []
        self.formatted = logging.StreamHandler(self.stream)
        self.formatted.addFilter(RedactingFilter())
        self.formatted.setFormatter(JsonFormatter())
        self.rawhandler = _RawHandler(self.raw)
        root = logging.getLogger()
        self.level = root.level
        root.setLevel(logging.DEBUG)
        root.handlers.insert(0, self.rawhandler)
        root.addHandler(self.formatted)
        self.quiet = {}
        for name in ("httpx", "httpcore", "registry", "openai"):
            logger = logging.getLogger(name)
            self.quiet[name] = logger.level
            logger.setLevel(logging.DEBUG)
        return self.lines, self.raw

    def __exit__(self, *exc: object) -> None:
        root = logging.getLogger()
        root.removeHandler(self.rawhandler)
        root.removeHandler(self.formatted)
        root.setLevel(self.level)
        for name, level in self.quiet.items():
            logging.getLogger(name).setLevel(level)
        self.lines.extend(self.stream.getvalue().splitlines())
