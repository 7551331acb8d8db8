"""The seed's question through the whole product and the real local model.

The demo agent, its four tools and its instructions; the runner, the engine, the
real ``openai`` SDK and the local model at temperature 0. Skipped when the local
model is not installed (``make model``); CI installs it.
"""

from __future__ import annotations

import pytest

from engine.safe_eval import evaluate_arithmetic
from runs import tasks as run_tasks
from tests.support.cast import QUESTION
from tests.support.runs import start

pytestmark = [
    pytest.mark.localmodel,
    pytest.mark.timeout(1800),
    pytest.mark.django_db(transaction=True),
]


def test_the_local_model_searches_the_notes_calculates_and_answers_1088(
    local_model_url, alice, demo, settings
):
    settings.OPENAI_BASE_URL = local_model_url
    settings.OPENAI_API_KEY = "local"
    settings.OPENAI_MODEL = "qwen2.5-coder-1.5b-instruct"
    settings.REACH_MODEL_TIMEOUT_S = 600.0
    settings.REACH_MODEL_TEMPERATURE = 0.0
    task = start(alice, demo.agent, QUESTION)

    run_tasks.task_advance(task_id=task.pk)

    task.refresh_from_db()
    calls = [
        (s.tool, s.arguments, s.result)
        for s in task.steps.filter(kind="tool_call").order_by("seq")
    ]
    print("\ntool calls:", calls, "\nanswer:", task.final_answer)
    assert task.status == "succeeded", (task.stop_reason, task.error_message, calls)
    search = [c for c in calls if c[0] == "search_notes"]
    assert search and "redis" in search[0][1]["keyword"].lower()
    assert any(n["title"] == "缓存改造" for n in search[0][2])
    calculations = [c for c in calls if c[0] == "calculate"]
    assert calculations
    assert evaluate_arithmetic(calculations[-1][1]["expression"]) == 1088
    assert calculations[-1][2]["result"] == 1088
    assert "1088" in task.final_answer
