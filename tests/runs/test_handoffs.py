"""Handoffs between agents through the runner (engine.handoff).

The real database, the real ``openai`` SDK over HTTP against the scripted model
server (``tests.support.handoffs.Desk`` answers as whichever agent acts), runs
driven in-process as the ``advance`` task drives them. The stack's real worker
runs the same scenarios in ``tests/integration/test_handoffs.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from approvals.services import approval_decide
from audit.models import AuditEvent, AuditKind
from engine.handoff import HandoffRecord
from registry.models import Agent
from tests.support.cast import QUESTION
from tests.support.clients import fork, logged_in, trace_of
from tests.support.handoffs import TICKET, Desk, desk_agents
from tests.support.replies import tool_call
from tests.support.runs import advance, ask, pending
from tests.support.scripted_model import RedisScript
from traces.replay import task_rerun

pytestmark = pytest.mark.django_db(transaction=True)

READ = ("search_notes", {"keyword": "Redis"})
HAND_TO_BILLING = ("transfer_to_billing", {"reason": "a refund"})
HAND_TO_FRONTDESK = ("transfer_to_frontdesk", {})


@pytest.fixture
def desks(demo: Any) -> Any:
    return desk_agents()


def steps_of(task: Any) -> list[tuple[str, str | None, str, str | None]]:
    return [
        (s.kind, s.tool, s.status, s.agent) for s in task.steps.order_by("seq").all()
    ]


def test_the_target_takes_over_from_the_next_model_call_with_its_own_prompt_and_tools(
    alice, desks, model
):
    desk = Desk(
        {
            "frontdesk": [HAND_TO_BILLING],
            "billing": [("calculate", {"expression": "2 * 21"})],
        },
        {"billing": "Refund of 42 noted."},
    )
    model(desk)

    task = ask(alice, desks.frontdesk, "I was charged twice")

    assert (task.status, task.stop_reason) == ("succeeded", "final_answer")
    assert task.final_answer == "Refund of 42 noted."
    assert steps_of(task) == [
        ("model_call", None, "succeeded", "frontdesk"),
        ("tool_call", "transfer_to_billing", "succeeded", "frontdesk"),
        ("model_call", None, "succeeded", "billing"),
        ("tool_call", "calculate", "succeeded", "billing"),
        ("model_call", None, "succeeded", "billing"),
    ]
    assert desk.agents_asked() == ["frontdesk", "billing", "billing"]
    # The frontdesk is offered its read and its transfer; billing its own tools
    # and the way back, never the frontdesk's read.
    assert desk.tools_offered(0) == {"search_notes", "transfer_to_billing"}
    assert desk.tools_offered(1) == {
        "calculate",
        "create_ticket",
        "transfer_to_frontdesk",
    }
    handoff = task.steps.get(tool="transfer_to_billing")
    record = HandoffRecord.of(handoff.record())
    assert record is not None
    assert (record.source, record.target) == ("frontdesk", "billing")
    assert record.snapshot.instructions == desks.billing.instructions
    assert handoff.result["transferred_to"] == "billing"
    assert handoff.arguments == {"reason": "a refund"}
    # The model that took over read the handoff's result like any tool's.
    handed = [m for m in desk.requests[1]["messages"] if m["role"] == "tool"]
    assert '"transferred_to": "billing"' in handed[0]["content"]
    [event] = AuditEvent.objects.filter(
        task_id=str(task.pk), kind=AuditKind.TASK_HANDED_OFF
    )
    assert event.data == {"seq": 2, "from": "frontdesk", "to": "billing"}


def test_a_write_after_a_tainted_read_still_waits_for_approval_after_the_handoff(
    alice, operator, desks, model
):
    model(
        Desk(
            {
                "frontdesk": [READ, HAND_TO_BILLING],
                "billing": [("create_ticket", TICKET)],
            },
            {"billing": "Ticket opened."},
        )
    )

    task = ask(alice, desks.frontdesk, "Refund order 42")

    assert task.status == "waiting_approval"
    read = task.steps.get(tool="search_notes")
    assert read.agent == "frontdesk" and read.detail["untrusted"] is True
    write = task.steps.get(tool="create_ticket")
    assert (write.status, write.agent) == ("waiting_approval", "billing")
    label = f"search_notes#{read.seq}@{str(task.pk)[:8]}"
    assert write.tainted_by == [label]
    assert task.tainted_by == [label]
    [approval] = pending(task)
    assert label in approval.step.detail["approval"]["tainted_by"]

    approval_decide(approval=approval, user=operator, decision="approve")
    task = advance(task)
    assert (task.status, task.final_answer) == ("succeeded", "Ticket opened.")
    assert task.steps.get(tool="create_ticket").status == "succeeded"


def test_max_steps_counts_the_model_calls_of_both_agents(alice, demo, model):
    desks = desk_agents(max_steps=3)
    model(
        Desk(
            {
                "frontdesk": [HAND_TO_BILLING],
                "billing": [
                    ("calculate", {"expression": "1 + 1"}),
                    ("calculate", {"expression": "2 + 2"}),
                    ("calculate", {"expression": "3 + 3"}),
                ],
            }
        )
    )

    task = ask(alice, desks.frontdesk, "add things up")

    assert (task.status, task.stop_reason) == ("stopped", "max_steps")
    model_calls = task.steps.filter(kind="model_call")
    # One of the frontdesk, two of billing: the frontdesk's limit of 3 held,
    # though billing's own is 12.
    assert [s.agent for s in model_calls.order_by("seq")] == [
        "frontdesk",
        "billing",
        "billing",
    ]
    assert desks.billing.max_steps == 12


def test_a_handoff_to_an_agent_the_user_may_not_use_is_refused_and_the_model_told(
    alice, bob, desks, model
):
    desks.billing.allowed_users.set([bob])
    desk = Desk(
        {"frontdesk": [HAND_TO_BILLING]}, {"frontdesk": "I cannot pass you on."}
    )
    model(desk)

    task = ask(alice, desks.frontdesk, "refund please")

    assert (task.status, task.final_answer) == ("succeeded", "I cannot pass you on.")
    refused = task.steps.get(tool="transfer_to_billing")
    assert (refused.status, refused.error_class) == ("failed", "handoff_refused")
    assert "may not use the agent 'billing'" in refused.error
    assert "handoff" not in refused.detail
    # The frontdesk went on: no step of billing, and the model read the refusal.
    assert set(task.steps.values_list("agent", flat=True)) == {"frontdesk"}
    assert desk.agents_asked() == ["frontdesk", "frontdesk"]
    tool_message = [m for m in desk.requests[1]["messages"] if m["role"] == "tool"]
    assert "may not use the agent 'billing'" in tool_message[0]["content"]
    [event] = AuditEvent.objects.filter(
        task_id=str(task.pk), kind=AuditKind.TASK_HANDOFF_REFUSED
    )
    assert event.data["to"] == "billing" and event.data["from"] == "frontdesk"
    # bob may use billing: his handoff goes through.
    model(Desk({"frontdesk": [HAND_TO_BILLING]}, {"billing": "Billing here."}))
    assert ask(bob, desks.frontdesk, "refund please").final_answer == "Billing here."


def test_agents_handing_the_run_back_and_forth_stop_with_handoff_loop(
    alice, desks, model
):
    model(
        Desk(
            {
                "frontdesk": [HAND_TO_BILLING] * 3,
                "billing": [HAND_TO_FRONTDESK] * 3,
            }
        )
    )

    task = ask(alice, desks.frontdesk, "who handles this?")

    assert (task.status, task.stop_reason) == ("stopped", "handoff_loop")
    calls = list(task.steps.filter(kind="tool_call").order_by("seq"))
    assert [(s.tool, s.status) for s in calls] == [
        ("transfer_to_billing", "succeeded"),
        ("transfer_to_frontdesk", "succeeded"),
        ("transfer_to_billing", "skipped"),
    ]
    assert calls[-1].error_class == "handoff_loop"
    assert "already handed from frontdesk to billing" in calls[-1].error
    last = task.conversation.messages.order_by("-created_at").first()
    assert "kept handing the conversation" in last.content


def test_max_handoffs_stops_the_run_at_its_limit(alice, demo, model):
    desks = desk_agents(max_handoffs=1)
    model(Desk({"frontdesk": [HAND_TO_BILLING], "billing": [HAND_TO_FRONTDESK]}))

    task = ask(alice, desks.frontdesk, "pass it around")

    assert (task.status, task.stop_reason) == ("stopped", "handoff_loop")
    back = task.steps.get(tool="transfer_to_frontdesk")
    assert (back.status, back.error_class) == ("skipped", "handoff_loop")
    assert "limit of 1 handoff" in back.error


def test_a_fork_after_the_handoff_resumes_with_the_agent_acting_at_that_step(
    alice, desks, model, api_client_for
):
    desk = Desk(
        {
            "frontdesk": [HAND_TO_BILLING],
            "billing": [("calculate", {"expression": "6 * 7"})],
        },
        {"billing": "42."},
    )
    model(desk)
    parent = ask(alice, desks.frontdesk, "how much?")
    assert parent.status == "succeeded"
    calculate = parent.steps.get(tool="calculate")

    # From billing's calculate, with other arguments: planned against billing's
    # tools (the frontdesk has no calculate).
    response = fork(
        api_client_for(alice),
        parent,
        from_seq=calculate.seq,
        arguments={"expression": "6 * 8"},
    )
    assert response.status_code == 202, response.content
    child = advance(parent.forks.get())
    assert child.status == "succeeded", child.error_message
    forked = child.steps.get(seq=calculate.seq)
    assert (forked.status, forked.agent, forked.result["result"]) == (
        "succeeded",
        "billing",
        48,
    )
    # The fork's next model call spoke as billing.
    assert desk.agents_asked()[-1] == "billing"

    # From the model call after the handoff: the model is asked again, as billing.
    asked = len(desk.requests)
    response = fork(api_client_for(alice), parent, from_seq=3)
    assert response.status_code == 202, response.content
    second = advance(parent.forks.exclude(pk=child.pk).get())
    assert second.status == "succeeded"
    assert desk.agents_asked()[asked] == "billing"
    assert second.steps.get(seq=3).agent == "billing"


def test_a_rerun_reproduces_the_handoff_and_the_trace_names_the_acting_agents(
    alice, desks, model, api_client_for
):
    model(
        Desk(
            {
                "frontdesk": [READ, HAND_TO_BILLING],
                "billing": [("calculate", {"expression": "1 + 2"})],
            },
            {"billing": "3."},
        )
    )
    task = ask(alice, desks.frontdesk, "sum")
    assert task.status == "succeeded"

    result = task_rerun(task=task)
    assert result.matches, result.divergence
    assert [s.agent for s in result.steps] == [s for *_, s in steps_of(task)]

    document = trace_of(api_client_for(alice), task.pk)
    assert [s["agent"] for s in document["steps"]] == [
        "frontdesk",
        "frontdesk",
        "frontdesk",
        "frontdesk",
        "billing",
        "billing",
        "billing",
    ]
    html = logged_in(alice).get(f"/traces/{task.pk}/").content.decode()
    assert '<span class="badge agent" title="the acting agent">billing</span>' in html


def test_an_agent_without_handoff_targets_records_no_agent_on_its_steps(
    alice, demo, model
):
    desk = Desk({}, {"": "plain"})
    model(desk)
    task = ask(alice, demo.agent, "hello")
    assert task.status == "succeeded"
    assert list(task.steps.values_list("agent", flat=True)) == [None]
    assert "handoffs" not in task.agent_snapshot
    assert not any(
        t["function"]["name"].startswith("transfer_to_")
        for t in desk.requests[0]["tools"]
    )


class TriageThenRedis(RedisScript):
    """The demo question through the demo's triage agent: a model offered
    ``transfer_to_assistant`` takes it; the assistant then plays the demo as
    ``RedisScript`` does, reading past the handoff (as the built-in model does)."""

    def respond(self, request: dict[str, Any]) -> Any:
        offered = {t["function"]["name"] for t in request.get("tools") or []}
        if "transfer_to_assistant" in offered:
            return tool_call("transfer_to_assistant", {})
        handoff_ids = {
            call["id"]
            for m in request["messages"]
            if m["role"] == "assistant"
            for call in m.get("tool_calls") or []
            if call["function"]["name"].startswith("transfer_to_")
        }
        messages = [
            m
            for m in request["messages"]
            if m.get("tool_call_id") not in handoff_ids
            and not (
                m["role"] == "assistant"
                and {c["id"] for c in m.get("tool_calls") or []} & handoff_ids
            )
        ]
        return super().respond({**request, "messages": messages})


def test_the_demo_triage_agent_hands_the_demo_question_to_the_assistant(
    alice, demo, model
):
    model(TriageThenRedis())
    triage = Agent.objects.get(name="triage")

    task = ask(alice, triage, QUESTION)

    assert task.status == "succeeded", task.error_message
    assert "1088" in task.final_answer
    assert [(s.agent, s.tool) for s in task.steps.order_by("seq")] == [
        ("triage", None),
        ("triage", "transfer_to_assistant"),
        ("assistant", None),
        ("assistant", "search_notes"),
        ("assistant", None),
        ("assistant", "calculate"),
        ("assistant", None),
    ]
