"""``manage.py warm_model`` sends what a run's first model call sends, so the
model's prompt cache holds the prefix the first user shares."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from tests.support.cast import QUESTION
from tests.support.runs import ask
from tests.support.scripted_model import RedisScript

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_warm_request_is_a_runs_first_request_but_the_question(model, alice, demo):
    script = RedisScript()
    model(script)
    call_command("warm_model")
    ask(alice, demo.agent, QUESTION)
    warm, first = script.requests[0], script.requests[1]
    assert warm["max_tokens"] == 1
    assert warm["tools"] == first["tools"] and len(warm["tools"]) == 4
    assert warm["tool_choice"] == first["tool_choice"] == "auto"
    assert warm["model"] == first["model"]
    # Everything before the user's words is the same: the system prompt, then
    # the user turn (whose text is all that differs).
    assert warm["messages"][:-1] == first["messages"][:-1]
    assert [m["role"] for m in warm["messages"]] == ["system", "user"]
    assert first["messages"][-1]["content"] == QUESTION


def test_where_questions_get_no_write_a_questions_prefix_is_warmed_too(
    model, alice, demo, settings
):
    settings.QUESTIONS_READ_ONLY = True
    script = RedisScript()
    model(script)
    call_command("warm_model")
    ask(alice, demo.agent, QUESTION)
    plain, question, first = script.requests[:3]
    assert plain["max_tokens"] == question["max_tokens"] == 1
    assert len(plain["tools"]) == 4
    # The demo question is a question: its first call offers what was warmed.
    assert question["tools"] == first["tools"]
    assert {t["function"]["name"] for t in first["tools"]} == {
        "calculate",
        "search_notes",
    }
    assert question["messages"][:-1] == first["messages"][:-1]


def test_the_warm_request_is_of_the_version_chats_run_not_the_edited_row(
    model, alice, demo
):
    # The demo's assistant: v1 labelled production, the live row edited into v2
    # (a candidate). Warming v2's instructions had warmed a prompt nobody sent:
    # the first answer after start-up read its whole prompt cold.
    from reach_site.demo import (
        ASSISTANT_INSTRUCTIONS,
        ASSISTANT_INSTRUCTIONS_V2,
        seed_demo_versions,
    )

    assert seed_demo_versions()
    demo.agent.refresh_from_db()
    assert demo.agent.instructions == ASSISTANT_INSTRUCTIONS_V2
    script = RedisScript()
    model(script)
    call_command("warm_model")
    ask(alice, demo.agent, QUESTION)
    warm, first = script.requests[0], script.requests[1]
    assert warm["messages"][:-1] == first["messages"][:-1]
    assert warm["messages"][0]["content"].startswith(ASSISTANT_INSTRUCTIONS)
    assert ASSISTANT_INSTRUCTIONS_V2 not in warm["messages"][0]["content"]


def test_warming_an_unreachable_model_fails_plainly(settings, demo):
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    with pytest.raises(CommandError, match="warming the model failed"):
        call_command("warm_model")
