"""Agent versions: every save is one, runs record the one they ran (the one
labelled production, else the newest), labels move with an audit trail, and a
rollback makes a new version equal to an old one."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from audit.models import AuditEvent
from reach_site.demo import (
    ASSISTANT_INSTRUCTIONS,
    ASSISTANT_INSTRUCTIONS_V2,
    seed_demo_versions,
)
from registry import versions
from registry.models import Agent, AgentLabel, AgentVersion, Tool
from tests.support.admin_forms import admin_form_data
from tests.support.clients import logged_in
from tests.support.replies import text
from tests.support.runs import ask
from tests.support.scripted_model import EchoScript, messages_of


def newest(agent: Agent) -> AgentVersion:
    version = AgentVersion.objects.filter(agent=agent).order_by("-number").first()
    assert version is not None
    return version


def edit(agent: Agent, **fields: object) -> AgentVersion:
    for name, value in fields.items():
        setattr(agent, name, value)
    agent.save()
    return newest(agent)


class SystemEcho(EchoScript):
    """Answers with the run's system prompt: what the run sent the model."""

    def respond(self, request):
        return text(str(messages_of(request)[0].get("content")))


@pytest.mark.django_db
def test_a_new_agent_starts_at_version_1_and_every_changing_save_adds_one(demo):
    agent = demo.agent
    first = newest(agent)
    assert first.number == 1
    assert first.snapshot["instructions"] == ASSISTANT_INSTRUCTIONS
    assert first.snapshot["tool_tags"] == ["demo"]

    second = edit(agent, max_steps=5)
    agent.description = "Not a versioned field."
    agent.save()
    agent.tools.add(Tool.objects.get(name="recall"))

    numbers = list(agent.versions.order_by("number").values_list("number", flat=True))
    assert numbers == [1, 2, 3]
    assert second.snapshot["max_steps"] == 5 and first.snapshot["max_steps"] == 12
    assert newest(agent).snapshot["tools"] == ["recall"]


@pytest.mark.django_db
def test_an_admin_save_is_one_version_by_that_admin_even_with_its_tools(client, demo):
    client.force_login(demo.admin)
    agent = demo.agent
    url = f"/admin/registry/agent/{agent.pk}/change/"
    data = admin_form_data(client.get(url))
    data["instructions"] = data["instructions"] + " Be brief."
    data["tools"] = [str(Tool.objects.get(name="recall").pk)]

    response = client.post(url, data)

    assert response.status_code == 302, response.content.decode()[:2000]
    assert agent.versions.count() == 2
    made = newest(agent)
    assert made.changed_by == demo.admin
    assert made.snapshot["instructions"].endswith("Be brief.")
    assert made.snapshot["tools"] == ["recall"]
    unchanged = client.post(url, admin_form_data(client.get(url)))
    assert unchanged.status_code == 302 and agent.versions.count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_run_records_its_version_and_chats_run_production_else_the_newest(
    demo, model
):
    model(SystemEcho())
    agent = demo.agent
    v1 = newest(agent)
    v2 = edit(agent, instructions="Version two speaks.")

    newest_run = ask(demo.alice, agent, "hi")
    assert newest_run.agent_version == 2
    assert newest_run.agent_snapshot["instructions"] == "Version two speaks."
    assert "Version two speaks." in newest_run.final_answer

    versions.label_move(agent=agent, name="production", version=v1, user=demo.admin)
    labelled_run = ask(demo.alice, agent, "hi again")
    assert labelled_run.agent_version == 1
    assert labelled_run.agent_snapshot["instructions"] == ASSISTANT_INSTRUCTIONS
    assert ASSISTANT_INSTRUCTIONS[:40] in labelled_run.final_answer
    # The live row is v2 all along: what a chat runs is the label's.
    agent.refresh_from_db()
    assert agent.instructions == "Version two speaks." == v2.snapshot["instructions"]


@pytest.mark.django_db(transaction=True)
def test_a_run_offers_the_tools_its_version_chose_not_the_live_ones(demo, model):
    model(SystemEcho())
    agent = demo.agent
    v1 = newest(agent)
    edit(agent, tool_tags=[])
    versions.label_move(agent=agent, name="production", version=v1)

    task = ask(demo.alice, agent, "hi")

    offered = {d["name"] for d in task.agent_snapshot["tools"]}
    assert {"calculate", "search_notes"} <= offered


@pytest.mark.django_db(transaction=True)
def test_the_api_shows_a_tasks_version_and_filters_by_it(demo, model, api_client_for):
    model(SystemEcho())
    agent = demo.agent
    first = ask(demo.alice, agent, "one")
    edit(agent, instructions="Two.")
    second = ask(demo.alice, agent, "two")
    api = api_client_for(demo.alice)

    assert api.get(f"/api/tasks/{second.pk}/").json()["agent_version"] == 2
    listed = api.get("/api/tasks/?agent_version=1").json()
    assert [t["id"] for t in listed] == [str(first.pk)]
    # Not a version number: refused, as the schema says (an integer).
    refused = api.get("/api/tasks/?agent_version=x")
    assert refused.status_code == 400
    assert refused.json()["agent_version"] == ["agent_version is a version number."]


@pytest.mark.django_db
def test_a_rollback_makes_a_new_version_equal_to_the_old_one(demo):
    agent = demo.agent
    v1 = newest(agent)
    edit(agent, instructions="A worse prompt.", max_steps=3)
    agent.tools.add(Tool.objects.get(name="recall"))
    assert newest(agent).number == 3

    made = versions.version_rollback(agent=agent, version=v1, user=demo.admin)

    assert made.number == 4 and made.snapshot == v1.snapshot
    assert made.note == "rollback to v1" and made.changed_by == demo.admin
    agent.refresh_from_db()
    assert agent.instructions == ASSISTANT_INSTRUCTIONS and agent.max_steps == 12
    assert list(agent.tools.all()) == []
    event = AuditEvent.objects.filter(kind="agent.rolled_back").get()
    assert event.data == {"from": 1, "version": 4} and event.actor == "admin"
    # Nothing of the history was rewritten.
    assert AgentVersion.objects.get(pk=v1.pk).snapshot == made.snapshot
    assert versions.version_resolve(agent) == made


@pytest.mark.django_db
def test_moving_a_label_is_audited_with_where_it_pointed(demo):
    agent = demo.agent
    v1 = newest(agent)
    v2 = edit(agent, max_steps=4)

    versions.label_move(agent=agent, name="production", version=v1, user=demo.admin)
    versions.label_move(agent=agent, name="production", version=v2, user=demo.admin)
    versions.label_move(agent=agent, name="qa-week-49", version=v1)

    assert AgentLabel.objects.filter(agent=agent).count() == 2
    moves = list(
        AuditEvent.objects.filter(kind="agent.label_moved")
        .order_by("position")
        .values_list("object_id", "data")
    )
    assert moves == [
        ("assistant", {"label": "production", "from": None, "to": 1}),
        ("assistant", {"label": "production", "from": 1, "to": 2}),
        ("assistant", {"label": "qa-week-49", "from": None, "to": 1}),
    ]
    with pytest.raises(versions.VersionError):
        versions.label_move(agent=agent, name="not a slug", version=v1)
    other = Agent.objects.get(name="triage")
    with pytest.raises(versions.VersionError):
        versions.label_move(agent=other, name="production", version=v1)


@pytest.mark.django_db
def test_the_admin_shows_a_unified_diff_and_its_actions_label_and_roll_back(
    client, demo
):
    agent = demo.agent
    v1 = newest(agent)
    v2 = edit(agent, instructions="New <b>prompt</b>.", max_steps=7)
    client.force_login(demo.admin)

    page = client.get(f"/admin/registry/agentversion/{v2.pk}/change/")
    body = page.content.decode()
    assert page.status_code == 200
    assert "--- v1" in body and "+++ v2" in body
    assert "-max_steps: 12" in body and "+max_steps: 7" in body
    assert "New &lt;b&gt;prompt&lt;/b&gt;." in body and "<b>prompt</b>" not in body
    agent_page = client.get(f"/admin/registry/agent/{agent.pk}/change/").content
    assert f"/admin/registry/agentversion/{v2.pk}/change/".encode() in agent_page

    changelist = "/admin/registry/agentversion/"
    labelled = client.post(
        changelist, {"action": "label_production", "_selected_action": [v1.pk]}
    )
    assert labelled.status_code == 302
    assert AgentLabel.objects.get(agent=agent, name="production").version == v1
    rolled = client.post(
        changelist, {"action": "rollback", "_selected_action": [v1.pk]}
    )
    assert rolled.status_code == 302
    assert newest(agent).number == 3 and newest(agent).snapshot == v1.snapshot
    assert AuditEvent.objects.filter(kind="agent.label_moved", actor="admin").exists()


@pytest.mark.django_db
def test_the_label_admin_moves_a_label_of_any_name_audited(client, demo):
    agent = demo.agent
    v1 = newest(agent)
    v2 = edit(agent, max_steps=9)
    client.force_login(demo.admin)
    add = "/admin/registry/agentlabel/add/"

    for version in (v1, v2):
        response = client.post(
            add, {"agent": agent.pk, "name": "canary", "version": version.pk}
        )
        assert response.status_code == 302, response.content.decode()[:2000]

    assert AgentLabel.objects.get(agent=agent, name="canary").version == v2
    assert AuditEvent.objects.filter(kind="agent.label_moved").count() == 2


@pytest.mark.django_db
def test_the_command_promotes_the_candidate_to_production(demo):
    assert seed_demo_versions() == ["agent assistant v2 (candidate; v1 is production)"]
    agent = demo.agent
    assert versions.version_resolve(agent).number == 1
    out = io.StringIO()

    call_command(
        "agent_label", "assistant", "candidate", "--to", "production", stdout=out
    )

    assert out.getvalue().strip() == "assistant: production is now v2"
    assert versions.version_resolve(agent).number == 2
    listing = io.StringIO()
    call_command("agent_label", "assistant", stdout=listing)
    assert "* v2" in listing.getvalue() and "candidate, production" in (
        listing.getvalue()
    )
    event = AuditEvent.objects.filter(kind="agent.label_moved").last()
    assert event.data == {"label": "production", "from": 1, "to": 2}


@pytest.mark.django_db
def test_the_demo_seed_gives_the_assistant_a_production_and_a_candidate(demo):
    seed_demo_versions()
    agent = demo.agent
    labels = versions.labels_of(agent)
    assert labels == {1: ["production"], 2: ["candidate"]}
    assert newest(agent).snapshot["instructions"] == ASSISTANT_INSTRUCTIONS_V2
    assert seed_demo_versions() == []  # seeding again changes nothing


@pytest.mark.django_db
def test_references_name_a_label_a_number_or_what_chats_run(demo):
    seed_demo_versions()
    assert versions.version_ref("assistant@candidate")[1].number == 2
    assert versions.version_ref("assistant@v1")[1].number == 1
    assert versions.version_ref("assistant")[1].number == 1
    for bad in ("assistant@v9", "assistant@nope", "nobody@production", "a b"):
        with pytest.raises(versions.VersionError):
            versions.version_ref(bad)


@pytest.mark.django_db
def test_saving_an_agent_whose_production_is_older_says_chats_still_run_it(
    client, demo
):
    agent = demo.agent
    versions.label_move(agent=agent, name="production", version=newest(agent))
    client.force_login(demo.admin)
    url = f"/admin/registry/agent/{agent.pk}/change/"
    data = admin_form_data(client.get(url))
    data["max_steps"] = "6"

    response = client.post(url, data, follow=True)

    text_ = response.content.decode()
    assert "Saved as v2. Chats still run v1 (labelled production)" in text_
    assert versions.version_resolve(agent).number == 1
    version_page = client.get(
        f"/admin/registry/agentversion/{newest(agent).pk}/change/"
    ).content.decode()
    assert 'name="_save"' not in version_page


@pytest.mark.django_db
def test_the_mcp_gateway_lists_the_tools_of_the_version_its_calls_run(demo):
    from gateway.services import gateway_tools

    agent = demo.agent
    versions.label_move(agent=agent, name="production", version=newest(agent))
    edit(agent, tool_tags=[])

    listed = {d["name"] for d in gateway_tools(agent=agent, user=demo.alice)}

    assert {"calculate", "search_notes"} <= listed
    versions.label_move(agent=agent, name="production", version=newest(agent))
    assert gateway_tools(agent=agent, user=demo.alice) == []


@pytest.mark.django_db
def test_the_agent_list_and_the_chat_show_what_a_run_would_use_now(
    demo, api_client_for
):
    agent = demo.agent
    versions.label_move(agent=agent, name="production", version=newest(agent))
    edit(agent, tool_tags=[], model="another-model")

    (listed,) = [
        a
        for a in api_client_for(demo.alice).get("/api/agents/").json()
        if a["name"] == "assistant"
    ]
    chat = logged_in(demo.alice).get("/")

    assert {"calculate", "search_notes"} <= set(listed["tools"])
    assert listed["model"] != "another-model"
    assert {"calculate", "search_notes"} <= {
        t.name for t in chat.context["offered_tools"]
    }
