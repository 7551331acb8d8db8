"""Fixtures of the trace tests: a recorded run of the demo question, exported.

Runs are driven in-process (``tests.support.runs``) through the real ``openai``
SDK against the scripted model server on loopback, on the real database.
"""

from __future__ import annotations

from typing import Any

import pytest

from runs.models import Task
from tests.support.cast import EDITED_EMAIL, EMAIL, QUESTION
from tests.support.clients import trace_of
from tests.support.replies import Script, text, tool_call
from tests.support.runs import Exported, ask, decide
from tests.support.scripted_model import RedisScript


@pytest.fixture
def redis_script(model: Any) -> RedisScript:
    """``RedisScript``, serving as the product's model."""
    script = RedisScript()
    model(script)
    return script


@pytest.fixture
def redis_task(alice: Any, demo: Any, redis_script: RedisScript) -> Task:
    """alice's finished run of the demo question (search, calculate, answer)."""
    task = ask(alice, demo.agent, QUESTION)
    assert task.status == "succeeded", task.error_message
    return task


@pytest.fixture
def emails_waiting(alice: Any, demo: Any, model: Any) -> Task:
    """alice asks to mail the report and the model sends two emails (the second
    to the boss): the run is parked on their approvals."""
    model(
        Script(
            [
                tool_call("send_email", EMAIL),
                tool_call("send_email", {**EMAIL, "to": "boss@example.com"}),
                text("sent one, the other was refused"),
            ]
        )
    )
    return ask(alice, demo.agent, "mail the report")


@pytest.fixture
def emails_decided(emails_waiting: Task, operator: Any) -> Task:
    """``emails_waiting`` decided: the operator approves the first email as
    ``EDITED_EMAIL`` and rejects the second ("not the boss"); the run then
    finishes."""
    task = decide(emails_waiting, operator, "approve", arguments=EDITED_EMAIL)
    return decide(task, operator, "reject", reason="not the boss")


@pytest.fixture
def exported(redis_task: Task, operator: Any, api_client_for: Any) -> Exported:
    """``redis_task`` exported by the operator: the task, their client, the document."""
    client = api_client_for(operator)
    document = trace_of(client, redis_task.pk)
    return Exported(redis_task, client, document)
