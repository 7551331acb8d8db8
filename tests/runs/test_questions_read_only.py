"""A question gets no write, through the real runner, the openai SDK and the
scripted model (engine.questions): with REACH_QUESTIONS_READ_ONLY on (as `make up`
runs the built-in model) a question to the demo agent is offered no write tool,
its trace and chat say which tools it went without, and a write it proposes
anyway never runs; an action keeps every tool; an agent may switch it off, and
its versions record the switch."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps as live_apps

from registry.models import AgentVersion
from tests.support.clients import logged_in
from tests.support.replies import Script, text, tool_call
from tests.support.runs import advance, start

pytestmark = pytest.mark.django_db(transaction=True)

WRITES = {"create_ticket", "send_email"}


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


@pytest.fixture
def questions_read_only(settings: Any) -> None:
    """REACH_QUESTIONS_READ_ONLY on, as `make up` sets it for the built-in model.
    (pytest-django's ``settings``, not ``override_settings``: the scripted model's
    fixture changes settings inside the test, and an outer override_settings would
    be restored under those changes and leak into later tests.)"""
    settings.QUESTIONS_READ_ONLY = True


@pytest.mark.usefixtures("questions_read_only")
def test_a_question_is_offered_no_write_and_its_trace_says_so(alice, demo, model):
    script = Script(
        [tool_call("search_notes", {"keyword": "搜索实验"}), text("预算是 740。")]
    )
    model(script)
    task = advance(start(alice, demo.agent, "搜索实验的预算是多少？"))
    assert task.status == "succeeded", task.error_message
    assert all(not offered(r) & WRITES for r in script.requests)
    assert {"search_notes", "calculate"} <= offered(script.requests[0])
    trace = logged_in(alice).get(f"/traces/{task.pk}/").content.decode()
    assert "data-withheld" in trace
    assert "not offered create_ticket, send_email" in trace
    chat = logged_in(alice).get(f"/c/{task.conversation_id}/").content.decode()
    assert "not offered create_ticket, send_email" in chat


@pytest.mark.usefixtures("questions_read_only")
def test_a_write_proposed_for_a_question_never_runs_nor_waits(alice, demo, model):
    model(
        Script(
            [
                tool_call("create_ticket", {"title": "预算", "body": "740"}),
                text("预算是 740。"),
            ]
        )
    )
    task = advance(start(alice, demo.agent, "搜索实验的预算是多少？"))
    assert task.status == "succeeded", task.error_message
    [step] = [s for s in task.steps.all() if s.tool == "create_ticket"]
    assert step.status == "failed" and step.error_class == "unknown_tool"
    assert not task.steps.filter(status="waiting_approval").exists()


@pytest.mark.usefixtures("questions_read_only")
def test_an_action_keeps_every_tool(alice, demo, model):
    script = Script([text("好的。")])
    model(script)
    task = advance(start(alice, demo.agent, "缓存很慢，帮我开一个工单好吗？"))
    assert task.status == "succeeded", task.error_message
    assert offered(script.requests[0]) >= WRITES


@pytest.mark.parametrize(
    ("setting", "switch"), [(True, False), (False, True)], ids=["agent-off", "unset"]
)
def test_off_every_question_is_offered_every_tool(
    alice, demo, model, settings, setting, switch
):
    demo.agent.questions_read_only = switch
    demo.agent.save()
    script = Script([text("740。")])
    model(script)
    settings.QUESTIONS_READ_ONLY = setting
    task = advance(start(alice, demo.agent, "搜索实验的预算是多少？"))
    assert task.status == "succeeded", task.error_message
    assert offered(script.requests[0]) >= WRITES
    trace = logged_in(alice).get(f"/traces/{task.pk}/").content.decode()
    assert "data-withheld" not in trace


def test_the_switch_is_part_of_an_agents_version(demo):
    before = AgentVersion.objects.filter(agent=demo.agent).count()
    demo.agent.questions_read_only = False
    demo.agent.save()
    newest = AgentVersion.objects.filter(agent=demo.agent).order_by("-number")[0]
    assert AgentVersion.objects.filter(agent=demo.agent).count() == before + 1
    assert newest.snapshot["questions_read_only"] is False


def test_versions_saved_before_the_switch_say_it_was_on(demo):
    from importlib import import_module

    migration = import_module("registry.migrations.0009_questions_read_only")
    version = AgentVersion.objects.filter(agent=demo.agent).order_by("-number")[0]
    version.snapshot = {
        k: v for k, v in version.snapshot.items() if k != "questions_read_only"
    }
    version.save(update_fields=["snapshot"])
    migration._snapshots_say_on(live_apps, None)
    version.refresh_from_db()
    assert version.snapshot["questions_read_only"] is True
    # So an unchanged save of the agent makes no new version.
    count = AgentVersion.objects.filter(agent=demo.agent).count()
    demo.agent.save()
    assert AgentVersion.objects.filter(agent=demo.agent).count() == count
