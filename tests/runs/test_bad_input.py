"""Bad input through a real run: a ``format`` refuses the call before it runs."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support import extra_tools
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask
from tests.support.scripted_model import tool_messages

pytestmark = pytest.mark.django_db(transaction=True)

DATE_SCHEMA = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "format": "date", "description": "The day"}
    },
    "required": ["key"],
    "additionalProperties": False,
}


@pytest.fixture(autouse=True)
def clean_tools(flush_redis: None) -> Iterator[None]:
    extra_tools.reset()
    yield
    extra_tools.RELEASE.set()


def test_a_write_given_tomorrow_for_a_date_is_refused_and_the_model_told(
    alice, demo, model
):
    extra_tools.install("count_lookup", schema=DATE_SCHEMA, risk="write")
    script = Script(
        [
            tool_call("count_lookup", {"key": "明天"}),
            text("Which day exactly? I need YYYY-MM-DD."),
        ]
    )
    model(script)

    task = ask(alice, demo.agent, "明天帮我登记一下")

    assert (task.status, task.stop_reason) == ("succeeded", "final_answer")
    [step] = task.steps.filter(kind="tool_call")
    assert (step.status, step.error_class) == ("failed", "invalid_arguments")
    assert "expected YYYY-MM-DD" in step.error
    assert step.arguments is None
    # The write never ran.
    assert extra_tools.EXECUTIONS["count_lookup"] == 0
    [observation] = tool_messages(script.requests[1])
    assert (
        "'明天' is not a valid date: expected YYYY-MM-DD"
        in (json.loads(observation["content"])["error"])
    )
