"""Pages render for the right people, server-side, with the shared step partial."""

from __future__ import annotations

import re
import uuid

import pytest
from django.test import Client

from infra.api.auth import STALE_PAGE
from runs import services as runs
from runs.models import Conversation
from tests.support.cast import QUESTION
from tests.support.clients import logged_in
from tests.support.memory import remembered
from tests.support.replies import Script, text
from tests.support.runs import ask
from tests.support.scripted_model import RedisScript

pytestmark = pytest.mark.django_db(transaction=True)


def test_pages_need_login():
    client = Client()
    for path in ["/", "/approvals/", "/traces/"]:
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")


def test_login_lands_on_the_chat(demo):
    client = Client()
    response = client.post(
        "/accounts/login/", {"username": "alice", "password": demo.password}
    )
    assert response.status_code == 302 and response["Location"] == "/"
    page = client.get("/")
    assert page.status_code == 200
    assert b"Ask the assistant agent" in page.content


def test_a_reloaded_conversation_shows_every_step_and_the_answer(alice, demo, model):
    model(RedisScript())
    task = ask(alice, demo.agent, QUESTION)
    html = logged_in(alice).get(f"/c/{task.conversation_id}/").content.decode()
    for seq in range(1, 6):
        assert f'id="step-{task.pk}-{seq}"' in html
    assert "search_notes" in html and "calculate" in html
    assert "128 * 6 + 320" in html and "1088" in html
    assert "缓存改造" in html
    assert "scripted-model" in html


def test_bob_gets_404_for_alices_conversation_page(alice, bob, demo):
    conversation = runs.conversation_create(owner=alice, agent=demo.agent)
    assert logged_in(bob).get(f"/c/{conversation.pk}/").status_code == 404


def test_the_approval_queue_is_for_approvers(alice, operator):
    assert logged_in(alice).get("/approvals/").status_code == 403
    assert logged_in(operator).get("/approvals/").status_code == 200
    assert logged_in(operator).get("/approvals/history/").status_code == 200


def test_traces_list_shows_own_runs_and_auditors_see_all(alice, bob, operator, demo):
    runs.task_start(
        conversation=runs.conversation_create(owner=alice, agent=demo.agent),
        content="alice asks",
    )
    runs.task_start(
        conversation=runs.conversation_create(owner=bob, agent=demo.agent),
        content="bob asks",
    )
    alice_page = logged_in(alice).get("/traces/").content.decode()
    assert "alice asks" in alice_page and "bob asks" not in alice_page
    operator_page = logged_in(operator).get("/traces/").content.decode()
    assert "alice asks" in operator_page and "bob asks" in operator_page


def test_trace_detail_is_404_for_other_users(alice, bob, demo):
    task = runs.task_start(
        conversation=runs.conversation_create(owner=alice, agent=demo.agent),
        content="alice asks",
    )
    assert logged_in(alice).get(f"/traces/{task.pk}/").status_code == 200
    assert logged_in(bob).get(f"/traces/{task.pk}/").status_code == 404


def test_pages_send_a_strict_content_security_policy(alice):
    response = logged_in(alice).get("/")
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy


def test_model_output_is_escaped_in_the_page(alice, demo, model):
    model(Script([text("<script>alert(1)</script><img src=x onerror=1>")]))
    task = ask(alice, demo.agent, "<b>hi</b>")
    html = logged_in(alice).get(f"/c/{task.conversation_id}/").content.decode()
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
    assert "<b>hi</b>" not in html


def test_the_composer_takes_its_limit_from_the_message_limit(alice, settings):
    settings.REACH_MAX_MESSAGE_CHARS = 1234
    html = logged_in(alice).get("/").content.decode()
    # chat.js refuses a longer message with the reason (it never cuts it off).
    assert 'data-max-chars="1234"' in html
    assert 'data-max-chars="8000"' not in html and "maxlength" not in html


def test_a_page_refused_or_not_found_keeps_the_navigation_and_a_way_back(alice, demo):
    client = logged_in(alice)

    refused = client.get("/console/")
    missing = client.get(f"/traces/{uuid.uuid4()}/")

    assert refused.status_code == 403 and missing.status_code == 404
    for page in (refused, missing):
        html = page.content.decode()
        assert 'class="topbar"' in html and 'href="/traces/"' in html
        assert "Back to the chat" in html
    assert "You may not open this page" in refused.content.decode()
    # The API keeps its JSON answers.
    assert client.get(f"/api/tasks/{uuid.uuid4()}/").json()["error"]


def test_a_forms_action_reached_by_a_get_goes_back_to_its_page_and_says_so(
    alice, operator, demo
):
    """A login page's ?next= brings the browser back to a form's action with a
    GET (the session ended under an open page): not a blank 405."""
    item = remembered(alice, "My team is Platform.", "team")
    for user, action, page in (
        (alice, "/c/new/", "/"),
        (alice, "/memory/add/", "/memory/"),
        (alice, f"/memory/{item.pk}/edit/", "/memory/"),
        (alice, f"/memory/{item.pk}/delete/", "/memory/"),
        (operator, "/console/cancel/", "/console/"),
    ):
        client = logged_in(user)
        back = client.get(action, follow=True)
        assert back.redirect_chain == [(page, 302)], action
        assert "Nothing was sent from that form" in back.content.decode(), action
        assert client.put(action).status_code == 405, action
        # A HEAD (a link prefetcher) leaves no message behind for the next page.
        assert client.head(action).status_code == 302, action
        assert "Nothing was sent" not in client.get(page).content.decode(), action
    assert Conversation.objects.count() == 0
    item.refresh_from_db()
    assert item.status == "live"


def test_a_form_refused_for_its_stale_csrf_token_says_to_reload_in_the_sites_frame(
    alice, demo
):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)

    refused = client.post("/c/new/", {"agent": "assistant"})

    assert refused.status_code == 403
    html = refused.content.decode()
    assert 'class="topbar"' in html and "Reload the page, then send it again" in html
    assert "<style" not in html  # Django's own page is refused by the CSP
    assert Conversation.objects.count() == 0
    # The chat's own requests (the API, on the same session) say the same.
    api = client.post(
        "/api/conversations/", {"agent": "assistant"}, content_type="application/json"
    )
    assert api.status_code == 403
    assert api.json()["error"] == STALE_PAGE
    assert Conversation.objects.count() == 0


def test_the_chats_list_leads_on_to_older_conversations(alice, demo):
    made = [runs.conversation_create(owner=alice, agent=demo.agent) for _ in range(102)]
    client = logged_in(alice)

    first = client.get(f"/c/{made[0].pk}/").content.decode()
    listed = re.findall(r'<a href="/c/([0-9a-f-]+)/"', first)
    assert len(listed) == 100 and str(made[0].pk) not in listed
    assert 'href="?conversations=200"' in first

    every = client.get(f"/c/{made[0].pk}/?conversations=200").content.decode()
    assert set(re.findall(r'<a href="/c/([0-9a-f-]+)/"', every)) == {
        str(c.pk) for c in made
    }
    assert "Show older conversations" not in every


def test_new_chat_reuses_the_empty_conversation_and_starts_one_after_a_message(
    alice, bob, demo, model
):
    model(Script([text("hello")]))
    client = logged_in(alice)
    first = client.post("/c/new/", {"agent": "assistant"})
    again = client.post("/c/new/", {"agent": "assistant"})
    assert first["Location"] == again["Location"]
    logged_in(bob).post("/c/new/", {"agent": "assistant"})  # bob's own
    assert Conversation.objects.filter(owner=alice).count() == 1

    ask(alice, demo.agent, "hi", conversation=Conversation.objects.get(owner=alice))
    after = client.post("/c/new/", {"agent": "assistant"})

    assert after["Location"] != first["Location"]
    assert Conversation.objects.filter(owner=alice).count() == 2
