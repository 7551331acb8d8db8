"""Who may use what: agents and tools name their users and groups (default everyone).

alice against bob throughout: a restriction to alice hides the thing from bob, in
the API, the chat, the admin's view of it and the runs bob starts.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group

from audit.models import AuditEvent, AuditKind
from registry.access import (
    may_use_agent,
    may_use_tool,
    offered_tools_for,
    usable_agents,
)
from registry.models import Agent, Tool
from registry.services import agent_snapshot, agent_snapshot_of
from runs import services as runs
from runs.models import Task
from tests.support.admin_forms import admin_form_data
from tests.support.clients import bearer_client, logged_in, post_message
from tests.support.replies import Script, text, tool_call
from tests.support.runs import advance, ask, start
from tests.support.scripted_model import tool_messages

pytestmark = pytest.mark.django_db


@pytest.fixture
def offered(demo):
    """What the demo agent offers everyone (send_email among them)."""
    names = {t.name for t in demo.agent.offered_tools()}
    assert {"calculate", "send_email"} <= names
    return names


@pytest.fixture
def finance(demo):
    """An agent only alice may use."""
    agent = Agent.objects.create(name="finance", tool_tags=["demo"])
    agent.allowed_users.add(demo.alice)
    return agent


@pytest.fixture
def mail_for_alice(demo):
    """send_email, restricted to alice."""
    tool = Tool.objects.get(name="send_email")
    tool.allowed_users.add(demo.alice)
    return tool


# -- the rules -----------------------------------------------------------------------


def test_with_no_one_named_everyone_may_use_an_agent_and_a_tool(demo):
    calculate = Tool.objects.get(name="calculate")
    for user in (demo.alice, demo.bob, demo.operator):
        assert may_use_agent(user, demo.agent)
        assert may_use_tool(user, calculate)


def test_an_agent_named_for_a_user_is_hers_alone(demo, finance):
    assert may_use_agent(demo.alice, finance)
    assert not may_use_agent(demo.bob, finance)
    triage = Agent.objects.get(name="triage")  # the demo's, open to everyone
    extractor = Agent.objects.get(name="extractor")  # the demo's too
    assert set(usable_agents(demo.bob)) == {demo.agent, triage, extractor}
    assert set(usable_agents(demo.alice)) == {demo.agent, triage, extractor, finance}


def test_a_group_opens_it_to_its_members(demo, finance):
    accountants = Group.objects.create(name="accountants")
    finance.allowed_groups.add(accountants)
    assert not may_use_agent(demo.bob, finance)
    demo.bob.groups.add(accountants)
    assert may_use_agent(demo.bob, finance)
    # Still alice's too, and no one's else.
    assert may_use_agent(demo.alice, finance)
    assert not may_use_agent(demo.operator, finance)


def test_superusers_may_use_everything(demo, finance, mail_for_alice):
    assert may_use_agent(demo.admin, finance)
    assert may_use_tool(demo.admin, mail_for_alice)


def test_a_run_of_bob_is_offered_only_the_tools_bob_may_use(
    demo, mail_for_alice, offered
):
    bob_tools = {t["name"] for t in agent_snapshot_of(demo.agent, user=demo.bob).tools}
    alice_tools = {
        t["name"] for t in agent_snapshot_of(demo.agent, user=demo.alice).tools
    }
    assert bob_tools == offered - {"send_email"}
    assert alice_tools == offered
    assert {t.name for t in offered_tools_for(demo.agent, demo.bob)} == bob_tools


# -- runs ------------------------------------------------------------------------------


def _bob_calls_send_email(model):
    script = Script(
        [
            tool_call(
                "send_email", {"to": "x@example.com", "subject": "s", "body": "b"}
            ),
            text("I cannot send mail."),
        ]
    )
    model(script)
    return script


def _assert_hidden_and_refused(task, script, offered):
    sent = {t["function"]["name"] for t in script.requests[0]["tools"]}
    assert sent == offered - {"send_email"}
    [step] = task.steps.filter(kind="tool_call")
    assert (step.status, step.error_class) == ("failed", "unknown_tool")
    [observation] = tool_messages(script.requests[1])
    error = json.loads(observation["content"])["error"]
    # The refusal reads as for a tool that does not exist and names no hidden tool.
    assert "send_email" not in error
    available = ", ".join(sorted(offered - {"send_email"}))
    assert f"Available tools: {available}." in error
    assert task.status == "succeeded"
    assert not task.steps.filter(status="waiting_approval").exists()


@pytest.mark.django_db(transaction=True)
def test_a_tool_bob_may_not_use_is_never_offered_and_refused_when_called(
    demo, mail_for_alice, offered, model
):
    """Through the real engine and model client, on a run whose snapshot is the
    one its start records for bob (``agent_snapshot(agent, user=owner)``)."""
    script = _bob_calls_send_email(model)
    task = start(demo.bob, demo.agent, "mail the report")
    Task.objects.filter(pk=task.pk).update(
        agent_snapshot=agent_snapshot(demo.agent, user=demo.bob)
    )

    task = advance(task)

    _assert_hidden_and_refused(task, script, offered)


@pytest.mark.django_db(transaction=True)
def test_a_run_started_by_bob_records_only_his_tools(
    demo, mail_for_alice, offered, model
):
    script = _bob_calls_send_email(model)

    task = ask(demo.bob, demo.agent, "mail the report")

    _assert_hidden_and_refused(task, script, offered)


# -- the API ---------------------------------------------------------------------------


def test_the_agent_list_shows_bob_only_his_agents_with_his_tools(
    demo, finance, mail_for_alice, offered
):
    bob = {a["name"]: a for a in bearer_client(demo.bob).get("/api/agents/").json()}
    alice = {a["name"]: a for a in bearer_client(demo.alice).get("/api/agents/").json()}
    assert set(bob) == {"assistant", "triage", "extractor"}
    assert set(bob["assistant"]["tools"]) == offered - {"send_email"}
    assert set(alice) == {"assistant", "triage", "extractor", "finance"}
    assert set(alice["assistant"]["tools"]) == offered


def test_bob_cannot_start_a_conversation_with_an_agent_he_may_not_use(demo, finance):
    response = bearer_client(demo.bob).post(
        "/api/conversations/", {"agent": "finance"}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["error"].startswith("You may not use the agent 'finance'")
    assert not finance.conversation_set.exists()
    ok = bearer_client(demo.alice).post(
        "/api/conversations/", {"agent": "finance"}, format="json"
    )
    assert ok.status_code == 201


def test_the_default_agent_is_one_the_caller_may_use(demo, finance):
    demo.agent.is_default = False
    demo.agent.save()
    finance.is_default = True
    finance.save()
    response = bearer_client(demo.bob).post("/api/conversations/", {}, format="json")
    assert response.status_code == 201
    assert response.json()["agent"] == "assistant"


def test_a_message_to_an_agent_no_longer_allowed_is_refused(demo, finance):
    conversation = runs.conversation_create(owner=demo.bob, agent=finance)
    client = bearer_client(demo.bob)

    response = post_message(client, conversation.pk, "hi")

    assert response.status_code == 403
    assert "You may not use the agent 'finance'" in response.json()["error"]
    assert not conversation.tasks.exists()
    # The conversation itself stays readable to its owner.
    assert client.get(f"/api/conversations/{conversation.pk}/").status_code == 200


# -- the chat --------------------------------------------------------------------------


def test_the_chat_offers_bob_only_his_agents_and_tools(
    demo, finance, mail_for_alice, offered
):
    page = logged_in(demo.bob).get("/")
    assert page.status_code == 200
    agents = {a.name for a in page.context["agents"]}
    assert agents == {"assistant", "triage", "extractor"}
    assert {t.name for t in page.context["offered_tools"]} == offered - {"send_email"}
    assert b"<code>send_email</code>" not in page.content
    assert b"<code>send_email</code>" in logged_in(demo.alice).get("/").content


def test_bob_cannot_open_a_chat_with_an_agent_he_may_not_use(demo, finance):
    response = logged_in(demo.bob).post("/c/new/", {"agent": "finance"})
    assert response.status_code == 403
    assert (
        logged_in(demo.alice).post("/c/new/", {"agent": "finance"}).status_code == 302
    )


def test_a_conversation_with_an_agent_no_longer_allowed_is_read_only(demo, finance):
    conversation = runs.conversation_create(owner=demo.bob, agent=finance)
    page = logged_in(demo.bob).get(f"/c/{conversation.pk}/")
    assert page.status_code == 200
    assert b'data-testid="agent-forbidden"' in page.content


# -- the admin -------------------------------------------------------------------------


def test_admins_set_who_may_use_a_tool_and_it_is_audited(demo):
    admin = logged_in(demo.admin)
    tool = Tool.objects.get(name="send_email")
    url = f"/admin/registry/tool/{tool.pk}/change/"
    page = admin.get(url)
    assert b"Who may use it" in page.content
    data = admin_form_data(page)
    data["allowed_users"] = [str(demo.alice.pk)]

    response = admin.post(url, data)

    assert response.status_code == 302, response.content[:2000]
    assert list(tool.allowed_users.all()) == [demo.alice]
    assert Tool.objects.get(pk=tool.pk).version == tool.version  # not a new version
    event = AuditEvent.objects.get(kind=AuditKind.ACCESS_CHANGED)
    assert (event.object_type, event.object_id) == ("tool", "send_email")
    assert event.data == {"users": ["alice"], "groups": []}
    listing = admin.get("/admin/registry/tool/")
    assert b"alice" in listing.content and b"everyone" in listing.content


def test_admins_set_who_may_use_an_agent(demo):
    admin = logged_in(demo.admin)
    group = Group.objects.create(name="accountants")
    url = f"/admin/registry/agent/{demo.agent.pk}/change/"
    data = admin_form_data(admin.get(url))
    data["allowed_groups"] = [str(group.pk)]

    response = admin.post(url, data)

    assert response.status_code == 302, response.content[:2000]
    assert list(demo.agent.allowed_groups.all()) == [group]
    assert not may_use_agent(demo.bob, demo.agent)
    assert AuditEvent.objects.filter(
        kind=AuditKind.ACCESS_CHANGED, object_id="assistant"
    ).exists()


def test_the_tool_list_hides_from_bob_the_tools_he_may_not_use(
    demo, mail_for_alice, offered
):
    bob = bearer_client(demo.bob)
    listed = {t["name"] for t in bob.get("/api/tools/").json()}
    assert "send_email" not in listed
    assert offered - {"send_email"} <= listed
    assert bob.get("/api/tools/send_email/versions/").status_code == 404
    alice = {t["name"] for t in bearer_client(demo.alice).get("/api/tools/").json()}
    admin = {t["name"] for t in bearer_client(demo.admin).get("/api/tools/").json()}
    assert "send_email" in alice and "send_email" in admin
