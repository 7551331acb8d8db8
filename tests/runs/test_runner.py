"""The runner against the real database, the real openai SDK and the scripted server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from effects.models import Ticket
from engine.journal import LeaseLost
from registry.models import Tool
from registry.services import tool_save
from runs import leases as run_leases
from runs.models import Message, Step, Task
from tests.support.cast import FOLLOW_UP, QUESTION, TICKET
from tests.support.ports import free_port
from tests.support.replies import Reply, Script, calls_then_answers, text, tool_call
from tests.support.runs import ask, claimed, start
from tests.support.scripted_model import RedisScript, tool_messages
from traces.export import inherited_taint

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_redis_question_runs_search_then_calculate_then_answers(alice, demo, model):
    script = RedisScript()
    model(script)
    task = ask(alice, demo.agent, QUESTION)

    assert task.status == "succeeded", task.error_message
    assert task.stop_reason == "final_answer"
    assert "缓存改造" in task.final_answer and "1088" in task.final_answer
    steps = list(task.steps.order_by("seq"))
    assert [(s.kind, s.tool) for s in steps] == [
        ("model_call", None),
        ("tool_call", "search_notes"),
        ("model_call", None),
        ("tool_call", "calculate"),
        ("model_call", None),
    ]
    search, calc = steps[1], steps[3]
    assert search.arguments == {"keyword": "Redis"}
    assert search.result[0]["title"] == "缓存改造"
    assert set(search.result[0]) == {"title", "content"}
    assert calc.arguments == {"expression": "128 * 6 + 320"}
    assert calc.result == {"expression": "128 * 6 + 320", "result": 1088}
    model_call = steps[0]
    assert model_call.request_id and model_call.request_id.startswith("req")
    assert model_call.response["tool_calls"][0]["function"]["name"] == "search_notes"
    assert model_call.usage["total_tokens"] > 0
    assert task.total_tokens == sum(s.usage["total_tokens"] for s in steps if s.usage)
    assert all(s.finished_at and s.started_at for s in steps)
    # The model was offered the tools with tool_choice auto, and got results back.
    first_request = script.requests[0]
    assert first_request["tool_choice"] == "auto"
    assert {t["function"]["name"] for t in first_request["tools"]} == {
        "calculate",
        "search_notes",
        "create_ticket",
        "send_email",
    }
    results = tool_messages(script.requests[1])
    assert "缓存改造" in results[0]["content"]
    reply = Message.objects.get(task=task, role="assistant")
    assert reply.content == task.final_answer


def test_a_follow_up_in_the_same_conversation_sees_the_earlier_turns(
    alice, demo, model
):
    script = RedisScript()
    model(script)
    first = ask(alice, demo.agent, QUESTION)
    second = ask(alice, demo.agent, FOLLOW_UP, first.conversation)
    assert second.status == "succeeded"
    sent = script.requests[-1]["messages"]
    contents = [m.get("content") for m in sent]
    assert QUESTION in contents
    assert first.final_answer in contents
    assert "1100" in second.final_answer


def test_a_disabled_tool_is_not_offered_to_the_next_run(alice, demo, model):
    script = Script([text("hello")])
    model(script)
    tool = Tool.objects.get(name="send_email")
    tool.enabled = False
    tool_save(tool=tool, user=demo.admin)
    ask(alice, demo.agent, "hi")
    offered = {t["function"]["name"] for t in script.requests[0]["tools"]}
    assert "send_email" not in offered
    assert "calculate" in offered


def test_an_edited_schema_is_used_by_the_next_run(alice, demo, model):
    script = Script([text("a"), text("b")])
    model(script)
    ask(alice, demo.agent, "first")
    tool = Tool.objects.get(name="calculate")
    tool.parameters = {
        **tool.parameters,
        "properties": {
            "expression": {"type": "string", "description": "Arithmetic only, e.g. 2*3"}
        },
    }
    tool_save(tool=tool, user=demo.admin)
    ask(alice, demo.agent, "second")
    calc = [
        t for t in script.requests[1]["tools"] if t["function"]["name"] == "calculate"
    ]
    assert calc[0]["function"]["parameters"]["properties"]["expression"][
        "description"
    ] == ("Arithmetic only, e.g. 2*3")
    task = Task.objects.filter(goal="second").get()
    calc_def = [t for t in task.agent_snapshot["tools"] if t["name"] == "calculate"][0]
    assert calc_def["version"] == 2


def test_a_second_claim_fails_while_the_lease_is_held(alice, demo):
    task = start(alice, demo.agent)
    first = run_leases.task_claim(task_id=task.pk, owner="w1")
    assert first == 1
    assert run_leases.task_claim(task_id=task.pk, owner="w2") is None


def test_a_worker_whose_lease_was_taken_over_cannot_write(alice, demo):
    from datetime import timedelta

    from django.utils import timezone

    journal = claimed(alice, demo.agent, owner="w1")
    task, epoch = Task.objects.get(pk=journal.task_id), journal.epoch
    Task.objects.filter(pk=task.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert run_leases.task_claim(task_id=task.pk, owner="w2") == epoch + 1
    with pytest.raises(LeaseLost):
        journal.control()
    from engine.spec import StepKind, StepRecord, StepStatus

    with pytest.raises(LeaseLost):
        journal.append(
            [StepRecord(seq=1, kind=StepKind.NOTE, status=StepStatus.SUCCEEDED)]
        )
    assert Step.objects.filter(task=task).count() == 0


def test_a_model_endpoint_that_stays_down_fails_the_task_with_model_error(
    alice, demo, settings
):
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    settings.REACH_MODEL_MAX_RETRIES = 1
    task = ask(alice, demo.agent, "hi")
    assert task.status == "failed"
    assert task.stop_reason == "model_error"
    assert "OPENAI_BASE_URL" in task.error_message
    reply = Message.objects.get(task=task, role="assistant")
    assert "Cannot reach the model server" in reply.content


def model_error_run(alice: Any, demo: Any) -> tuple[Task, Step]:
    """Ask "hi"; -> the task and its one (failed) model call step."""
    task = ask(alice, demo.agent, "hi")
    assert (task.status, task.stop_reason) == ("failed", "model_error")
    [step] = task.steps.all()
    assert (step.kind, step.status) == ("model_call", "failed")
    assert step.error == task.error_message
    return task, step


def test_a_model_endpoint_on_a_closed_loopback_port_ends_as_model_error_naming_it(
    alice, demo, settings
):
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{free_port()}/v1"
    settings.REACH_MODEL_MAX_RETRIES = 1
    task, step = model_error_run(alice, demo)
    assert settings.OPENAI_BASE_URL in task.error_message
    assert "unreachable" in task.error_message
    assert "OPENAI_BASE_URL" in task.error_message
    assert step.error_class == "connection"


def test_no_model_endpoint_configured_ends_as_model_error_saying_what_to_set(
    alice, demo, settings
):
    settings.OPENAI_BASE_URL = ""
    task, step = model_error_run(alice, demo)
    assert "OPENAI_BASE_URL" in task.error_message
    assert "Internal error" not in task.error_message
    assert step.error_class == "connection"
    reply = Message.objects.get(task=task, role="assistant")
    assert "OPENAI_BASE_URL" in reply.content


def test_a_model_endpoint_url_that_does_not_parse_ends_as_model_error(
    alice, demo, settings
):
    settings.OPENAI_BASE_URL = "http://[::1/v1"
    task, _ = model_error_run(alice, demo)
    assert "http://[::1/v1" in task.error_message
    assert "OPENAI_BASE_URL" in task.error_message


def ticket_run(model: Any, user: Any, agent: Any, content: str, *before: Reply):
    """Ask ``content``; the model calls the ``before`` tools, then ``create_ticket``.

    -> the task and its ``create_ticket`` step.
    """
    model(Script([*before, tool_call("create_ticket", TICKET), text("done")]))
    task = ask(user, agent, content)
    return task, task.steps.get(tool="create_ticket")


def test_reading_untrusted_notes_makes_a_later_write_wait_for_approval(
    alice, demo, model
):
    task, ticket_step = ticket_run(
        model,
        alice,
        demo.agent,
        "make a ticket about the Redis note",
        tool_call("search_notes", {"keyword": "Redis"}),
    )
    assert task.status == "waiting_approval"
    assert ticket_step.status == "waiting_approval"
    label = f"search_notes#2@{str(task.pk)[:8]}"
    assert ticket_step.tainted_by == [label]
    assert task.approvals.get().tainted_by == [label]
    assert Ticket.objects.count() == 0


def test_create_ticket_runs_directly_in_an_untainted_task_once(alice, demo, model):
    task, step = ticket_run(model, alice, demo.agent, "make a ticket")
    assert task.status == "succeeded"
    assert step.status == "succeeded"
    assert step.idempotency_key == f"{task.pk}:1:0"
    ticket = Ticket.objects.get()
    assert ticket.idempotency_key == step.idempotency_key
    assert step.result["ticket_id"] == ticket.pk


def test_steps_api_returns_changes_after_a_rev(alice, demo, model, api_client_for):
    model(RedisScript())
    task = ask(alice, demo.agent, QUESTION)
    client = api_client_for(alice)
    everything = client.get(f"/api/tasks/{task.pk}/steps/").json()["steps"]
    assert [s["seq"] for s in everything] == [1, 2, 3, 4, 5]
    revs = [s["rev"] for s in everything]
    assert revs == sorted(revs)
    later = client.get(f"/api/tasks/{task.pk}/steps/?after={revs[2]}").json()["steps"]
    assert all(s["rev"] > revs[2] for s in later)
    step = everything[1]
    assert {
        "seq", "rev", "kind", "status", "tool", "call_id", "arguments", "raw_arguments",
        "proposed_arguments", "result", "error", "attempts", "model", "request_id",
        "response", "usage", "idempotency_key", "tainted_by", "started_at",
        "finished_at", "duration_ms",
    } <= set(step)  # fmt: skip
    assert json.loads(step["raw_arguments"]) == {"keyword": "Redis"}


def test_two_tasks_reading_notes_at_the_same_step_are_two_taint_sources(
    alice, demo, model
):
    model(
        calls_then_answers(
            ("search_notes", {"keyword": "Redis"}, "first"),
            ("search_notes", {"keyword": "日志"}, "second"),
        )
    )
    first = ask(alice, demo.agent, "read the Redis note")
    second = ask(alice, demo.agent, "and the log note", conversation=first.conversation)
    one, two = (f"search_notes#2@{str(t.pk)[:8]}" for t in (first, second))
    assert first.tainted_by == [one]
    # The earlier task's source is inherited, recorded as such when it started,
    # and the task's own step at the same seq is a second, distinct source.
    assert second.inherited_taint == [one]
    assert second.tainted_by == [one, two]
    # Recorded fact: deleting the earlier task changes nothing of what the
    # second one inherited (its trace says the same after the purge).
    first.delete()
    second.refresh_from_db()
    assert inherited_taint(second) == [one]
