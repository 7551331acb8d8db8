"""``/api/memories/``: list, search, create, correct and delete one's own items;
admins also agents' items. alice never sees bob's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from memory.models import MemoryAuditKind, MemoryItem
from memory.services import memory_recall
from tests.support.memory import remembered

pytestmark = pytest.mark.django_db


def test_a_user_lists_and_searches_their_own_items_only(
    alice, bob, items, api_client_for
):
    client = api_client_for(alice)
    listed = client.get("/api/memories/")
    assert listed.status_code == 200
    [item] = listed.json()
    assert item["id"] == str(items["alice"].pk)
    assert item["text"] == "Alice prefers tea, 绿茶."
    assert item["user"] == "alice" and item["scope"] == "user"
    assert item["source"] == {
        "kind": "person",
        "task": None,
        "step": None,
        "user": "alice",
        "label": "alice",
    }
    assert item["state"] == "live" and item["tainted"] is False
    assert client.get("/api/memories/?q=dog").json() == []
    assert [i["id"] for i in client.get("/api/memories/?q=绿茶").json()] == [
        str(items["alice"].pk)
    ]


def test_another_users_item_is_not_found_for_every_method(alice, items, api_client_for):
    client = api_client_for(alice)
    url = f"/api/memories/{items['bob'].pk}/"
    assert client.get(url).status_code == 404
    assert client.patch(url, {"text": "mine now"}, format="json").status_code == 404
    assert client.delete(url).status_code == 404
    items["bob"].refresh_from_db()
    assert items["bob"].text == "Bob's bank PIN hint is his dog."


def test_anonymous_callers_get_401(items, client):
    assert client.get("/api/memories/").status_code == 401
    assert client.delete(f"/api/memories/{items['alice'].pk}/").status_code == 401


def test_create_then_a_fact_on_the_same_subject_supersedes_it(alice, api_client_for):
    client = api_client_for(alice)
    first = client.post(
        "/api/memories/",
        {"subject": "Editor", "text": "Uses vim.", "days": 30},
        format="json",
    )
    assert first.status_code == 201, first.json()
    body = first.json()
    assert body["source"]["kind"] == "person" and body["expires_at"]
    second = client.post(
        "/api/memories/", {"subject": "editor", "text": "Uses emacs."}, format="json"
    )
    assert second.status_code == 201
    assert second.json()["supersedes"] == body["id"]
    assert [i["text"] for i in client.get("/api/memories/").json()] == ["Uses emacs."]
    everything = client.get("/api/memories/?history=true").json()
    old = next(i for i in everything if i["id"] == body["id"])
    assert old["status"] == "superseded"
    assert old["superseded_by"] == second.json()["id"]
    detail = client.get(f"/api/memories/{second.json()['id']}/").json()
    assert [h["id"] for h in detail["history"]] == [body["id"]]


def test_patch_corrects_text_subject_and_expiry(alice, items, api_client_for):
    client = api_client_for(alice)
    url = f"/api/memories/{items['alice'].pk}/"
    changed = client.patch(
        url,
        {"text": "Alice prefers oolong.", "expires_at": "2031-01-02T03:04:05+01:00"},
        format="json",
    )
    assert changed.status_code == 200, changed.json()
    assert changed.json()["text"] == "Alice prefers oolong."
    assert changed.json()["expires_at"] == "2031-01-02T02:04:05+00:00"
    assert memory_recall(user=alice, agent=None, query="oolong")
    assert not memory_recall(user=alice, agent=None, query="绿茶")
    forever = client.patch(url, {"expires_at": None}, format="json")
    assert forever.json()["expires_at"] is None
    gone = client.patch(url, {"days": 1}, format="json").json()
    assert gone["expires_at"] is not None
    past = timezone.now() - timedelta(days=1)
    MemoryItem.objects.filter(pk=items["alice"].pk).update(expires_at=past)
    assert client.get(url).json()["state"] == "expired"
    assert not memory_recall(user=alice, agent=None, query="oolong")


def test_bad_bodies_are_refused_with_400_and_history_with_409(
    alice, items, api_client_for
):
    client = api_client_for(alice)
    assert client.post("/api/memories/", {}, format="json").status_code == 400
    assert (
        client.post("/api/memories/", {"text": "  "}, format="json").status_code == 400
    )
    assert client.post("/api/memories/", {"text": 3}, format="json").status_code == 400
    assert (
        client.post(
            "/api/memories/", {"text": "x", "days": 10**9}, format="json"
        ).status_code
        == 400
    )
    url = f"/api/memories/{items['alice'].pk}/"
    for body in ({"expires_at": "soon"}, {"text": ["a"]}, {"days": True}):
        assert client.patch(url, body, format="json").status_code == 400, body
    remembered(alice, "Alice prefers coffee now.", "drink")
    conflict = client.patch(url, {"text": "again"}, format="json")
    assert conflict.status_code == 409
    assert "superseded" in conflict.json()["error"]


def test_delete_removes_a_fact_with_its_older_versions_and_audits_it(
    alice, items, api_client_for
):
    newer = remembered(alice, "Alice prefers water.", "drink")
    client = api_client_for(alice)
    response = client.delete(f"/api/memories/{newer.pk}/")
    assert response.status_code == 204
    assert not MemoryItem.objects.filter(user=alice).exists()
    event = AuditEvent.objects.get(kind=MemoryAuditKind.DELETED)
    assert event.actor == "alice"
    assert set(event.data["items"]) == {str(newer.pk), str(items["alice"].pk)}
    assert "water" not in str(event.data)


def test_agent_memory_is_for_admins(alice, admin_user, demo, api_client_for):
    body = {"scope": "agent", "agent": "assistant", "text": "Office hours 9-17."}
    alice_client = api_client_for(alice)
    assert alice_client.post("/api/memories/", body, format="json").status_code == 403
    assert alice_client.get("/api/memories/?scope=agent").status_code == 403
    admin = api_client_for(admin_user)
    created = admin.post("/api/memories/", body, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["agent"] == "assistant"
    assert created.json()["user"] is None
    listed = admin.get("/api/memories/?scope=agent&agent=assistant").json()
    assert [i["id"] for i in listed] == [created.json()["id"]]
    assert admin.get("/api/memories/").json() == []
    url = f"/api/memories/{created.json()['id']}/"
    assert alice_client.get(url).status_code == 404
    # Everyone who talks to the agent is given it.
    assert memory_recall(user=alice, agent=demo.agent, query="office hours")


def test_secrets_are_redacted_before_they_are_stored(alice, api_client_for):
    client = api_client_for(alice)
    created = client.post(
        "/api/memories/",
        {"subject": "token", "text": "My key is sk-abcdefghijklmnopqrstuvwx"},
        format="json",
    )
    assert created.status_code == 201
    stored = MemoryItem.objects.get()
    assert "sk-abc" not in stored.text + stored.text_terms
    assert "[REDACTED:api_key]" in created.json()["text"]


def test_every_write_is_audited_without_its_text(alice, items, api_client_for):
    client = api_client_for(alice)
    client.patch(
        f"/api/memories/{items['alice'].pk}/", {"text": "Secret tea."}, format="json"
    )
    kinds = list(
        AuditEvent.objects.filter(object_type="memory")
        .order_by("position")
        .values_list("kind", "object_id")
    )
    assert kinds == [
        (MemoryAuditKind.WRITTEN, str(items["alice"].pk)),
        (MemoryAuditKind.WRITTEN, str(items["bob"].pk)),
        (MemoryAuditKind.CHANGED, str(items["alice"].pk)),
    ]
    assert "tea" not in str(AuditEvent.objects.values_list("data", flat=True))
