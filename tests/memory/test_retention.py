"""Retention like traces': what ended long ago is purged, audited, never a live
fact; a purged trace leaves its items with their source in words. And the admin
of agents' memory."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from audit.models import AuditEvent
from memory.models import MemoryAuditKind, MemoryItem
from memory.services import Source, memories_purge, memory_recall, memory_write
from tests.support.clients import logged_in
from tests.support.memory import remembered
from tests.support.runs import start
from traces.services import traces_purge

pytestmark = pytest.mark.django_db


def test_the_purge_keeps_everything_until_a_retention_is_set(alice):
    remembered(alice, "Old fact.", "x")
    remembered(alice, "New fact.", "x")
    assert memories_purge(now=timezone.now() + timedelta(days=999)) == 0
    assert MemoryItem.objects.count() == 2


def test_the_purge_deletes_superseded_and_long_expired_items_only(
    alice, settings, capsys
):
    settings.REACH_MEMORY_RETENTION_DAYS = 30
    old = remembered(alice, "Old fact.", "x")
    live = remembered(alice, "New fact.", "x")
    expired = remembered(
        alice, "Short-lived.", "y", expires_at=timezone.now() + timedelta(days=1)
    )
    kept = remembered(alice, "Forever.", "z")
    later = timezone.now() + timedelta(days=40)
    assert memories_purge(now=later) == 2
    assert set(MemoryItem.objects.values_list("pk", flat=True)) == {live.pk, kept.pk}
    event = AuditEvent.objects.get(kind=MemoryAuditKind.PURGED)
    assert set(event.data["items"]) == {str(old.pk), str(expired.pk)}
    call_command("purge_memories")
    assert "Purged 0" in capsys.readouterr().out


def test_a_purged_trace_leaves_its_items_with_their_source_in_words(
    alice, demo, settings
):
    task = start(alice, demo.agent, "remember this")
    item = memory_write(
        scope=MemoryItem.Scope.USER,
        user=alice,
        subject="s",
        text="Kept after the purge.",
        source=Source.run(task, 2),
    )
    settings.REACH_TRACE_RETENTION_DAYS = 1
    task.__class__.objects.filter(pk=task.pk).update(
        status="succeeded", finished_at=timezone.now() - timedelta(days=2)
    )
    assert traces_purge() == 1
    item.refresh_from_db()
    assert item.source_task_id is None
    assert item.source_label == f"run {str(task.pk)[:8]}, step 2"
    assert memory_recall(user=alice, agent=None, query="purge")
    assert "trace was purged" in logged_in(alice).get("/memory/").content.decode()


def test_admins_write_agent_memory_in_the_admin_and_users_items_stay_read_only(
    admin_user, alice, demo
):
    client = logged_in(admin_user)
    assert client.get("/admin/memory/memoryitem/add/").status_code == 200
    response = client.post(
        "/admin/memory/memoryitem/add/",
        {"agent": demo.agent.pk, "subject": "hours", "text": "Open 9 to 17."},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    item = MemoryItem.objects.get(scope="agent")
    assert (item.agent, item.source_user, item.text) == (
        demo.agent,
        admin_user,
        "Open 9 to 17.",
    )
    assert AuditEvent.objects.filter(
        kind=MemoryAuditKind.WRITTEN, object_id=str(item.pk)
    ).exists()
    assert memory_recall(user=alice, agent=demo.agent, query="open hours")
    own = remembered(alice, "Alice's own fact.", "own")
    page = client.get(f"/admin/memory/memoryitem/{own.pk}/change/")
    assert page.status_code == 200 and b"Save" not in page.content
    listing = client.get("/admin/memory/memoryitem/?scope__exact=agent")
    assert b"Open 9 to 17." in listing.content
    assert client.get("/admin/memory/memoryitem/?tainted=yes").status_code == 200
    edited = client.post(
        f"/admin/memory/memoryitem/{item.pk}/change/",
        {
            "subject": "hours",
            "text": "Open 8 to 16.",
            "expires_at_0": "",
            "expires_at_1": "",
        },
    )
    assert edited.status_code == 302, edited.content.decode()[:3000]
    item.refresh_from_db()
    assert item.text == "Open 8 to 16."
    deleted = client.post(
        f"/admin/memory/memoryitem/{item.pk}/delete/", {"post": "yes"}
    )
    assert deleted.status_code == 302
    assert AuditEvent.objects.filter(kind=MemoryAuditKind.DELETED).exists()
    assert logged_in(alice).get("/admin/memory/memoryitem/").status_code == 302
