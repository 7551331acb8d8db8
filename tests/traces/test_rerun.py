"""Deterministic re-run: recorded replies and results through the current engine."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from effects.models import Ticket
from registry.models import Tool
from registry.services import tool_save
from runs import services as runs
from runs.models import Task
from tests.support.cast import EDITED_EMAIL, EMAIL, QUESTION, TICKET
from tests.support.clients import fork
from tests.support.replies import Script, text, tool_call, tool_calls
from tests.support.runs import advance, ask
from traces.replay import task_rerun

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_recorded_run_re_runs_to_the_same_steps(redis_task):

    result = task_rerun(task=redis_task)

    assert result.as_dict() == {"matches": True, "divergence": None}
    assert [(s.seq, s.kind.value, s.tool) for s in result.steps] == [
        (s.seq, s.kind, s.tool) for s in redis_task.steps.order_by("seq")
    ]
    assert result.stop_reason == "final_answer"


def test_a_re_run_executes_nothing(alice, demo, model):
    model(Script([tool_call("create_ticket", TICKET), text("done")]))
    task = ask(alice, demo.agent, "make a ticket")
    assert Ticket.objects.count() == 1

    assert task_rerun(task=task).matches

    assert Ticket.objects.count() == 1


def test_recorded_approval_decisions_are_replayed_as_decisions(emails_decided):
    task, edited = emails_decided, EDITED_EMAIL
    assert task.status == "succeeded"
    steps = {s.seq: s for s in task.steps.all()}
    assert steps[2].status == "succeeded" and steps[2].arguments == edited
    assert steps[4].status == "rejected"

    result = task_rerun(task=task)

    assert result.matches, result.divergence
    replayed = {s.seq: s for s in result.steps}
    assert replayed[2].arguments == edited
    assert replayed[2].proposed_arguments == EMAIL
    assert replayed[4].status.value == "rejected"


def test_parallel_calls_failures_and_bad_arguments_re_run_alike(alice, demo, model):
    model(
        Script(
            [
                tool_calls(
                    [
                        ("calculate", {"expression": "2 * 21"}),
                        ("calculate", {"expression": "1 / 0"}),
                        ("calculate", {"expr": "1"}),
                        ("no_such_tool", {}),
                    ]
                ),
                text("42"),
            ]
        )
    )
    task = ask(alice, demo.agent, "what is 2 * 21?")
    statuses = [(s.seq, s.status, s.error_class) for s in task.steps.order_by("seq")]
    assert statuses[1:5] == [
        (2, "succeeded", None),
        (3, "failed", "tool_error"),
        (4, "failed", "invalid_arguments"),
        (5, "failed", "unknown_tool"),
    ]

    assert task_rerun(task=task).matches


def test_a_repeated_call_is_deduplicated_again(alice, demo, model):
    call = tool_call("calculate", {"expression": "6 * 7"})
    model(Script([call, call, call, text("unreached")]))
    task = ask(alice, demo.agent, "six times seven, insistently")
    assert task.stop_reason == "repeated_call"

    result = task_rerun(task=task)

    assert result.matches, result.divergence
    assert [s.status.value for s in result.steps if s.tool] == [
        "succeeded",
        "deduplicated",
        "skipped",
    ]


def test_a_run_cancelled_while_a_call_waited_re_runs_to_the_cancel(alice, demo, model):
    model(Script([tool_call("send_email", EMAIL), text("unreached")]))
    task = ask(alice, demo.agent, "mail the report")
    assert task.status == "waiting_approval"
    runs.task_cancel(task=task, user=alice)
    task.refresh_from_db()
    assert task.status == "cancelled"

    result = task_rerun(task=task)

    assert result.matches, result.divergence
    assert result.stop_reason == "cancelled"


def test_a_stricter_schema_makes_the_re_run_diverge_at_that_call(
    redis_task, admin_user
):
    tool = Tool.objects.get(name="calculate")
    tool.parameters = {
        **tool.parameters,
        "properties": {"expression": {"type": "string", "maxLength": 5}},
    }
    tool_save(tool=tool, user=admin_user)

    result = task_rerun(task=redis_task)

    assert not result.matches
    divergence = result.as_dict()["divergence"]
    assert divergence["seq"] == 4
    assert divergence["expected"]["tool"] == "calculate"
    assert divergence["expected"]["status"] == "succeeded"
    assert divergence["got"]["status"] == "failed"
    assert divergence["got"]["error_class"] == "invalid_arguments"


def test_a_fork_with_edited_arguments_re_runs_with_them_and_still_detects_a_change(
    redis_task, alice, admin_user, api_client_for
):
    """A fork planned its call at N with the forker's arguments: its re-run does
    too (the model's reply still names the original ones), then compares."""
    response = fork(
        api_client_for(alice), redis_task, from_seq=4, arguments={"expression": "7*6"}
    )
    child = advance(Task.objects.get(pk=response.json()["task"]))
    assert child.steps.get(seq=4).result == {"expression": "7*6", "result": 42}

    assert task_rerun(task=child).as_dict() == {"matches": True, "divergence": None}

    # The edited arguments go through today's schema like any call's.
    tool = Tool.objects.get(name="calculate")
    tool.parameters = {
        **tool.parameters,
        "properties": {"expression": {"type": "string", "maxLength": 2}},
    }
    tool_save(tool=tool, user=admin_user)
    divergence = task_rerun(task=child).as_dict()["divergence"]
    assert divergence["seq"] == 4
    assert divergence["expected"]["arguments"] == {"expression": "7*6"}
    assert divergence["got"]["error_class"] == "invalid_arguments"


def test_a_raised_risk_makes_the_re_run_diverge_where_the_call_now_waits(
    redis_task, admin_user
):
    tool = Tool.objects.get(name="calculate")
    tool.risk = "write"
    tool.approval = "always"
    tool_save(tool=tool, user=admin_user)

    result = task_rerun(task=redis_task).as_dict()

    assert result["matches"] is False
    assert result["divergence"]["seq"] == 4
    assert result["divergence"]["expected"]["decision"] == "execute"
    assert result["divergence"]["got"]["decision"] == "approve"
    assert result["divergence"]["got"]["status"] == "waiting_approval"


def test_a_disabled_tool_makes_the_re_run_diverge(redis_task, admin_user):
    tool = Tool.objects.get(name="search_notes")
    tool.enabled = False
    tool_save(tool=tool, user=admin_user)

    divergence = task_rerun(task=redis_task).divergence

    assert divergence is not None and divergence.seq == 2
    assert divergence.got is not None
    assert divergence.got["error_class"] == "unknown_tool"


def test_the_rerun_endpoint_answers_owner_and_auditor_and_hides_from_others(
    redis_task, alice, bob, operator, api_client_for
):
    url = f"/api/tasks/{redis_task.pk}/rerun/"
    for user in (alice, operator):
        response = api_client_for(user).post(url)
        assert response.status_code == 200
        assert response.json() == {"matches": True, "divergence": None}
    assert api_client_for(bob).post(url).status_code == 404
    assert APIClient().post(url).status_code == 401


def test_the_rerun_endpoint_answers_409_while_the_task_is_not_final(
    alice, demo, model, api_client_for
):
    model(Script([tool_call("send_email", EMAIL), text("sent")]))
    task = ask(alice, demo.agent, "mail the report")
    assert task.status == "waiting_approval"

    response = api_client_for(alice).post(f"/api/tasks/{task.pk}/rerun/")

    assert response.status_code == 409
    assert response.json()["task"] == str(task.pk)


def test_rerun_traces_prints_a_line_per_task_and_a_summary(redis_task, alice, demo):
    second = ask(alice, demo.agent, QUESTION)
    assert second.status == "succeeded", second.error_message
    out = io.StringIO()

    call_command("rerun_traces", stdout=out)

    lines = out.getvalue().strip().splitlines()
    assert lines[0].startswith(f"{second.pk} match")
    assert lines[1].startswith(f"{redis_task.pk} match")
    assert lines[-1] == "2 checked, 2 matched, 0 diverged, 0 errors"


def test_rerun_traces_exits_non_zero_and_names_the_divergence(redis_task, admin_user):
    tool = Tool.objects.get(name="calculate")
    tool.approval = "always"
    tool_save(tool=tool, user=admin_user)
    out = io.StringIO()

    with pytest.raises(CommandError, match="1 diverged"):
        call_command("rerun_traces", str(redis_task.pk), stdout=out)

    lines = out.getvalue().strip().splitlines()
    assert lines[0].startswith(f"{redis_task.pk} DIVERGED at step 4: expected ")
    assert '"decision": "approve"' in lines[0]
    assert lines[-1] == "1 checked, 0 matched, 1 diverged, 0 errors"


def test_a_run_stopped_by_its_time_budget_re_runs_to_the_same_stop(alice, demo, model):
    from tests.support.replies import delay

    demo.agent.time_budget_s = 1
    demo.agent.save()
    model(
        Script([delay(1.1, tool_call("calculate", {"expression": "1 + 1"})), text("2")])
    )
    task = ask(alice, demo.agent, "slowly")
    assert task.stop_reason == "time_budget"

    result = task_rerun(task=task)

    assert result.matches, result.divergence
    assert result.stop_reason == "time_budget"


def test_a_run_that_ended_in_an_internal_error_re_runs_to_the_same_end():
    from engine.spec import Limits, StepKind, StepRecord, StepStatus, ToolSpec
    from traces.replay import RecordedRun, rerun

    calculate = ToolSpec(
        name="calculate",
        description="Arithmetic.",
        parameters={
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    )
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "calculate", "arguments": '{"expression": "1 + 1"}'},
    }
    steps = [
        StepRecord(
            seq=1,
            kind=StepKind.MODEL_CALL,
            status=StepStatus.SUCCEEDED,
            response={"role": "assistant", "content": None, "tool_calls": [call]},
        ),
        StepRecord(
            seq=2,
            kind=StepKind.TOOL_CALL,
            status=StepStatus.SUCCEEDED,
            tool="calculate",
            call_id="c1",
            call_index=0,
            parent_seq=1,
            arguments={"expression": "1 + 1"},
            result={"expression": "1 + 1", "result": 2},
            idempotency_key="t:1:0",
        ),
    ]
    run = RecordedRun(
        task_id="t",
        goal="add",
        system="",
        model="m",
        steps=steps,
        stop_reason="internal_error",
    )

    result = rerun(run, specs={"calculate": calculate}, limits=Limits())

    assert result.matches, result.divergence
    assert result.stop_reason == "internal_error"
    assert [s.status.value for s in result.steps] == ["succeeded", "succeeded"]
