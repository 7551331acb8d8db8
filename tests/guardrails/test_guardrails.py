"""Guardrails and structured answers through the product (issue 28, items 2 and
3): what the scripted model received, what the user and the API get, the trace
and the audit log."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from audit.models import AuditEvent
from evals import services as evals
from guardrails.models import Guardrail, GuardrailAuditKind
from registry.models import Agent
from runs.models import Step, Task
from tests.support.clients import bearer_client, logged_in
from tests.support.replies import RecordingHandler, Script, text, tool_call
from tests.support.runs import advance, ask

pytestmark = pytest.mark.django_db(transaction=True)

CARD = "4111 1111 1111 1111"
SECRET = "crm-token-7f3a9c2e51"


def guardrail_on(agent: Agent, **fields: Any) -> Guardrail:
    """A guardrail on ``agent``, and ``agent`` as its next run reads it."""
    row = Guardrail.objects.create(agent=agent, **fields)
    agent.refresh_from_db()
    return row


def trips(task: Task) -> list[Step]:
    return list(task.steps.filter(kind=Step.Kind.GUARDRAIL).order_by("seq"))


def audited(task: Task) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(kind=GuardrailAuditKind.TRIPPED, task_id=str(task.pk))
    )


def test_a_pasted_card_number_is_masked_before_the_model_sees_it(demo, model):
    # The demo assistant's seeded guardrail: card numbers in the input, redacted.
    assert [g["name"] for g in demo.agent.guardrail_specs] == ["card-numbers"]
    served = model(Script([text("I will not need it.")]))
    task = ask(demo.alice, demo.agent, f"My card is {CARD}, can you store it?")

    assert task.stop_reason == "final_answer"
    sent = json.dumps(served.requests, ensure_ascii=False)
    assert "4111" not in sent
    assert "[REDACTED:card_number]" in served.requests[0]["messages"][-1]["content"]
    [step] = trips(task)
    assert step.tool == "card-numbers"
    assert step.detail["guardrail"] == {
        "name": "card-numbers",
        "kind": "personal_data",
        "stage": "input",
        "action": "redact",
        "labels": ["card_number"],
    }
    [event] = audited(task)
    assert event.object_id == "assistant/card-numbers"
    assert event.data["labels"] == ["card_number"]
    # The trace shows the trip.
    page = logged_in(demo.alice).get(f"/traces/{task.pk}/").content.decode()
    assert "guardrail" in page and "card-numbers" in page


def test_a_message_without_personal_data_trips_nothing(demo, model):
    model(Script([text("Hello!")]))
    task = ask(demo.alice, demo.agent, "Hello, what can you do?")
    assert task.stop_reason == "final_answer" and trips(task) == []
    assert audited(task) == []


def test_an_answer_holding_a_stored_secret_is_blocked(demo, model):
    from registry.secrets import secret_set

    secret_set(name="CRM_TOKEN", value=SECRET)
    guardrail_on(
        demo.agent,
        name="no-secrets",
        kind="secrets",
        stage="answer",
        action="block",
    )
    model(Script([text(f"Sure, the token is {SECRET}.")]))
    task = ask(demo.alice, demo.agent, "What is the CRM token?")

    assert (task.status, task.stop_reason) == ("stopped", "guardrail")
    assert task.final_answer is None
    assert "no-secrets" in task.error_message and SECRET not in task.error_message
    [step] = trips(task)
    assert step.status == "failed" and step.detail["guardrail"]["action"] == "block"
    assert [e.object_id for e in audited(task)] == ["assistant/no-secrets"]
    everything = json.dumps(
        [s.response for s in task.steps.all()] + [task.error_message]
    )
    assert SECRET not in everything
    # Told in the user's language.
    model(Script([text(f"令牌是 {SECRET}")]))
    chinese = ask(demo.alice, demo.agent, "CRM 的令牌是什么？")
    assert chinese.stop_reason == "guardrail"
    assert "安全规则「no-secrets」" in chinese.error_message


class Classified(RecordingHandler):
    """Answers a guardrail's classifier with ``verdict``, the run with text."""

    def __init__(self, verdict: dict[str, Any], answer: str = "Here you go.") -> None:
        super().__init__()
        self.verdict = verdict
        self.answer = answer

    def respond(self, request: dict[str, Any]) -> Any:
        if "content classifier" in request["messages"][0]["content"]:
            return text(json.dumps(self.verdict))
        return text(self.answer)


def test_an_input_classifier_on_the_scripted_model_blocks_beside_the_model_call(
    demo, model
):
    guardrail_on(
        demo.agent,
        name="no-refunds",
        kind="classifier",
        stage="input",
        action="block",
        config={"rubric": "Trips when the user asks for a refund."},
    )
    served = model(Classified({"tripped": True, "reason": "asks for a refund"}))
    task = ask(demo.alice, demo.agent, "I want a refund for my order")

    assert task.stop_reason == "guardrail"
    asked = [r for r in served.requests if "content classifier" in str(r["messages"])]
    [classifier] = asked
    assert classifier["response_format"]["type"] == "json_schema"
    assert "refund for my order" in classifier["messages"][-1]["content"]
    # Both calls were made; the run's reply is in the trace, none of it ran.
    assert len(served.requests) == 2
    [step] = trips(task)
    assert step.detail["guardrail"]["reason"] == "asks for a refund"
    assert task.steps.filter(kind=Step.Kind.TOOL_CALL).count() == 0
    assert len(audited(task)) == 1


def test_a_classifier_that_flags_lets_the_run_answer(demo, model):
    guardrail_on(
        demo.agent,
        name="tone",
        kind="classifier",
        stage="answer",
        action="flag",
        config={"rubric": "Trips when the answer is rude."},
    )
    model(Classified({"tripped": True, "reason": "curt"}, answer="No."))
    task = ask(demo.alice, demo.agent, "Can you help?")
    assert (task.stop_reason, task.final_answer) == ("final_answer", "No.")
    [step] = trips(task)
    assert step.detail["guardrail"]["action"] == "flag"
    stats = logged_in(demo.operator).get("/traces/stats/").content.decode()
    assert "assistant/tone" in stats


def test_a_tool_result_guardrail_masks_the_result_and_annotates_the_call(demo, model):
    from effects.models import Note

    Note.objects.create(title="Customer Li", content=f"Li pays with {CARD}.")
    guardrail_on(
        demo.agent,
        name="results-pii",
        kind="personal_data",
        stage="tool_result",
        action="redact",
    )
    served = model(
        Script([tool_call("search_notes", {"keyword": "Customer Li"}), text("Done.")])
    )
    task = ask(demo.alice, demo.agent, "How does Li pay?")
    assert task.stop_reason == "final_answer"
    assert "4111" not in json.dumps(served.requests[1])
    [call] = task.steps.filter(kind=Step.Kind.TOOL_CALL)
    assert "[REDACTED:card_number]" in json.dumps(call.result), call.result
    assert call.detail["guardrail"][0]["labels"] == ["card_number"]
    assert len(audited(task)) == 1


def test_a_guardrail_is_checked_when_it_is_saved_and_keeps_the_agents_copy(demo):
    agent = Agent.objects.create(name="plain")
    assert agent.guardrail_specs == []
    bad = Guardrail(
        agent=agent,
        name="x",
        kind="classifier",
        stage="answer",
        action="redact",
        config={"rubric": "r"},
    )
    with pytest.raises(ValidationError, match="block or flag"):
        bad.full_clean()
    with pytest.raises(ValidationError, match="patterns"):
        Guardrail(
            agent=agent,
            name="y",
            kind="blocklist",
            stage="input",
            action="block",
            config={"patterns": ["("]},
        ).full_clean()
    row = Guardrail.objects.create(
        agent=agent,
        name="len",
        kind="max_length",
        stage="answer",
        action="flag",
        config={"max_chars": 10},
    )
    agent.refresh_from_db()
    assert agent.guardrail_specs == [row.spec().to_json()]
    row.enabled = False
    row.save()
    agent.refresh_from_db()
    assert agent.guardrail_specs == []


def test_an_eval_case_asserts_a_guardrail(demo, model, operator):
    model(Script([text("Stored."), text("Stored.")]))
    suite = evals.suite_upload(
        {
            "name": "guardrails",
            "agent": "assistant",
            "runs": 1,
            "cases": [
                {
                    "id": "card-redacted",
                    "input": f"Please keep my card {CARD}",
                    "expect": {"guardrail": "card_number"},
                },
                {
                    "id": "no-trip",
                    "input": "Hello",
                    "expect": {"guardrail": ["card-numbers"]},
                },
            ],
        }
    )
    report = evals.report_drive(
        evals.report_create(suite=suite, user=operator), advance=advance
    )
    report.refresh_from_db()
    passed = {c["id"]: c["passed"] for c in report.result["cases"]}
    assert passed == {"card-redacted": 1, "no-trip": 0}


# -- structured answers -------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "plans": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "plan": {"type": "string"},
                    "budget": {"type": "number"},
                },
                "required": ["plan", "budget"],
            },
        },
    },
    "required": ["summary", "plans"],
}
GOOD = {
    "summary": "缓存改造 costs 1088.",
    "plans": [{"plan": "缓存改造", "budget": 1088}],
}


@pytest.fixture
def extractor(demo) -> Agent:
    agent = Agent.objects.get(name="extractor")
    assert agent.answer_schema == SCHEMA
    return agent


def test_a_valid_structured_answer_is_parsed_and_returned_by_the_api(
    demo, model, extractor
):
    served = model(Script([text(json.dumps(GOOD, ensure_ascii=False))]))
    task = ask(demo.alice, extractor, "Which plan mentions Redis, and its budget?")

    assert task.stop_reason == "final_answer"
    assert task.answer_json == GOOD
    asked = served.requests[0]["response_format"]
    assert asked["type"] == "json_schema"
    assert asked["json_schema"]["schema"] == SCHEMA
    body = bearer_client(demo.alice).get(f"/api/tasks/{task.pk}/").json()
    assert body["answer_json"] == GOOD
    # The chat draws it as a table.
    page = logged_in(demo.alice).get(f"/c/{task.conversation_id}/").content.decode()
    assert '<table class="answer-json">' in page
    assert "<th>budget</th>" in page and "<td>1088</td>" in page


def test_a_mismatch_is_repaired_once(demo, model, extractor):
    served = model(Script([text('{"summary": "no plans"}'), text(json.dumps(GOOD))]))
    task = ask(demo.alice, extractor, "Which plan?")
    assert task.stop_reason == "final_answer" and task.answer_json == GOOD
    [note] = task.steps.filter(kind=Step.Kind.NOTE)
    assert "'plans' is a required property" in note.detail["text"]
    assert "'plans' is a required property" in json.dumps(
        served.requests[1]["messages"]
    )


def test_a_second_mismatch_stops_with_bad_answer(demo, model, extractor):
    model(Script([text("缓存改造, 1088"), text('{"summary": 1, "plans": []}')]))
    task = ask(demo.alice, extractor, "Which plan?")
    assert (task.status, task.stop_reason) == ("stopped", "bad_answer")
    assert task.answer_json is None and task.final_answer is None
    assert "summary" in task.error_message
    body = bearer_client(demo.alice).get(f"/api/tasks/{task.pk}/").json()
    assert (body["stop_reason"], body["answer_json"]) == ("bad_answer", None)


def test_an_eval_case_checks_the_fields_of_a_structured_answer(
    demo, model, operator, extractor
):
    model(Script([text(json.dumps(GOOD)), text(json.dumps(GOOD))]))
    suite = evals.suite_upload(
        {
            "name": "structured",
            "agent": "extractor",
            "runs": 1,
            "cases": [
                {
                    "id": "right",
                    "input": "Which plan?",
                    "expect": {
                        "answer_json": {"plans": [{"budget": 1088, "plan": "缓存改造"}]}
                    },
                },
                {
                    "id": "wrong",
                    "input": "Which plan?",
                    "expect": {"answer_json": {"summary": "something else"}},
                },
            ],
        }
    )
    report = evals.report_drive(
        evals.report_create(suite=suite, user=operator), advance=advance
    )
    report.refresh_from_db()
    passed = {c["id"]: c["passed"] for c in report.result["cases"]}
    assert passed == {"right": 1, "wrong": 0}


# -- the admin ----------------------------------------------------------------------


def test_an_admin_adds_a_guardrail_on_the_agents_page_and_a_bad_schema_is_refused(
    demo,
):
    from tests.support.admin_forms import admin_form_data

    admin = logged_in(demo.admin)
    url = f"/admin/registry/agent/{demo.agent.pk}/change/"
    page = admin.get(url)
    assert b"Guardrails: checks of the user&#x27;s input" in page.content
    data = admin_form_data(page)
    data.update(
        {
            "guardrails-TOTAL_FORMS": "2",
            "guardrails-1-name": "no-bombs",
            "guardrails-1-kind": "blocklist",
            "guardrails-1-stage": "input",
            "guardrails-1-action": "block",
            "guardrails-1-config": '{"words": ["bomb"]}',
            "guardrails-1-enabled": "on",
            "guardrails-1-position": "1",
        }
    )
    response = admin.post(url, data)
    assert response.status_code == 302, response.content[:3000]
    demo.agent.refresh_from_db()
    assert [g["name"] for g in demo.agent.guardrail_specs] == [
        "card-numbers",
        "no-bombs",
    ]

    data = admin_form_data(admin.get(url))
    data["answer_schema"] = '{"type": "nonsense"}'
    refused = admin.post(url, data)
    assert refused.status_code == 200
    assert b"Not a valid JSON Schema" in refused.content
