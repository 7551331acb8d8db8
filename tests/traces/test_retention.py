"""Retention: old traces go, their audit rows stay, and a tombstone is appended."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import ApprovalRequest
from audit.models import AuditEvent
from audit.services import audit_verify
from runs.models import Conversation, Message, Step, Task
from tests.support.cast import EMAIL
from tests.support.clients import import_trace
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask, decide
from traces.services import traces_purge

pytestmark = pytest.mark.django_db(transaction=True)


def age(task: Task, days: int) -> None:
    Task.objects.filter(pk=task.pk).update(
        finished_at=timezone.now() - timedelta(days=days)
    )


def test_purge_deletes_old_steps_and_payloads_and_leaves_a_tombstone(
    alice, operator, demo, model, settings
):
    settings.REACH_TRACE_RETENTION_DAYS = 7
    model(Script([tool_call("send_email", EMAIL), text("sent"), text("recent")]))
    old = ask(alice, demo.agent, "mail the report")
    old = decide(old, operator, "approve")
    recent = ask(alice, demo.agent, "hello again", old.conversation)
    age(old, 8)
    audit_before = set(
        AuditEvent.objects.filter(task_id=str(old.pk)).values_list("pk", flat=True)
    )
    assert len(audit_before) >= 4  # started, requested, decided, finished
    total_before = AuditEvent.objects.count()

    assert traces_purge() == 1

    assert not Task.objects.filter(pk=old.pk).exists()
    assert not Step.objects.filter(task_id=old.pk).exists()
    assert not ApprovalRequest.objects.filter(task_id=old.pk).exists()
    assert not Message.objects.filter(content="mail the report").exists()
    assert Task.objects.filter(pk=recent.pk).exists()
    assert recent.steps.count() == 1
    assert Conversation.objects.filter(pk=recent.conversation_id).exists()
    # Audit rows are never deleted; the purge adds its own event.
    assert audit_before <= set(AuditEvent.objects.values_list("pk", flat=True))
    assert AuditEvent.objects.count() == total_before + 1
    tombstone = AuditEvent.objects.latest("position")
    assert tombstone.kind == "traces.purged" and tombstone.actor == "system"
    assert tombstone.data["tasks"] == [str(old.pk)] and tombstone.data["count"] == 1
    assert audit_verify()[1] == []


def test_purge_removes_a_conversation_left_empty(redis_task, settings):
    settings.REACH_TRACE_RETENTION_DAYS = 1
    age(redis_task, 2)

    assert traces_purge() == 1

    assert not Conversation.objects.filter(pk=redis_task.conversation_id).exists()


def test_an_import_ages_from_when_it_arrived(exported, settings):
    settings.REACH_TRACE_RETENTION_DAYS = 7
    _, client, document = exported
    document["task"]["finished_at"] = "2020-01-01T00:00:00+00:00"
    imported = import_trace(client, document).json()

    assert traces_purge() == 0
    assert traces_purge(now=timezone.now() + timedelta(days=8)) == 2
    assert not Task.objects.filter(pk=imported["task"]).exists()


def test_retention_zero_keeps_everything(redis_task, settings):
    settings.REACH_TRACE_RETENTION_DAYS = 0
    age(redis_task, 10_000)

    assert traces_purge() == 0
    assert Task.objects.filter(pk=redis_task.pk).exists()


def test_the_purge_runs_every_hour_on_beat():
    from reach_site.celery import app

    app.finalize()
    entry = next(
        e for e in app.conf.beat_schedule.values() if e["task"] == "traces.purge"
    )
    assert entry["schedule"] == 3600.0
