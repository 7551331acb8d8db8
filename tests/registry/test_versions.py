"""Tool versions: who changed what and when, what a run used, and the admin's diff."""

from __future__ import annotations

import pytest

from registry.admin import version_changes
from registry.models import Tool, ToolVersion
from registry.services import tool_save
from runs import services as runs
from runs import tasks as run_tasks
from runs.models import Step
from tests.support.admin_forms import admin_form_data
from tests.support.replies import calls_then_answers


def latest(tool: Tool) -> ToolVersion:
    version = tool.versions.order_by("-version").first()
    assert version is not None
    return version


CHANGES = {
    "schema": lambda t: setattr(
        t,
        "parameters",
        {
            **t.parameters,
            "properties": {
                "expression": {"type": "string", "description": "e.g. (1 + 2) * 3"}
            },
        },
    ),
    "description": lambda t: setattr(t, "description", t.description + " Exact."),
    "implementation": lambda t: setattr(t, "timeout_s", 7.0),
    "policy": lambda t: setattr(t, "approval", "always"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("what", sorted(CHANGES))
def test_every_change_of_a_tool_makes_a_new_version_with_who_and_when(demo, what):
    tool = Tool.objects.get(name="calculate")
    before = latest(tool)
    CHANGES[what](tool)

    tool, made = tool_save(tool=tool, user=demo.admin)

    assert made is True
    version = latest(tool)
    assert version.version == before.version + 1 == tool.version
    assert version.changed_by == demo.admin
    assert version.changed_at > before.changed_at
    assert version.definition != before.definition
    assert before.definition == ToolVersion.objects.get(pk=before.pk).definition


@pytest.mark.django_db
def test_saving_an_unchanged_tool_makes_no_new_version(demo):
    tool = Tool.objects.get(name="calculate")
    count = tool.versions.count()

    tool, made = tool_save(tool=tool, user=demo.admin)

    assert made is False
    assert tool.versions.count() == count


@pytest.mark.django_db
def test_a_change_through_the_admin_form_is_a_version_by_that_admin(client, demo):
    client.force_login(demo.admin)
    tool = Tool.objects.get(name="search_notes")
    url = f"/admin/registry/tool/{tool.pk}/change/"
    data = admin_form_data(client.get(url))
    data["description"] = data["description"] + " Matches whole words only."

    response = client.post(url, data)

    assert response.status_code == 302, response.content.decode()[:2000]
    tool.refresh_from_db()
    assert tool.version == 2
    version = latest(tool)
    assert version.changed_by == demo.admin
    assert version.definition["description"].endswith("Matches whole words only.")


@pytest.mark.django_db
def test_an_unchanged_admin_form_makes_no_version(client, demo):
    client.force_login(demo.admin)
    tool = Tool.objects.get(name="search_notes")
    url = f"/admin/registry/tool/{tool.pk}/change/"

    response = client.post(url, admin_form_data(client.get(url)))

    assert response.status_code == 302
    assert tool.versions.count() == 1


@pytest.mark.django_db
def test_the_admin_offers_retiring_a_tool_not_deleting_it(client, demo):
    """Steps name a tool by name and version: a tool is never deleted, so the
    admin offers no Delete that would then refuse, and says what to do instead."""
    client.force_login(demo.admin)
    tool = Tool.objects.get(name="search_notes")

    url = f"/admin/registry/tool/{tool.pk}/"
    change = client.get(f"{url}change/").content.decode()

    assert f"{url}delete/" not in change and "Untick to retire the tool" in change
    assert client.get(f"{url}delete/").status_code == 403
    assert "delete_selected" not in client.get("/admin/registry/tool/").content.decode()
    assert Tool.objects.filter(pk=tool.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_trace_records_the_tool_version_each_run_used(alice, demo, model):
    model(
        calls_then_answers(
            ("calculate", {"expression": "1 + 1"}, "2"),
            ("calculate", {"expression": "2 + 2"}, "4"),
        )
    )
    conversation = runs.conversation_create(owner=alice, agent=demo.agent)
    first = runs.task_start(conversation=conversation, content="1 + 1?")
    run_tasks.task_advance(task_id=first.pk)
    tool = Tool.objects.get(name="calculate")
    tool.description += " Use it for every sum."
    tool_save(tool=tool, user=demo.admin)
    second = runs.task_start(conversation=conversation, content="2 + 2?")
    run_tasks.task_advance(task_id=second.pk)

    for task, version in ((first, 1), (second, 2)):
        task.refresh_from_db()
        assert task.status == "succeeded", task.error_message
        step = task.steps.get(kind=Step.Kind.TOOL_CALL)
        assert step.tool_version == version
        (snapshot,) = [
            d for d in task.agent_snapshot["tools"] if d["name"] == "calculate"
        ]
        assert snapshot["version"] == version
        assert (
            snapshot["description"]
            == ToolVersion.objects.get(tool=tool, version=version).definition[
                "description"
            ]
        )


@pytest.mark.django_db
def test_the_admin_shows_the_history_with_a_link_to_each_diff(client, demo):
    tool = Tool.objects.get(name="create_ticket")
    tool.description = tool.description.replace("the team's tracker", "Jira")
    tool.approval = "always"
    tool_save(tool=tool, user=demo.admin)
    client.force_login(demo.admin)

    page = client.get(f"/admin/registry/tool/{tool.pk}/change/").content.decode()

    v2 = ToolVersion.objects.get(tool=tool, version=2)
    assert "first version" in page
    assert "description, approval" in page
    assert f"/admin/registry/toolversion/{v2.pk}/change/" in page


@pytest.mark.django_db
def test_the_version_page_shows_a_field_level_diff_from_the_version_before(
    client, demo
):
    tool = Tool.objects.get(name="create_ticket")
    tool.description = tool.description.replace("the team's tracker", "Jira")
    tool.approval = "always"
    tool_save(tool=tool, user=demo.admin)
    client.force_login(demo.admin)
    v2 = ToolVersion.objects.get(tool=tool, version=2)

    page = client.get(f"/admin/registry/toolversion/{v2.pk}/change/").content.decode()

    assert "(v1 → v2)" in page
    assert "<del>the team&#x27;s tracker.</del>" in page
    assert "<ins>Jira.</ins>" in page
    assert "<del>- &quot;never&quot;</del>" not in page  # strings get a word diff
    assert "<del>never</del>" in page and "<ins>always</ins>" in page
    assert "<script" not in page.split("reach-version-diff", 1)[1].split("</table>")[0]


@pytest.mark.django_db
def test_the_diff_escapes_what_it_shows(client, demo):
    tool = Tool.objects.get(name="create_ticket")
    tool.description += " <script>alert(1)</script>"
    tool_save(tool=tool, user=demo.admin)
    client.force_login(demo.admin)
    v2 = ToolVersion.objects.get(tool=tool, version=2)

    page = client.get(f"/admin/registry/toolversion/{v2.pk}/change/").content.decode()

    assert "<ins>&lt;script&gt;alert(1)&lt;/script&gt;</ins>" in page
    assert "<script>alert(1)" not in page


def test_schema_changes_are_shown_as_a_line_diff_of_the_json():
    before = {"parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}
    after = {"parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}

    (change,) = version_changes(before, after)

    assert change["field"] == "parameters" and change["kind"] == "changed"
    assert ("-", '      "type": "string"') in change["lines"]
    assert ("+", '      "type": "number"') in change["lines"]


def test_a_first_version_shows_every_field_as_added_and_ignores_the_number():
    changes = version_changes(None, {"name": "x", "version": 1, "tags": ["demo"]})

    assert [(c["field"], c["kind"]) for c in changes] == [
        ("name", "added"),
        ("tags", "added"),
    ]
