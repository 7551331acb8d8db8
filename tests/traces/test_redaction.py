"""Canary secrets planted in settings, the environment, the secret store, tool
output and model output must not appear raw in anything recorded: steps, final
answers, messages, approvals, audit rows, exports, pages, logs, websocket frames.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from typing import Any

import pytest
from django.forms.models import model_to_dict
from django.test import Client

from approvals.models import ApprovalRequest
from audit.models import AuditEvent
from engine.spec import CallContext
from infra.logging import JsonFormatter, RedactingFilter
from infra.runtime import redactor
from registry.handlers import register
from registry.secrets import secret_set
from registry.services import tool_from_definition, tool_save
from runs.models import Message, Step, Task
from tests.support.clients import logged_in
from tests.support.openai_tools import object_schema
from tests.support.replies import Script, error, text, tool_call, tool_calls
from tests.support.runs import ask, decide
from tests.support.sockets import Frame, frames_until, task_socket

pytestmark = pytest.mark.django_db(transaction=True)

OPENAI_KEY = "canary-openai-Q7x9Z2w4"
ENV_SECRET = "canary-env-M3k8P1v6"
STORED_SECRET = "canary-stored-V5n2R8t3"
SK_KEY = "sk-canaryK3y" + "a1B2c3D4e5F6g7H8"
BEARER_TOKEN = "canaryBearerTok123456"
AWS_KEY = "AKIA" + "CANARY0123456789"
PASSWORD = "canaryPass99"
URL_PASSWORD = "canaryUrlPass77"
CANARIES = [
    OPENAI_KEY,
    ENV_SECRET,
    STORED_SECRET,
    SK_KEY,
    BEARER_TOKEN,
    AWS_KEY,
    PASSWORD,
    URL_PASSWORD,
]
LEAKY_TEXT = (
    f"openai={OPENAI_KEY} env {ENV_SECRET} stored {STORED_SECRET} key {SK_KEY} "
    f"Authorization: Bearer {BEARER_TOKEN} aws {AWS_KEY} password={PASSWORD} "
    f"db https://admin:{URL_PASSWORD}@db.example.com/prod"
)
log = logging.getLogger("tests.canary_tool")


@register("canary_leak")
def canary_leak(arguments: dict[str, Any], context: CallContext) -> Any:
    """A tool whose output (and log lines, and errors) carry every canary."""
    log.warning("canary_leak read %s", LEAKY_TEXT)
    if arguments.get("mode") == "fail":
        try:
            raise ConnectionError(f"cannot reach {LEAKY_TEXT}")
        except ConnectionError:
            log.exception("canary_leak failed")
            raise
    return {"output": LEAKY_TEXT, "nested": [{"token": SK_KEY, LEAKY_TEXT: True}]}


@register("canary_store")
def canary_store(arguments: dict[str, Any], context: CallContext) -> Any:
    return {"stored": arguments.get("value"), "echo": LEAKY_TEXT}


def register_tools(admin_user: Any) -> None:
    for definition in (
        {
            "name": "canary_leak",
            "description": "Reads things that happen to hold secrets.",
            "parameters": object_schema(
                {"mode": {"type": "string"}, "note": {"type": "string"}}
            ),
            "kind": "python",
            "handler": "canary_leak",
            "tags": ["demo"],
        },
        {
            "name": "canary_store",
            "description": "Stores a value (needs approval).",
            "parameters": object_schema({"value": {"type": "string"}}, ["value"]),
            "kind": "python",
            "handler": "canary_store",
            "risk": "write",
            "approval": "always",
            "tags": ["demo"],
        },
    ):
        tool_save(tool=tool_from_definition(definition), user=admin_user)


@pytest.fixture
def canaries(settings: Any, monkeypatch: Any, use_model: Any) -> None:
    """Plant the known-value canaries where the redactor must learn them."""
    monkeypatch.setenv("REACH_SECRET_X", ENV_SECRET)
    secret_set(name="CRM_TOKEN", value=STORED_SECRET)
    original_point = use_model

    def point(server: Any) -> Any:
        original_point(server)
        settings.OPENAI_API_KEY = OPENAI_KEY
        return server

    settings.OPENAI_API_KEY = OPENAI_KEY
    redactor().refresh()
    yield point
    monkeypatch.delenv("REACH_SECRET_X")
    redactor().refresh()


@pytest.fixture
def json_log() -> Any:
    """The project's JSON log handler (formatter and redacting filter) to a buffer."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    yield buffer
    root.removeHandler(handler)


def assert_clean(where: str, text: str) -> None:
    # A cut-off secret leaks too: look for the first ten characters as well.
    leaked = [c for c in CANARIES if c in text or c[:10] in text]
    assert not leaked, f"{where} leaks {leaked}"


def rows(queryset: Any) -> str:
    return json.dumps(
        [model_to_dict(row) for row in queryset], ensure_ascii=False, default=str
    )


async def websocket_frames(
    user: Any, task_id: str, seqs: set[int]
) -> list[dict[str, Any]]:
    """Every frame a client resuming from rev 0 gets, until it has every step."""
    comm = task_socket(user, task_id)
    connected, _ = await comm.connect()
    assert connected
    await comm.send_json_to({"type": "resume", "after": 0})

    def complete(frames: list[Frame]) -> bool:
        seen = {f["step"]["seq"] for f in frames if f["type"] == "step"}
        return seqs <= seen and any(f["type"] == "task" for f in frames)

    # Live pushes may interleave with the resume: stop on content, not on order.
    frames = await frames_until(comm, complete, timeout=10)
    await comm.disconnect()
    return frames


def test_canaries_never_appear_raw_in_anything_recorded(
    canaries, alice, operator, admin_user, demo, api_client_for, json_log
):
    from tests.support.scripted_model import ScriptedModel

    register_tools(admin_user)
    script = Script(
        [
            tool_calls(
                [
                    ("canary_leak", {"mode": "ok", "note": LEAKY_TEXT}),
                    ("canary_leak", {"mode": "fail"}),
                    ("calculate", {"expression": [OPENAI_KEY, f"password={PASSWORD}"]}),
                ]
            ),
            tool_call("canary_store", {"value": LEAKY_TEXT}),
            text(f"Done. For the record: {LEAKY_TEXT}"),
            error(401, f"Incorrect API key provided: {OPENAI_KEY} ({LEAKY_TEXT})"),
        ]
    )
    with ScriptedModel(script) as server:
        canaries(server)
        task = ask(alice, demo.agent, "collect the things")
        assert task.status == "waiting_approval", task.error_message
        task = decide(task, operator, "approve")
        assert task.status == "succeeded", task.error_message
        failed = ask(alice, demo.agent, "once more")
        assert failed.status == "failed" and failed.stop_reason == "model_error"
    Client().post(
        "/accounts/login/", {"username": f"password={PASSWORD}", "password": "x"}
    )

    # The canaries did reach the product (and were redacted, not dropped).
    steps = list(Step.objects.filter(task__in=[task, failed]).order_by("task", "seq"))
    leak_ok = next(
        s for s in steps if s.tool == "canary_leak" and s.status == "succeeded"
    )
    assert "[REDACTED:X]" in leak_ok.result["output"]
    assert "[REDACTED:CRM_TOKEN]" in leak_ok.result["output"]
    assert "[REDACTED:OPENAI_API_KEY]" in leak_ok.result["output"]
    assert "[REDACTED:aws_access_key]" in json.dumps(leak_ok.result)
    failing = next(s for s in steps if s.tool == "canary_leak" and s.status == "failed")
    assert failing.error_class == "exception" and "cannot reach" in failing.error
    invalid = next(s for s in steps if s.tool == "calculate")
    assert invalid.error_class == "invalid_arguments"
    assert "[REDACTED" in failed.error_message

    # Database rows.
    assert_clean("Step rows", rows(Step.objects.all()))
    assert_clean("Task rows", rows(Task.objects.all()))
    assert_clean("Message rows", rows(Message.objects.all()))
    assert_clean("ApprovalRequest rows", rows(ApprovalRequest.objects.all()))
    assert_clean("AuditEvent rows", rows(AuditEvent.objects.all()))
    # Exports, API and pages.
    client = api_client_for(operator)
    for tid in (task.pk, failed.pk):
        assert_clean(
            "trace export", client.get(f"/api/tasks/{tid}/trace/").content.decode()
        )
        assert_clean(
            "steps API", client.get(f"/api/tasks/{tid}/steps/").content.decode()
        )
        assert_clean("task API", client.get(f"/api/tasks/{tid}/").content.decode())
        assert_clean(
            "trace page", logged_in(operator).get(f"/traces/{tid}/").content.decode()
        )
    assert_clean("approvals API", client.get("/api/approvals/").content.decode())
    assert_clean(
        "audit API", b"".join(client.get("/api/audit/").streaming_content).decode()
    )
    assert_clean(
        "conversation API",
        api_client_for(alice)
        .get(f"/api/conversations/{task.conversation_id}/")
        .content.decode(),
    )
    assert_clean(
        "chat page",
        logged_in(alice).get(f"/c/{task.conversation_id}/").content.decode(),
    )
    # Logs, through the JSON handler the product configures.
    assert "canary_leak read" in json_log.getvalue()
    assert "canary_leak failed" in json_log.getvalue()
    assert_clean("JSON log", json_log.getvalue())
    # Websocket frames a resuming client receives.
    seqs = set(task.steps.values_list("seq", flat=True))
    frames = asyncio.run(websocket_frames(operator, str(task.pk), seqs))
    assert any(f["type"] == "step" for f in frames)
    assert_clean("websocket frames", json.dumps(frames, ensure_ascii=False))


def test_a_long_model_error_is_never_cut_inside_a_key(canaries, alice, demo):
    from tests.support.scripted_model import ScriptedModel

    # The SDK's "Error code: 401 - " prefix puts the key across the 300th character.
    body = "a" * 270 + " " + OPENAI_KEY + " and more"
    with ScriptedModel(Script([error(401, body)])) as server:
        canaries(server)
        task = ask(alice, demo.agent, "hello")

    assert task.stop_reason == "model_error"
    assert "aaaa" in task.error_message
    assert_clean("the error message", task.error_message)
    assert_clean("the failed step", rows(task.steps.all()))
    assert_clean("the reply", rows(Message.objects.filter(task=task)))


def test_a_secret_added_to_the_store_is_redacted_without_a_restart(db):
    value = "canary-late-Z9y8X7w6"
    before = redactor().text(f"token {value}")
    secret_set(name="LATE", value=value)
    after = redactor().text(f"token {value}")
    assert before == f"token {value}"
    assert after == "token [REDACTED:LATE]"
