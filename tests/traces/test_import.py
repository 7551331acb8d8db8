"""Export and import of trace documents: new ids, read-only, validated, redacted."""

from __future__ import annotations

import copy
import json

import pytest
from rest_framework.test import APIClient

from audit.models import AuditEvent
from runs import leases as run_leases
from runs import tasks as run_tasks
from runs.models import Step, Task
from runs.payloads import STEP_KEYS
from tests.support.cast import EDITED_EMAIL, EMAIL
from tests.support.clients import fork, import_trace, logged_in, trace_of
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask, decide
from tests.support.samples import trace

pytestmark = pytest.mark.django_db(transaction=True)

#: What an import keeps of each step: every key but the two it renumbers and
#: re-keys for the new task (``rev``, ``idempotency_key``, checked below).
STEP_FIELDS = tuple(k for k in STEP_KEYS if k not in ("rev", "idempotency_key"))
APPROVAL_FIELDS = (
    "step", "tool", "risk", "arguments", "proposed_arguments", "preview", "status",
    "tainted_by", "approvals_required", "approved_by", "requested_at", "expires_at",
    "decided_by", "decided_at", "reason", "diff",
)  # fmt: skip


def recorded_with_an_edited_approval(alice, operator, demo, model):
    model(Script([tool_call("send_email", EMAIL), text("sent")]))
    task = ask(alice, demo.agent, "mail the report")
    task = decide(task, operator, "approve", arguments=EDITED_EMAIL)
    assert task.status == "succeeded"
    return task


def test_export_then_import_round_trips_with_new_ids(
    alice, operator, demo, model, api_client_for
):
    original = recorded_with_an_edited_approval(alice, operator, demo, model)
    client = api_client_for(operator)
    exported = trace_of(client, original.pk)
    assert exported["format"] == "reach.trace/v1"

    response = import_trace(client, exported)

    assert response.status_code == 201, response.content
    imported = Task.objects.get(pk=response.json()["task"])
    assert imported.pk != original.pk
    assert imported.conversation_id != original.conversation_id
    assert imported.owner == operator
    assert imported.origin["task"] == str(original.pk)
    assert imported.origin["imported_by"] == "operator"
    again = trace_of(client, imported.pk)
    for key in ("goal", "status", "stop_reason", "final_answer", "usage", "model"):
        assert again["task"][key] == exported["task"][key]
    assert again["task"]["id"] == str(imported.pk)
    assert again["task"]["parent"] is None
    assert [{k: s[k] for k in STEP_FIELDS} for s in again["steps"]] == [
        {k: s[k] for k in STEP_FIELDS} for s in exported["steps"]
    ]
    email = next(s for s in again["steps"] if s["tool"] == "send_email")
    assert email["idempotency_key"] == f"{imported.pk}:1:0"
    assert [{k: a[k] for k in APPROVAL_FIELDS} for a in again["approvals"]] == [
        {k: a[k] for k in APPROVAL_FIELDS} for a in exported["approvals"]
    ]
    assert again["agent"]["tools"] == exported["agent"]["tools"]
    assert again["origin"]["task"] == str(original.pk)
    # The export event is appended after the document is made.
    assert [e["kind"] for e in again["audit"]] == ["trace.imported"]
    assert AuditEvent.objects.filter(
        kind="trace.imported", task_id=str(imported.pk), actor="operator"
    ).exists()


def test_an_imported_trace_is_never_claimed_or_continued(exported):
    original, client, document = exported
    imported = Task.objects.get(pk=import_trace(client, document).json()["task"])

    # Even with its status forced back to queued, no worker takes it.
    Task.objects.filter(pk=imported.pk).update(status="queued")
    assert run_leases.task_claim(task_id=imported.pk, owner="w1") is None
    assert run_tasks.task_advance(task_id=imported.pk) == "not-claimed"
    assert str(imported.pk) not in run_tasks.tasks_reap()
    Task.objects.filter(pk=imported.pk).update(status="succeeded")
    # Its conversation takes no new message, it cannot be forked…
    answer = client.post(
        f"/api/conversations/{imported.conversation_id}/messages/",
        {"content": "go on"},
        format="json",
    )
    assert answer.status_code == 409
    assert "read-only" in json.dumps(answer.json())
    forked = fork(client, imported, from_seq=2)
    assert forked.status_code == 409
    # …but re-running it (which executes nothing) works.
    assert client.post(f"/api/tasks/{imported.pk}/rerun/").json()["matches"] is True
    assert imported.steps.count() == original.steps.count()


def test_the_imported_trace_page_is_read_only_and_shows_its_origin(exported, operator):
    original, client, document = exported
    task_id = import_trace(client, document).json()["task"]

    page = logged_in(operator).get(f"/traces/{task_id}/").content.decode()

    assert 'data-testid="imported-banner"' in page
    assert str(original.pk) in page
    assert "fork-form" not in page
    listing = logged_in(operator).get("/traces/?origin=imported").content.decode()
    assert task_id in listing and str(original.pk) not in listing


def test_an_import_is_redacted_on_the_way_in(exported):
    original, client, document = exported
    leaked = "sk-" + "L" * 30
    document["task"]["final_answer"] = f"the key is {leaked}"
    document["steps"][1]["result"] = [{"title": "x", "content": f"Bearer {leaked}"}]

    task = Task.objects.get(pk=import_trace(client, document).json()["task"])

    stored = json.dumps(
        [task.final_answer, list(task.steps.values_list("result", flat=True))]
    )
    assert leaked not in stored
    assert "[REDACTED:api_key]" in task.final_answer


@pytest.mark.parametrize(
    "change, error",
    [
        (lambda d: d.update(format="reach.trace/v0"), '"format" must be'),
        (lambda d: d["task"].update(status="running"), "Only finished runs"),
        (lambda d: d["steps"][0].update(kind="dance"), "steps[0].kind"),
        (lambda d: d["steps"][1].update(seq=1), "appears twice"),
        (lambda d: d["steps"][0].update(started_at="yesterday"), "ISO 8601"),
        (lambda d: d["steps"][0].update(tool="x" * 65), "longer than 64"),
        (lambda d: d.update(steps={}), '"steps" must be a list'),
    ],
)
def test_an_invalid_document_is_refused_with_the_reasons(exported, change, error):
    original, client, document = exported
    document = copy.deepcopy(document)
    change(document)
    before = Task.objects.count()

    response = import_trace(client, document)

    assert response.status_code == 400
    assert any(error in e for e in response.json()["errors"]), response.json()
    assert Task.objects.count() == before


def test_a_document_over_the_size_limit_is_refused_with_413(
    operator, api_client_for, settings
):
    settings.REACH_MAX_IMPORT_BYTES = 2000
    document = {"format": "reach.trace/v1", "task": {}, "steps": [], "pad": "x" * 3000}

    response = import_trace(api_client_for(operator), document)

    assert response.status_code == 413
    assert Task.objects.count() == 0


def test_only_auditors_import(alice, api_client_for):
    document = {"format": "reach.trace/v1"}
    assert import_trace(api_client_for(alice), document).status_code == 403
    assert import_trace(APIClient(), document).status_code == 401


def test_a_document_from_another_implementation_without_extensions_imports(
    operator, demo, api_client_for
):
    # A finished run as another implementation exports it (no extensions).
    document = trace()

    response = import_trace(api_client_for(operator), document)

    assert response.status_code == 201, response.content
    task = Task.objects.get(pk=response.json()["task"])
    assert task.goal == "1 + 1?"
    assert task.agent == demo.agent  # no "elsewhere" here: the default agent
    call = task.steps.get(seq=2)
    assert call.parent_seq == 1
    assert call.idempotency_key == f"{task.pk}:1:0"
    assert Step.objects.filter(task=task).count() == 3
