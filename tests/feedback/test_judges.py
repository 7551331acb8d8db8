"""Judges (issue 29, items 5 and 7): a model scores an answer against a rubric in
a fixed JSON shape; evaluation reports keep the verdicts and how often the judge
agrees with people; sampled production runs are judged online, once."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from audit.models import AuditEvent
from evals import services as evals
from evals.models import Suite
from feedback import judges
from feedback.models import FeedbackAuditKind, Judge, JudgeVerdict
from feedback.services import label_run
from runs.models import Task
from tests.support.cast import QUESTION
from tests.support.replies import Script, text
from tests.support.runs import advance, ask
from tests.support.scripted_model import RedisScript

pytestmark = pytest.mark.django_db(transaction=True)

RUBRIC = "The answer names the plan that mentions Redis and gives its budget, 1088."


@pytest.fixture
def judge() -> Judge:
    return Judge.objects.create(name="cites-budget", rubric=RUBRIC, pass_threshold=0.5)


def verdict_text(score: float, reason: str = "names 缓存改造 and 1088") -> Any:
    return text(json.dumps({"score": score, "reason": reason}, ensure_ascii=False))


@pytest.mark.parametrize(
    ("content", "score", "error"),
    [
        ('{"score": 0.8, "reason": "good"}', 0.8, ""),
        ('```json\n{"score": 1, "reason": "all there"}\n```', 1.0, ""),
        ("I think it is fine.", None, "no JSON verdict"),
        ('{"score": "high", "reason": "x"}', None, "no numeric score"),
        ('{"score": 7, "reason": "x"}', None, "outside 0 to 1"),
        ("[0.5]", None, "not an object"),
    ],
)
def test_a_verdict_is_read_in_its_fixed_shape_or_refused_with_why(
    content: str, score: float | None, error: str
) -> None:
    verdict = judges.parse_verdict(content)
    assert verdict.score == score
    assert error in verdict.error if error else verdict.error == ""


def test_a_judge_on_the_scripted_model_scores_a_run_and_is_asked_for_json(
    judge: Judge, alice: Any, demo: Any, model: Any
) -> None:
    served = model(RedisScript())
    task = ask(alice, demo.agent, QUESTION)
    served.handler = Script([verdict_text(0.9)])
    row = judges.judge_task(judge, task, origin=JudgeVerdict.Origin.ONLINE)
    assert (row.score, row.passed, row.error) == (0.9, True, "")
    assert row.reason == "names 缓存改造 and 1088"
    asked = served.requests[-1]
    assert asked["response_format"]["json_schema"]["schema"] == judges.VERDICT_SCHEMA
    assert asked["response_format"]["type"] == "json_schema"
    prompt = asked["messages"][-1]["content"]
    assert RUBRIC in prompt and QUESTION in prompt and "search_notes" in prompt
    # One verdict per run and judge: asking again changes nothing.
    again = judges.judge_task(judge, task, origin=JudgeVerdict.Origin.ONLINE)
    assert again.pk == row.pk and len(served.requests) == 4
    assert AuditEvent.objects.filter(kind=FeedbackAuditKind.JUDGED).count() == 1


def test_a_malformed_verdict_and_a_dead_endpoint_are_recorded_not_raised(
    judge: Judge, alice: Any, demo: Any, model: Any, settings: Any
) -> None:
    served = model(Script([text("done"), text("looks right to me")]))
    task = ask(alice, demo.agent, "hello")
    row = judges.judge_task(judge, task, origin=JudgeVerdict.Origin.ONLINE)
    assert row.score is None and row.passed is None
    assert "no JSON verdict" in row.error
    other = Judge.objects.create(name="down", rubric=RUBRIC)
    served.stop()
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    dead = judges.judge_task(other, task, origin=JudgeVerdict.Origin.ONLINE)
    assert dead.score is None
    assert "The judge's model failed" in dead.error


def test_an_evaluation_with_a_judge_keeps_its_verdicts_and_its_agreement_with_people(
    judge: Judge, operator: Any, model: Any
) -> None:
    suite = evals.suite_upload(
        {
            "name": "judged",
            "agent": "assistant",
            "judge": "cites-budget",
            "runs": 2,
            "cases": [{"id": "redis", "input": QUESTION, "expect": {}}],
        }
    )
    replies = iter([verdict_text(0.9), verdict_text(0.2, "no budget given")])

    class Both(RedisScript):
        def respond(self, request: dict[str, Any]) -> Any:
            if request.get("response_format"):
                return next(replies)
            return super().respond(request)

    model(Both())
    report = evals.report_create(user=operator, suite=suite)
    report = evals.report_drive(report, advance=advance)
    assert report.status == "done", report.error
    [case] = report.result["cases"]
    assert case["judge"]["judged"] == 2 and case["judge"]["passed"] == 1
    assert case["passed"] == 1  # the run the judge failed does not pass
    assert "no budget given" in case["judge"]["reasons"]
    assert report.result["summary"]["judge_agreement"]["compared"] == 0

    # People label both runs correct: the judge agreed on one of the two.
    for task in Task.objects.filter(pk__in=case["tasks"]):
        label_run(reviewer=operator, task=task, verdict="correct")
    document = evals.report_document(report)
    assert document["summary"]["judge_agreement"] == {
        "compared": 2,
        "agreed": 1,
        "rate": 0.5,
    }
    assert JudgeVerdict.objects.filter(origin="eval").count() == 2


def test_a_suite_naming_a_missing_judge_is_refused_before_it_runs(
    operator: Any,
) -> None:
    suite = evals.suite_upload(
        {
            "name": "no-judge",
            "agent": "assistant",
            "cases": [{"id": "a", "input": "hi", "expect": {}, "judge": "nobody"}],
        }
    )
    with pytest.raises(evals.EvalError, match="names the judge 'nobody'"):
        evals.report_create(user=operator, suite=suite)
    assert Suite.objects.get(name="no-judge").reports.count() == 0


def test_online_judging_scores_a_sample_of_finished_runs_once(
    judge: Judge, alice: Any, operator: Any, demo: Any, model: Any
) -> None:
    served = model(RedisScript())
    task = ask(alice, demo.agent, QUESTION)
    assert judges.judge_sampled() == 0  # attached to no agent yet
    judge.agents.add(demo.agent)
    judge.sample_rate = 1.0
    judge.save()
    served.handler = Script([verdict_text(0.75)])
    assert judges.judge_sampled() == 1
    assert judges.judge_sampled() == 0  # judged once, never twice
    verdict = JudgeVerdict.objects.get(task=task)
    assert (verdict.origin, verdict.score) == ("online", 0.75)
    label_run(reviewer=operator, task=task, verdict="correct")

    page = Client()
    page.force_login(operator)
    trace = page.get(f"/traces/{task.pk}/").content.decode()
    assert 'data-testid="judge-verdict"' in trace and "names 缓存改造 and 1088" in trace
    stats = page.get("/traces/stats/").content.decode()
    row = stats.split('data-testid="judge-stats"')[1].split("</table>")[0]
    assert "<td>cites-budget</td><td>1</td><td>0.75</td><td>1</td>" in row
    assert "cites-budget agrees with the review labels on 1 of 1" in stats

    # A sample rate of 0.0 judges nothing more.
    judge.sample_rate = 0.0
    judge.save()
    served.handler = RedisScript()
    ask(alice, demo.agent, QUESTION)
    assert judges.judge_sampled() == 0
