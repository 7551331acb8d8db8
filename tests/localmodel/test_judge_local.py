"""A judge on the built-in model (issue 29, item 5): the grammar holds it to the
verdict's JSON shape, and it tells a right answer from a wrong one. Skipped when
the local model is not installed (``make model``); CI installs it."""

from __future__ import annotations

import pytest

from feedback import judges
from feedback.models import Judge

pytestmark = [
    pytest.mark.localmodel,
    pytest.mark.timeout(1800),
    pytest.mark.django_db(transaction=True),
]

RUBRIC = (
    "The answer must give the total budget of the caching plan, which is "
    "128 * 6 + 320 = 1088. Score 1 if it says 1088, 0 otherwise."
)


def test_the_built_in_model_judges_in_the_fixed_shape(local_model_url, settings):
    settings.OPENAI_BASE_URL = local_model_url
    settings.OPENAI_API_KEY = "local"
    settings.OPENAI_MODEL = "qwen2.5-coder-1.5b-instruct"
    settings.REACH_MODEL_TIMEOUT_S = 600.0
    settings.REACH_MODEL_TEMPERATURE = 0.0
    judge = Judge(name="budget", rubric=RUBRIC)
    calls = [
        {
            "tool": "calculate",
            "arguments": {"expression": "128 * 6 + 320"},
            "result": {"result": 1088},
        }
    ]
    right = judges.ask(
        judge,
        question="What is the caching plan's total budget?",
        answer="The caching plan's total budget is 1088.",
        calls=calls,
    )
    wrong = judges.ask(
        judge,
        question="What is the caching plan's total budget?",
        answer="The caching plan's total budget is 250.",
        calls=calls,
    )
    print("\nright:", right, "\nwrong:", wrong)
    assert right.error == "" and wrong.error == ""
    assert right.score is not None and wrong.score is not None
    assert right.reason and wrong.reason
    assert right.score > wrong.score
