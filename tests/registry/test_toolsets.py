"""Toolsets by scenario: an agent is offered tools by tag as well as by name."""

from __future__ import annotations

from typing import Any

import pytest

from registry.models import Agent, Tool
from registry.services import tool_save
from runs import tasks as run_tasks
from tests.support.replies import Script, text
from tests.support.runs import start

DEMO_TOOLS = {"calculate", "search_notes", "create_ticket", "send_email"}


def register(name: str, tags: list[str], **fields: Any) -> Tool:
    """A python tool reusing a built-in handler, under its own name and tags."""
    tool = Tool(
        name=name,
        description=f"{name.replace('_', ' ').capitalize()} for the scenario test; "
        "returns what the built-in handler returns.",
        parameters={
            "type": "object",
            "properties": {
                "keyword": {"type": "string", "description": "Words to look for"}
            },
            "required": ["keyword"],
        },
        handler="search_notes",
        tags=tags,
        **fields,
    )
    tool, _ = tool_save(tool=tool)
    return tool


def offered_to_model(user: Any, agent: Agent, script: Script) -> set[str]:
    """The tool names the model was offered in the next run of ``agent``."""
    before = len(script.requests)
    task = start(user, agent, "hello")
    run_tasks.task_advance(task_id=task.pk)
    request = script.requests[before]
    return {t["function"]["name"] for t in request.get("tools", [])}


@pytest.mark.django_db(transaction=True)
def test_a_tool_registered_later_with_tag_demo_is_offered_to_the_next_run(
    alice, demo, model
):
    script = Script([text("first"), text("second")])
    model(script)
    assert offered_to_model(alice, demo.agent, script) == DEMO_TOOLS

    register("lookup_glossary", ["demo"])

    assert offered_to_model(alice, demo.agent, script) == DEMO_TOOLS | {
        "lookup_glossary"
    }


@pytest.mark.django_db(transaction=True)
def test_an_agent_with_tags_support_sees_only_the_support_tools(alice, demo, model):
    register("lookup_customer", ["support"])
    register("search_faq", ["support", "demo"])
    register("search_wiki", ["engineering"])
    support = Agent.objects.create(name="support", tool_tags=["support"])
    script = Script([text("hi")])
    model(script)

    assert [t.name for t in support.offered_tools()] == [
        "lookup_customer",
        "search_faq",
    ]
    assert offered_to_model(alice, support, script) == {
        "lookup_customer",
        "search_faq",
    }


@pytest.mark.django_db
def test_an_agent_offers_tools_chosen_by_name_as_well_as_by_tag(demo):
    register("lookup_customer", ["support"])
    agent = Agent.objects.create(name="support", tool_tags=["support"])
    agent.tools.add(Tool.objects.get(name="calculate"))

    assert [t.name for t in agent.offered_tools()] == ["calculate", "lookup_customer"]


@pytest.mark.django_db
def test_disabled_or_unconfirmed_tools_are_not_offered_even_when_tagged(demo):
    register("lookup_customer", ["support"])
    register("search_faq", ["support"], enabled=False)
    register("search_orders", ["support"], enabled=False, confirmed=False)
    agent = Agent.objects.create(name="support", tool_tags=["support"])

    assert [t.name for t in agent.offered_tools()] == ["lookup_customer"]


@pytest.mark.django_db
def test_an_agent_without_tags_or_tools_is_offered_nothing(demo):
    assert Agent.objects.create(name="plain").offered_tools() == []
