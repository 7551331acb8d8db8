"""The append-only audit log: every event, no payloads, a verifiable hash chain."""

from __future__ import annotations

import io
import json
import threading
from datetime import timedelta

import pytest
from django.contrib import admin
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client, RequestFactory
from django.utils import timezone
from rest_framework.test import APIClient

from approvals.models import ApprovalRequest
from approvals.services import approvals_expire
from audit.models import AuditEvent, AuditHead
from audit.services import GENESIS, audit_append, audit_verify
from registry.models import Agent, Tool
from registry.services import tool_from_definition, tool_save
from tests.support.cast import EMAIL, QUESTION
from tests.support.clients import fork, import_trace, trace_of
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask, decide

pytestmark = pytest.mark.django_db(transaction=True)


def kinds() -> set[str]:
    return set(AuditEvent.objects.values_list("kind", flat=True))


def verify() -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("verify_audit", stdout=out, stderr=err)
    return AuditEvent.objects.count(), out.getvalue(), err.getvalue()


def test_every_listed_event_is_appended(
    alice, operator, admin_user, demo, model, api_client_for
):
    # Tools: registered, changed, disabled, enabled.
    tool, _ = tool_save(
        tool=tool_from_definition(
            {
                "name": "lookup_order",
                "description": "Look up an order.",
                "parameters": {"type": "object", "properties": {}},
                "kind": "python",
                "handler": "calculate",
            }
        ),
        user=admin_user,
    )
    tool.description = "Look up one order."
    tool_save(tool=tool, user=admin_user)
    tool.enabled = False
    tool_save(tool=tool, user=admin_user)
    tool.enabled = True
    tool_save(tool=tool, user=admin_user)
    # The agent, changed in the admin.
    request = RequestFactory().post("/admin/registry/agent/")
    request.user = admin_user
    agent = Agent.objects.get(name="assistant")
    agent.max_steps = 11
    admin.site._registry[Agent].save_model(request, agent, None, True)
    # A run: started, approval requested and decided, finished; another expired.
    model(
        Script(
            [
                tool_call("send_email", EMAIL),
                text("sent"),
                tool_call("send_email", EMAIL),
            ]
        )
    )
    task = ask(alice, demo.agent, "mail it")
    task = decide(task, operator, "approve")
    second = ask(alice, demo.agent, "mail it again")
    ApprovalRequest.objects.filter(task=second).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert approvals_expire() == 1
    # Trace exported, imported, forked; a failed login.
    client = api_client_for(operator)
    document = trace_of(client, task.pk)
    assert import_trace(client, document).status_code == 201
    assert fork(client, task, from_seq=1).status_code == 202
    Client().post("/accounts/login/", {"username": "alice", "password": "wrong"})

    assert {
        "task.started",
        "task.finished",
        "approval.requested",
        "approval.decided",
        "approval.expired",
        "tool.registered",
        "tool.changed",
        "tool.disabled",
        "tool.enabled",
        "agent.changed",
        "trace.exported",
        "trace.imported",
        "task.forked",
        "auth.login_failed",
    } <= kinds()
    failed = AuditEvent.objects.get(kind="auth.login_failed")
    assert failed.object_id == "alice" and failed.actor == "anonymous"
    assert audit_verify() == (AuditEvent.objects.count(), [])


def test_the_audit_carries_no_payloads(redis_task):
    task = redis_task
    payloads = [
        QUESTION,
        task.final_answer,
        "128 * 6 + 320",
        "缓存改造",
        "Redis",
    ]

    rows = json.dumps(
        list(AuditEvent.objects.values("actor", "object_id", "data")),
        ensure_ascii=False,
    )

    assert AuditEvent.objects.filter(task_id=str(task.pk)).count() >= 2
    for payload in payloads:
        assert payload not in rows


def test_verify_audit_prints_the_count_and_passes_on_an_intact_chain(alice, demo):
    for n in range(5):
        audit_append(kind="test.event", actor=alice, object_id=n)

    count, out, err = verify()

    # and the demo's four tools and the three memory tools, registered, the
    # triage agent's handoff to the assistant, and alice's paused schedule saved
    assert count == 5 + 4 + 3 + 1 + 1
    assert f"{count} audit events checked" in out and "intact" in out
    assert err == ""


def tamper_and_verify(change) -> str:
    for n in range(6):
        audit_append(kind="test.event", actor="system", object_id=n, data={"n": n})
    change()
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="tampered"):
        call_command("verify_audit", stdout=out, stderr=err)
    assert "audit events checked" in out.getvalue()
    return err.getvalue()


def test_verify_audit_detects_an_edited_row(db):
    err = tamper_and_verify(
        lambda: AuditEvent.objects.filter(position=3).update(actor="mallory")
    )
    assert "event 3: content does not match its hash" in err


def test_verify_audit_detects_a_deleted_row(db):
    err = tamper_and_verify(lambda: AuditEvent.objects.filter(position=3).delete())
    assert "position 3 is missing" in err
    assert "event 4: link to the previous is broken" in err


def test_verify_audit_detects_reordered_rows(db):
    def swap() -> None:
        AuditEvent.objects.filter(position=2).update(position=10_000)
        AuditEvent.objects.filter(position=4).update(position=2)
        AuditEvent.objects.filter(position=10_000).update(position=4)

    err = tamper_and_verify(swap)
    assert "event 2: link to the previous is broken" in err
    assert "event 2: content does not match its hash" in err


def test_verify_audit_detects_a_removed_tail(db):
    err = tamper_and_verify(lambda: AuditEvent.objects.filter(position=6).delete())
    assert "tail removed" in err


def test_verify_audit_detects_a_rehashed_edit(db):
    """Recomputing the edited row's own hash still breaks the next link."""
    from audit.services import event_hash

    def rehash() -> None:
        event = AuditEvent.objects.get(position=3)
        event.actor = "mallory"
        event.hash = event_hash(event)
        event.save()

    err = tamper_and_verify(rehash)
    assert "event 4: link to the previous is broken" in err


def test_export_audit_writes_the_chain_as_json_lines(db, tmp_path):
    for n in range(4):
        audit_append(kind="test.event", actor="system", object_id=n)
    out = io.StringIO()

    call_command("export_audit", stdout=out)

    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["position"] for e in events] == [1, 2, 3, 4]
    assert events[0]["prev_hash"] == GENESIS
    assert all(
        b["prev_hash"] == a["hash"] for a, b in zip(events, events[1:], strict=False)
    )
    assert set(events[0]) == {
        "position", "kind", "actor", "task", "object_type", "object_id", "data",
        "at", "prev_hash", "hash",
    }  # fmt: skip
    target = tmp_path / "audit.jsonl"
    call_command("export_audit", "--after", "2", "--output", str(target),
                 stderr=io.StringIO())  # fmt: skip
    lines = target.read_text().splitlines()
    assert [json.loads(line)["position"] for line in lines] == [3, 4]


def test_the_audit_api_streams_json_lines_to_auditors_only(
    alice, operator, api_client_for
):
    for n in range(3):
        audit_append(kind="test.event", actor="system", object_id=n)

    response = api_client_for(operator).get(
        "/api/audit/?after=1", HTTP_ACCEPT="application/x-ndjson"
    )

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/x-ndjson")
    body = b"".join(response.streaming_content).decode()
    last = AuditEvent.objects.latest("position").position
    assert [json.loads(line)["position"] for line in body.splitlines()] == list(
        range(2, last + 1)
    )
    assert json.loads(body.splitlines()[-1])["kind"] == "test.event"
    assert api_client_for(alice).get("/api/audit/").status_code == 403
    assert APIClient().get("/api/audit/").status_code == 401


@pytest.mark.dbsensitive
def test_concurrent_appends_keep_one_unbroken_chain(transactional_db):
    threads, per_thread = 8, 15
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def append(worker: int) -> None:
        try:
            start.wait()
            for n in range(per_thread):
                audit_append(kind="test.concurrent", actor=f"w{worker}", object_id=n)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=append, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)

    assert errors == []
    total = threads * per_thread
    assert list(AuditEvent.objects.values_list("position", flat=True)) == list(
        range(1, total + 1)
    )
    assert audit_verify() == (total, [])
    assert AuditHead.objects.get(pk=1).position == total


def test_tool_confirmation_changes_are_audited_too(admin_user, demo):
    tool = Tool.objects.get(name="calculate")
    tool.timeout_s = 7.0
    tool_save(tool=tool, user=admin_user)
    event = AuditEvent.objects.filter(kind="tool.changed").latest("position")
    assert event.object_id == "calculate" and event.actor == "admin"
    assert event.data == {"version": tool.version}
