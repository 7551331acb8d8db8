"""Fork from step N: copied steps, the call at N re-run under the full policy."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import F
from rest_framework.test import APIClient

from effects.models import Ticket
from runs.models import Step, Task
from tests.support.cast import TICKET
from tests.support.clients import fork, logged_in, trace_of
from tests.support.replies import Script, text, tool_call
from tests.support.runs import advance, ask, decide
from tests.support.scripted_model import tool_messages
from traces.views import timeline

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_fork_with_edited_arguments_copies_the_steps_before_and_runs_the_call_anew(
    redis_task, redis_script, alice, api_client_for
):
    parent = redis_task
    requests_before = len(redis_script.requests)

    response = fork(
        api_client_for(alice),
        parent,
        from_seq=4,
        arguments={"expression": "128 * 6"},
    )

    assert response.status_code == 202, response.content
    child = Task.objects.get(pk=response.json()["task"])
    assert child.parent_id == parent.pk and child.parent_seq == 4
    assert child.conversation_id != parent.conversation_id
    assert child.conversation.owner == alice
    copied = list(child.steps.filter(seq__lt=4).order_by("seq"))
    originals = list(parent.steps.filter(seq__lt=4).order_by("seq"))
    assert [(s.kind, s.tool, s.result) for s in copied] == [
        (s.kind, s.tool, s.result) for s in originals
    ]
    assert all(s.detail["copied_from"]["task"] == str(parent.pk) for s in copied)
    assert copied[1].started_at == originals[1].started_at  # not re-executed

    child = advance(child)

    assert child.status == "succeeded", child.error_message
    step = child.steps.get(seq=4)
    assert step.arguments == {"expression": "128 * 6"}
    assert step.proposed_arguments == {"expression": "128 * 6 + 320"}
    assert step.result == {"expression": "128 * 6", "result": 768}
    assert step.idempotency_key == f"{child.pk}:3:0"
    assert "768" in child.final_answer
    # Only the model turn after N was asked: nothing before N ran again.
    assert len(redis_script.requests) == requests_before + 1
    results = tool_messages(redis_script.requests[-1])
    assert "缓存改造" in results[0]["content"] and "768" in results[1]["content"]


def test_a_forks_timeline_spans_its_own_steps_and_draws_no_bar_for_copies(
    redis_task, alice, api_client_for
):
    response = fork(api_client_for(alice), redis_task, from_seq=4)
    child = advance(Task.objects.get(pk=response.json()["task"]))
    # The parent ran long before the fork: its copied steps keep those times.
    Step.objects.filter(task=child, seq__lt=4).update(
        started_at=F("started_at") - timedelta(hours=1),
        finished_at=F("finished_at") - timedelta(hours=1),
    )

    rows = timeline(child, list(child.steps.order_by("seq")))

    copied = [r for r in rows if r["step"].seq < 4]
    own = [r for r in rows if r["step"].seq >= 4]
    assert copied and all(r["width"] == 0 for r in copied)
    assert min(r["left"] for r in own) == 0
    assert max(r["left"] + r["width"] for r in own) >= 99


def test_the_forked_trace_names_its_parent(redis_task, alice, api_client_for):
    parent = redis_task
    client = api_client_for(alice)
    child_id = fork(client, parent, from_seq=4).json()["task"]

    document = trace_of(client, child_id)

    assert document["task"]["parent"] == {"task": str(parent.pk), "seq": 4}
    page = logged_in(alice).get(f"/traces/{child_id}/").content.decode()
    assert f'href="/traces/{parent.pk}/"' in page and "at step 4" in page
    parent_page = logged_in(alice).get(f"/traces/{parent.pk}/").content.decode()
    assert f'href="/traces/{child_id}/"' in parent_page


#: The arguments the forks below give the ticket at step 4.
CACHE_V2 = {"title": "Cache v2", "body": "Again."}


def a_ticket_after_a_note(
    model: Any, user: Any, approver: Any, agent: Any, **decision: Any
) -> Task:
    """A run whose note (step 2) taints it, so that its ticket (step 4) waited
    for ``approver``, who approved it (``arguments=`` to edit it)."""
    model(
        Script(
            [
                tool_call("search_notes", {"keyword": "Redis"}),
                tool_call("create_ticket", TICKET),
                text("ticket made"),
                text("fork: ticket made"),
            ]
        )
    )
    parent = ask(user, agent, "ticket the Redis note")
    return decide(parent, approver, "approve", **decision)


def fork_the_ticket(client: Any, parent: Task) -> Task:
    response = fork(client, parent, from_seq=4, arguments=CACHE_V2)
    assert response.status_code == 202, response.content
    return Task.objects.get(pk=response.json()["task"])


def test_taint_carries_over_so_an_edited_write_in_a_fork_waits_for_approval(
    alice, operator, demo, model, api_client_for
):
    parent = a_ticket_after_a_note(model, alice, operator, demo.agent)
    assert parent.status == "succeeded"
    assert Ticket.objects.count() == 1

    child = fork_the_ticket(api_client_for(alice), parent)

    step = child.steps.get(seq=4)
    assert step.status == "waiting_approval"
    # The source is the parent's step the fork copied: named with the parent.
    label = f"search_notes#2@{str(parent.pk)[:8]}"
    assert step.tainted_by == [label]
    approval = child.approvals.get()
    assert approval.arguments == CACHE_V2
    assert label in child.tainted_by
    child = advance(child)
    assert child.status == "waiting_approval"
    assert Ticket.objects.count() == 1
    child = decide(child, operator, "approve")
    assert child.status == "succeeded"
    assert Ticket.objects.count() == 2
    assert Ticket.objects.get(title="Cache v2").task_id == child.pk


def test_a_forked_edit_keeps_the_models_own_call_as_raw_and_proposed_arguments(
    alice, operator, demo, model, api_client_for
):
    """docs/api.md: raw_arguments is the string the model sent, proposed_arguments the
    model's object; neither is the parent approver's edit nor the fork's."""
    edited = {"title": "Edited by the approver", "body": "Theirs."}
    parent = a_ticket_after_a_note(model, alice, operator, demo.agent, arguments=edited)
    original = parent.steps.get(seq=4)
    assert original.arguments == edited and original.proposed_arguments == TICKET

    step = fork_the_ticket(api_client_for(alice), parent).steps.get(seq=4)

    assert step.arguments == CACHE_V2
    assert step.proposed_arguments == TICKET
    assert step.raw_arguments == original.raw_arguments


def test_a_fork_from_a_model_call_asks_another_model_again(
    redis_task, redis_script, alice, api_client_for
):
    parent = redis_task
    response = fork(api_client_for(alice), parent, from_seq=3, model="other-model")

    child = advance(Task.objects.get(pk=response.json()["task"]))
    assert child.model == "other-model"
    assert redis_script.requests[-1]["model"] == "other-model"
    assert [s.seq for s in child.steps.filter(detail__has_key="copied_from")] == [1, 2]
    assert child.status == "succeeded" and "1088" in child.final_answer


def test_an_auditor_forks_into_a_conversation_of_their_own(
    redis_task, alice, operator, api_client_for
):
    parent = redis_task
    response = fork(api_client_for(operator), parent, from_seq=3)

    assert response.status_code == 202
    child = Task.objects.get(pk=response.json()["task"])
    assert child.owner == operator and child.conversation.owner == operator


def test_invalid_edited_arguments_are_refused_and_nothing_is_created(
    redis_task, alice, api_client_for
):
    parent = redis_task
    before = Task.objects.count()

    response = fork(api_client_for(alice), parent, from_seq=4, arguments={"x": 1})

    assert response.status_code == 400
    assert "Invalid arguments" in response.json()["error"]
    assert Task.objects.count() == before


@pytest.mark.parametrize(
    "body, message",
    [
        ({"from_seq": 99}, "no step 99"),
        ({"from_seq": "4"}, "integer"),
        ({"from_seq": 3, "arguments": {"expression": "1"}}, "only when forking"),
        ({"from_seq": 4, "arguments": [1]}, "JSON object"),
        ({"from_seq": 4, "model": ""}, "model name"),
    ],
)
def test_a_bad_fork_request_answers_400(
    redis_task, alice, api_client_for, body, message
):
    parent = redis_task
    response = fork(api_client_for(alice), parent, **body)

    assert response.status_code == 400
    assert message in response.json()["error"]


def test_fork_permissions_and_states(alice, bob, demo, model, api_client_for):
    model(
        Script(
            [
                tool_call(
                    "send_email", {"to": "a@example.com", "subject": "s", "body": "b"}
                )
            ]
        )
    )
    waiting = ask(alice, demo.agent, "mail it")
    assert waiting.status == "waiting_approval"

    assert fork(api_client_for(alice), waiting, from_seq=1).status_code == 409
    assert fork(api_client_for(bob), waiting, from_seq=1).status_code == 404
    assert fork(APIClient(), waiting, from_seq=1).status_code == 401


def calculations(*expressions: str) -> list:
    """One calculate call per turn, then an answer."""
    return [tool_call("calculate", {"expression": e}) for e in expressions]


def test_a_fork_detects_a_repeated_call_like_a_live_run(
    alice, demo, model, api_client_for
):
    script = model(Script([*calculations("1 + 1", "2 + 2"), text("4"), text("2")]))
    parent = ask(alice, demo.agent, "add")
    assert parent.status == "succeeded"

    response = fork(
        api_client_for(alice), parent, from_seq=4, arguments={"expression": "1 + 1"}
    )

    assert response.status_code == 202, response.content
    child = Task.objects.get(pk=response.json()["task"])
    repeat = child.steps.get(seq=4)
    assert repeat.status == "deduplicated"
    assert repeat.detail["same_as_seq"] == 2
    assert repeat.result == child.steps.get(seq=2).result
    assert repeat.started_at is None and repeat.attempts == []  # not run again
    note = child.steps.get(seq=5)
    assert note.kind == "note" and note.detail["attach_to"] == 4
    child = advance(child)
    assert child.status == "succeeded"
    tool_messages = [m for m in script.requests[-1]["messages"] if m["role"] == "tool"]
    assert "You already called calculate" in tool_messages[-1]["content"]


def test_a_fork_applies_the_call_cap_like_a_live_run(
    alice, demo, model, api_client_for
):
    script = model(Script([*calculations("1 + 1", "2 + 2"), text("4")]))
    parent = ask(alice, demo.agent, "add")
    assert parent.status == "succeeded"
    demo.agent.max_tool_calls = 1
    demo.agent.save()
    requests_before = len(script.requests)

    response = fork(api_client_for(alice), parent, from_seq=4)

    assert response.status_code == 202, response.content
    child = Task.objects.get(pk=response.json()["task"])
    capped = child.steps.get(seq=4)
    assert (capped.status, capped.error_class) == ("skipped", "max_tool_calls")
    assert child.steps.get(seq=3).detail["stop"] == "max_tool_calls"
    child = advance(child)
    assert child.stop_reason == "max_tool_calls"
    assert len(script.requests) == requests_before  # the model was not asked again
