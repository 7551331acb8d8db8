"""What people type is redacted too: chat messages, rejection reasons, log extras."""

from __future__ import annotations

import json
import logging

import pytest

from approvals.services import approval_decide
from infra.logging import JsonFormatter, RedactingFilter
from runs import tasks as run_tasks
from runs.models import Message
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask

pytestmark = pytest.mark.django_db(transaction=True)

CANARY_KEY = "sk-canaryUSERTYPED0123456789abcdef"


def test_a_secret_typed_into_the_chat_is_stored_and_sent_redacted(alice, demo, model):
    script = Script([text("noted")])
    model(script)
    task = ask(alice, demo.agent, f"my key is {CANARY_KEY}, keep it safe")
    assert CANARY_KEY not in task.goal
    assert "[REDACTED:api_key]" in task.goal
    stored = Message.objects.get(task=task, role="user").content
    assert CANARY_KEY not in stored
    assert CANARY_KEY not in json.dumps(script.requests, ensure_ascii=False)


def test_a_secret_in_a_rejection_reason_never_reaches_the_model_or_the_trace(
    alice, operator, demo, model
):
    script = Script(
        [
            tool_call(
                "send_email",
                {"to": "ops@example.com", "subject": "report", "body": "hi"},
            ),
            text("ok"),
        ]
    )
    model(script)
    task = ask(alice, demo.agent, "mail ops")
    approval = task.approvals.get()
    decided = approval_decide(
        approval=approval,
        user=operator,
        decision="reject",
        reason=f"never send with password=hunter2secret or {CANARY_KEY}",
    )
    assert "hunter2secret" not in decided.reason
    assert CANARY_KEY not in decided.reason
    run_tasks.task_advance(task_id=task.pk)
    step = task.steps.get(tool="send_email")
    assert "hunter2secret" not in json.dumps(step.detail)
    assert "hunter2secret" not in json.dumps(script.requests, ensure_ascii=False)


def test_log_extras_are_redacted_before_they_are_written():
    record = logging.makeLogRecord(
        {
            "msg": "calling %s",
            "args": ("the model",),
            "headers": {"Authorization": f"Bearer {CANARY_KEY}"},
            "note": f"key={CANARY_KEY}",
        }
    )
    assert RedactingFilter().filter(record)
    line = JsonFormatter().format(record)
    assert CANARY_KEY not in line
    assert json.loads(line)["message"] == "calling the model"
